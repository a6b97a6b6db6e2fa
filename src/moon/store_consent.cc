// Store: pack signatures and the operator's approvals (SPEC.md C12; schema 6, store.cc).
// Each write and its event are one transaction: an approval is never stored without the
// `pack_approved` event that records it, nor the reverse.
#include <sqlite3.h>

#include <string>
#include <utility>

#include "moon/sqlite_util.h"
#include "moon/store_sql.h"
#include "moon/store.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using detail::db_error;
using detail::exec;
using detail::prepare;
using detail::read_rows;
using detail::step_done;
using detail::Stmt;
using detail::Txn;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kApprovalColumns =
    "SELECT id, repository, digest, reference, manifest, approved_at, by_uid, by_user FROM approvals ";

ApprovalRecord approval_row(Stmt& st) {
  ApprovalRecord a;
  a.id = st.integer(0);
  a.repository = st.text(1);
  a.digest = st.text(2);
  a.reference = st.text(3);
  a.manifest = st.text(4);
  a.approved_at = st.text(5);
  a.by.uid = st.integer(6);
  a.by.user = st.text(7);
  return a;
}

SignatureRecord signature_row(Stmt& st) {
  SignatureRecord r;
  r.id = st.integer(0);
  r.manifest_digest = st.text(1);
  r.key_id = st.text(2);
  r.signature = st.text(3);
  r.reference = st.text(4);
  r.added_at = st.text(5);
  r.by.uid = st.integer(6);
  r.by.user = st.text(7);
  return r;
}

}  // namespace

Result<bool> Store::add_signature(const SignatureRecord& sig, const json& event) {
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (auto s = txn.begin(); !s) return s.error();
  auto st = prepare(db_, path_,
                    "INSERT OR IGNORE INTO signatures (manifest_digest, key_id, signature, reference, added_at, "
                    "by_uid, by_user) VALUES (?1,?2,?3,?4,?5,?6,?7)");
  if (!st) return st.error();
  st->bind(1, sig.manifest_digest).bind(2, sig.key_id).bind(3, sig.signature).bind(4, sig.reference);
  st->bind(5, sig.added_at.empty() ? scope::now_rfc3339() : sig.added_at).bind(6, sig.by.uid).bind(7, sig.by.user);
  if (auto s = step_done(*st, db_, path_, "store a signature of " + sig.manifest_digest); !s) return s.error();
  if (sqlite3_changes(db_) == 0) return false;
  if (!event.is_null()) {
    if (auto s = append_events(std::span<const json>(&event, 1)); !s) return s.error();
  }
  if (auto s = txn.commit(); !s) return s.error();
  if (auto s = flush_head(); !s) return s.error();
  return true;
}

Result<std::vector<SignatureRecord>> Store::signatures(const std::string& manifest_digest) {
  auto st = prepare(db_, path_,
                    "SELECT id, manifest_digest, key_id, signature, reference, added_at, by_uid, by_user "
                    "FROM signatures WHERE manifest_digest=?1 ORDER BY id");
  if (!st) return st.error();
  st->bind(1, manifest_digest);
  return read_rows(*st, signature_row, db_, path_, "read the signatures of " + manifest_digest);
}

Status Store::add_approval(const ApprovalRecord& a, const json& event) {
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (auto s = txn.begin(); !s) return s;
  auto st = prepare(db_, path_,
                    "INSERT INTO approvals (repository, digest, reference, manifest, approved_at, by_uid, by_user) "
                    "VALUES (?1,?2,?3,?4,?5,?6,?7)");
  if (!st) return st.error();
  st->bind(1, a.repository).bind(2, a.digest).bind(3, a.reference).bind(4, a.manifest);
  st->bind(5, a.approved_at.empty() ? scope::now_rfc3339() : a.approved_at).bind(6, a.by.uid).bind(7, a.by.user);
  if (auto s = step_done(*st, db_, path_, "store the approval of " + a.reference); !s) return s;
  if (auto s = append_events(std::span<const json>(&event, 1)); !s) return s;
  if (auto s = txn.commit(); !s) return s;
  return flush_head();
}

Result<std::optional<ApprovalRecord>> Store::last_approval(const std::string& repository) {
  auto st = prepare(db_, path_, std::string(kApprovalColumns) + "WHERE repository=?1 ORDER BY id DESC LIMIT 1");
  if (!st) return st.error();
  st->bind(1, repository);
  const int rc = st->step();
  if (rc == SQLITE_ROW) return std::optional<ApprovalRecord>(approval_row(*st));
  if (rc != SQLITE_DONE) return db_error(db_, path_, "read the approvals of " + repository);
  return std::optional<ApprovalRecord>();
}

Result<std::vector<ApprovalRecord>> Store::approvals_of(const std::string& digest) {
  auto st = prepare(db_, path_, std::string(kApprovalColumns) + "WHERE digest=?1 ORDER BY id");
  if (!st) return st.error();
  st->bind(1, digest);
  return read_rows(*st, approval_row, db_, path_, "read the approvals of " + digest);
}

}  // namespace soyaos::moon
