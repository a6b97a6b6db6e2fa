// Store: flags that travel between hosts (SPEC.md C12, C8 (4); schema 7, store.cc). Which
// registry packs this Moon holds (remote_origins), and the outbox of flags to publish to
// their registries as referrers (flag_outbox): durable, bounded, retried with backoff by
// cli/remote_flags.cc.
#include <sqlite3.h>

#include <span>
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
using json = nlohmann::ordered_json;

FlagRecord flag_from(Stmt& st) {
  FlagRecord f;
  f.id = st.integer(0);
  f.name = st.text(1);
  f.version = st.text(2);
  f.digest = st.text(3);
  f.run_id = st.text(4);
  f.violation = st.text(5);
  f.flagged_at = st.text(6);
  f.cleared = st.integer(7) != 0;
  f.cleared_at = st.text(8);
  f.cleared_by.uid = st.integer(9);
  f.cleared_by.user = st.text(10);
  f.cleared_reason = st.text(11);
  f.origin = st.text(12);
  f.active = !f.cleared;
  return f;
}

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

// ---- flags of this Moon (C8 (4)): raised by a violation, cleared by pack unflag ----

Result<bool> Store::add_flag(const FlagRecord& f, const json& flagged_event) {
  // Autocommit: the flag is durable before its event is written (flag first).
  auto st = prepare(db_, path_,
                    "INSERT OR IGNORE INTO flags (name, version, digest, run_id, violation, flagged_at, packs_seen, origin) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, (SELECT COALESCE(MAX(id), 0) FROM packs), ?7)");
  if (!st) return st.error();
  st->bind(1, f.name).bind(2, f.version).bind(3, f.digest).bind(4, f.run_id).bind(5, f.violation);
  st->bind(6, f.flagged_at.empty() ? scope::now_rfc3339() : f.flagged_at).bind(7, f.origin);
  if (auto s = step_done(*st, db_, path_, "flag " + f.name + "@" + f.version); !s) return s.error();
  if (sqlite3_changes(db_) == 0) return false;
  if (auto s = append_events(std::span<const json>(&flagged_event, 1)); !s)
    return make_error("flag " + f.name + "@" + f.version + " is stored, its pack_flagged event is not: " +
                      s.error().describe());
  return true;
}

Result<std::vector<FlagRecord>> Store::flags(const std::string& name, const std::string& version,
                                             const std::string& digest) {
  auto st = prepare(db_, path_,
                    "SELECT id, name, version, digest, run_id, violation, flagged_at, cleared, "
                    "COALESCE(cleared_at, ''), COALESCE(cleared_by_uid, -1), COALESCE(cleared_by_user, ''), "
                    "COALESCE(cleared_reason, ''), origin FROM flags "
                    "WHERE (name=?1 AND version=?2) OR (?3 <> '' AND digest=?3) ORDER BY id");
  if (!st) return st.error();
  st->bind(1, name).bind(2, version).bind(3, digest);
  return read_rows(*st, flag_from, db_, path_, "read flags of " + name + "@" + version);
}

Result<int> Store::clear_flags(const std::string& name, const std::string& version, const std::string& digest,
                               const Actor& actor, const std::string& reason, json unflagged_event) {
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (auto s = txn.begin(); !s) return s.error();
  auto st = prepare(db_, path_,
                    "UPDATE flags SET cleared=1, cleared_at=?4, cleared_by_uid=?5, cleared_by_user=?6, "
                    "cleared_reason=?7 WHERE ((name=?1 AND version=?2) OR (?3 <> '' AND digest=?3)) AND cleared=0");
  if (!st) return st.error();
  st->bind(1, name).bind(2, version).bind(3, digest).bind(4, scope::now_rfc3339());
  st->bind(5, actor.uid).bind(6, actor.user).bind(7, reason);
  if (auto s = step_done(*st, db_, path_, "unflag " + name + "@" + version); !s) return s.error();
  const int n = sqlite3_changes(db_);
  if (n > 0) {
    unflagged_event["data"]["cleared"] = n;
    if (auto s = append_events(std::span<const json>(&unflagged_event, 1)); !s) return s.error();
  }
  if (auto s = txn.commit(); !s) return s.error();
  if (auto s = flush_head(); !s) return s.error();
  return n;
}


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
  const bool full = count->integer(0) >= kMaxQueuedFlags;
  count->reset();  // no statement may stay at a row through COMMIT (the WAL hook's checkpoint)
  if (full) return Queued::full;
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

Result<std::vector<QueuedFlag>> Store::queued_flags(const std::string& registry, int64_t now, int64_t limit,
                                                   int64_t run_uid) {
  // The uid filter reads each row's run_started through events_run (run_id): one query,
  // not one per row.
  auto st = prepare(db_, path_,
                    "SELECT id, registry, repository, manifest_digest, manifest_size, run_id, body, queued_at, "
                    "attempts, next_attempt, last_error, COALESCE(published_at, ''), COALESCE(referrer, '') "
                    "FROM flag_outbox WHERE published_at IS NULL AND (?1 = '' OR registry=?1) "
                    "AND (?2 <= 0 OR (next_attempt <= ?2 AND claimed_until <= ?2)) "
                    "AND (?4 < 0 OR EXISTS (SELECT 1 FROM events e WHERE e.run_id = flag_outbox.run_id "
                    "AND e.type = 'run_started' AND json_extract(e.json, '$.soyaosuid') = ?4)) "
                    "ORDER BY id LIMIT ?3");
  if (!st) return st.error();
  st->bind(1, registry).bind(2, now).bind(3, limit).bind(4, run_uid);
  return read_rows(*st, queued_row, db_, path_, "read the queued flags");
}

Result<std::optional<QueuedFlag>> Store::queued_flag(int64_t id) {
  auto st = prepare(db_, path_,
                    "SELECT id, registry, repository, manifest_digest, manifest_size, run_id, body, queued_at, "
                    "attempts, next_attempt, last_error, COALESCE(published_at, ''), COALESCE(referrer, '') "
                    "FROM flag_outbox WHERE id=?1");
  if (!st) return st.error();
  st->bind(1, id);
  auto rows = read_rows(*st, queued_row, db_, path_, "read queued flag " + std::to_string(id));
  if (!rows) return rows.error();
  if (rows->empty()) return std::optional<QueuedFlag>();
  return std::optional<QueuedFlag>(std::move(rows->front()));
}

Result<bool> Store::claim_flag(int64_t id, int64_t now, int64_t until, const std::string& by) {
  // One statement: of two publishers that claim the same row, exactly one changes it. Not
  // while another flag of the same subject is held either: a registry without the
  // referrers API lists a subject's referrers in one index (the sha256-HEX tag) that each
  // push reads, extends and writes back, so two pushes of one subject at once lose one.
  auto st = prepare(db_, path_,
                    "UPDATE flag_outbox SET claimed_until=?3, claimed_by=?4 "
                    "WHERE id=?1 AND published_at IS NULL AND claimed_until <= ?2 AND NOT EXISTS ("
                    "SELECT 1 FROM flag_outbox o WHERE o.id != ?1 AND o.registry = flag_outbox.registry "
                    "AND o.repository = flag_outbox.repository AND o.manifest_digest = flag_outbox.manifest_digest "
                    "AND o.published_at IS NULL AND o.claimed_until > ?2)");
  if (!st) return st.error();
  st->bind(1, id).bind(2, now).bind(3, until).bind(4, by);
  if (auto s = step_done(*st, db_, path_, "claim queued flag " + std::to_string(id)); !s) return s.error();
  return sqlite3_changes(db_) > 0;
}

Status Store::flag_published(int64_t id, const std::string& referrer) {
  auto st = prepare(db_, path_,
                    "UPDATE flag_outbox SET published_at=?2, referrer=?3, attempts=attempts+1, last_error='', "
                    "claimed_until=0, claimed_by='' WHERE id=?1");
  if (!st) return st.error();
  st->bind(1, id).bind(2, scope::now_rfc3339()).bind(3, referrer);
  return step_done(*st, db_, path_, "mark a queued flag published");
}

Status Store::flag_publish_failed(int64_t id, const std::string& error, int64_t next_attempt) {
  auto st = prepare(db_, path_,
                    "UPDATE flag_outbox SET attempts=attempts+1, last_error=?2, next_attempt=?3, claimed_until=0, "
                    "claimed_by='' WHERE id=?1");
  if (!st) return st.error();
  st->bind(1, id).bind(2, error).bind(3, next_attempt);
  return step_done(*st, db_, path_, "record a failed flag publication");
}

}  // namespace soyaos::moon
