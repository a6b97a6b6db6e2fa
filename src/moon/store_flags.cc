// Store: flags that travel between hosts (SPEC.md C12, C8 (4); schema 7, store.cc). Which
// registry packs this Moon holds (remote_origins), and the outbox of flags to publish to
// their registries as referrers (flag_outbox): durable, bounded, retried with backoff by
// cli/remote_flags.cc.
#include <sqlite3.h>

#include <string>
#include <utility>

#include "moon/sqlite_util.h"
#include "moon/store.h"
#include "moon/store_sql.h"
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

RemoteOrigin origin_row(Stmt& st) {
  RemoteOrigin o;
  o.tree_digest = st.text(0);
  o.registry = st.text(1);
  o.repository = st.text(2);
  o.manifest_digest = st.text(3);
  o.manifest_size = st.integer(4);
  o.name = st.text(5);
  o.version = st.text(6);
  return o;
}

QueuedFlag queued_row(Stmt& st) {
  QueuedFlag q;
  q.id = st.integer(0);
  q.registry = st.text(1);
  q.repository = st.text(2);
  q.manifest_digest = st.text(3);
  q.manifest_size = st.integer(4);
  q.run_id = st.text(5);
  q.body = st.text(6);
  q.queued_at = st.text(7);
  q.attempts = st.integer(8);
  q.next_attempt = st.integer(9);
  q.last_error = st.text(10);
  q.published_at = st.text(11);
  q.referrer = st.text(12);
  return q;
}

}  // namespace

Status Store::add_remote_origin(const RemoteOrigin& o) {
  auto st = prepare(db_, path_,
                    "INSERT OR IGNORE INTO remote_origins (tree_digest, registry, repository, manifest_digest, "
                    "manifest_size, name, version, seen_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)");
  if (!st) return st.error();
  st->bind(1, o.tree_digest).bind(2, o.registry).bind(3, o.repository).bind(4, o.manifest_digest);
  st->bind(5, o.manifest_size).bind(6, o.name).bind(7, o.version).bind(8, scope::now_rfc3339());
  return step_done(*st, db_, path_, "record where " + o.name + "@" + o.version + " came from");
}

Result<std::vector<RemoteOrigin>> Store::remote_origins(const std::string& tree_digest) {
  auto st = prepare(db_, path_,
                    "SELECT tree_digest, registry, repository, manifest_digest, manifest_size, name, version "
                    "FROM remote_origins WHERE tree_digest=?1 ORDER BY rowid");
  if (!st) return st.error();
  st->bind(1, tree_digest);
  return read_rows(*st, origin_row, db_, path_, "read where " + tree_digest + " came from");
}

Result<Store::Queued> Store::queue_flag(const QueuedFlag& q) {
  // The count and the insert in one write transaction: two runs never both take the last place.
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (auto s = txn.begin(); !s) return s.error();
  auto count = prepare(db_, path_, "SELECT COUNT(*) FROM flag_outbox WHERE published_at IS NULL");
  if (!count) return count.error();
  if (count->step() != SQLITE_ROW) return db_error(db_, path_, "count the queued flags");
  if (count->integer(0) >= kMaxQueuedFlags) return Queued::full;
  auto st = prepare(db_, path_,
                    "INSERT OR IGNORE INTO flag_outbox (registry, repository, manifest_digest, manifest_size, run_id, "
                    "body, queued_at) VALUES (?1,?2,?3,?4,?5,?6,?7)");
  if (!st) return st.error();
  st->bind(1, q.registry).bind(2, q.repository).bind(3, q.manifest_digest).bind(4, q.manifest_size);
  st->bind(5, q.run_id).bind(6, q.body).bind(7, q.queued_at.empty() ? scope::now_rfc3339() : q.queued_at);
  if (auto s = step_done(*st, db_, path_, "queue a flag of " + q.manifest_digest); !s) return s.error();
  const bool added = sqlite3_changes(db_) > 0;
  if (auto s = txn.commit(); !s) return s.error();
  return added ? Queued::queued : Queued::duplicate;
}

Result<std::vector<QueuedFlag>> Store::queued_flags(const std::string& registry, int64_t now, int64_t limit) {
  auto st = prepare(db_, path_,
                    "SELECT id, registry, repository, manifest_digest, manifest_size, run_id, body, queued_at, "
                    "attempts, next_attempt, last_error, COALESCE(published_at, ''), COALESCE(referrer, '') "
                    "FROM flag_outbox WHERE published_at IS NULL AND (?1 = '' OR registry=?1) "
                    "AND (?2 <= 0 OR next_attempt <= ?2) ORDER BY id LIMIT ?3");
  if (!st) return st.error();
  st->bind(1, registry).bind(2, now).bind(3, limit);
  return read_rows(*st, queued_row, db_, path_, "read the queued flags");
}

Status Store::flag_published(int64_t id, const std::string& referrer) {
  auto st = prepare(db_, path_,
                    "UPDATE flag_outbox SET published_at=?2, referrer=?3, attempts=attempts+1, last_error='' "
                    "WHERE id=?1");
  if (!st) return st.error();
  st->bind(1, id).bind(2, scope::now_rfc3339()).bind(3, referrer);
  return step_done(*st, db_, path_, "mark a queued flag published");
}

Status Store::flag_publish_failed(int64_t id, const std::string& error, int64_t next_attempt) {
  auto st = prepare(db_, path_,
                    "UPDATE flag_outbox SET attempts=attempts+1, last_error=?2, next_attempt=?3 WHERE id=?1");
  if (!st) return st.error();
  st->bind(1, id).bind(2, error).bind(3, next_attempt);
  return step_done(*st, db_, path_, "record a failed flag publication");
}

}  // namespace soyaos::moon
