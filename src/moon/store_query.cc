// Store: reading the Scope's events (query_events, the SQL behind `soyaos scope query`)
// and checking moon.db itself (`soyaos moon check`). Split from store.cc by concern.
#include <sqlite3.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "moon/sqlite_util.h"
#include "moon/store.h"
#include "moon/store_sql.h"

namespace soyaos::moon {

using detail::corrupt_error;
using detail::db_error;
using detail::is_corruption;
using detail::prepare;

namespace {

// The SQL of query_events and the values of its parameters ?2.. (?1 is after_seq).
struct EventSql {
  std::string sql;
  std::vector<std::string> binds;
};
EventSql event_sql(const EventQuery& q) {
  std::string sql = "SELECT seq, time, type, COALESCE(run_id,''), COALESCE(pack,''), COALESCE(version,''), json, "
                    "COALESCE(prev_hash,''), COALESCE(hash,'') FROM events WHERE seq > ?1";
  std::vector<std::string> binds;
  auto param = [&](const std::string* v) {
    binds.push_back(*v);
    return "?" + std::to_string(binds.size() + 1);
  };
  if (q.run_id) sql += " AND run_id = " + param(&*q.run_id);
  std::vector<std::string> types = q.types;
  if (q.type) types.push_back(*q.type);
  if (!types.empty()) {
    sql += " AND type IN (";
    for (size_t i = 0; i < types.size(); ++i) sql += (i == 0 ? "" : ",") + param(&types[i]);
    sql += ")";
  }
  if (q.pack) sql += " AND pack = " + param(&*q.pack);
  if (q.version) sql += " AND version = " + param(&*q.version);
  // The expression indexes of schema 5 serve this and --user: keep the expressions as they are there.
  if (q.digest) sql += " AND json_extract(json, '$.data.digest') = " + param(&*q.digest);
  const std::string uid_text = q.uid ? std::to_string(*q.uid) : std::string();
  if (q.uid) {
    // Who: the user of the event's run — the daemon's attribution (soyaosuid, from
    // SO_PEERCRED) when the run went through it, else the user run_started recorded — or
    // the actor of a change to the Moon's state (push, flag, unflag). Both are found by the
    // expression indexes of schema 5 (events_run_uid, events_actor_uid).
    const std::string p = param(&uid_text);
    sql += " AND (run_id IN (SELECT run_id FROM events WHERE type = 'run_started' AND run_id IS NOT NULL AND "
           "CAST(COALESCE(json_extract(json, '$.soyaosuid'), json_extract(json, '$.data.user.uid')) AS TEXT) = " + p +
           ") OR CAST(json_extract(json, '$.data.actor.uid') AS TEXT) = " + p + ")";
  }
  if (q.since) sql += " AND time >= " + param(&*q.since);
  if (q.until) sql += " AND time < " + param(&*q.until);
  if (q.limit > 0) {
    sql += std::string(q.first ? " ORDER BY seq" : " ORDER BY seq DESC") + " LIMIT " + std::to_string(q.limit);
  } else {
    sql += " ORDER BY seq";
  }
  return {std::move(sql), std::move(binds)};
}

}  // namespace

Result<std::vector<std::string>> Store::explain_query(const EventQuery& q) {
  const EventSql e = event_sql(q);
  auto st = prepare(db_, path_, "EXPLAIN QUERY PLAN " + e.sql);
  if (!st) return st.error();
  st->bind(1, q.after_seq);
  for (size_t i = 0; i < e.binds.size(); ++i) st->bind(static_cast<int>(i + 2), e.binds[i]);
  std::vector<std::string> out;
  int rc = 0;
  while ((rc = st->step()) == SQLITE_ROW) out.push_back(st->text(3));
  if (rc != SQLITE_DONE) return db_error(db_, path_, "explain a query");
  return out;
}

Result<std::vector<StoredEvent>> Store::query_events(const EventQuery& q) {
  const EventSql e = event_sql(q);
  auto st = prepare(db_, path_, e.sql);
  if (!st) return st.error();
  st->bind(1, q.after_seq);
  for (size_t i = 0; i < e.binds.size(); ++i) st->bind(static_cast<int>(i + 2), e.binds[i]);
  std::vector<StoredEvent> out;
  int rc = 0;
  while ((rc = st->step()) == SQLITE_ROW) {
    out.push_back({st->integer(0), st->text(1), st->text(2), st->text(3), st->text(4), st->text(5), st->text(6),
                   st->text(7), st->text(8)});
  }
  if (rc != SQLITE_DONE) {
    if (is_corruption(rc)) return corrupt_error(db_, path_, sqlite3_errmsg(db_));
    return db_error(db_, path_, "query events");
  }
  if (q.limit > 0 && !q.first) std::reverse(out.begin(), out.end());
  return out;
}

// ---- maintenance ----

Result<std::vector<std::string>> Store::check_integrity() {
  std::vector<std::string> problems;
  // integrity_check reads every page (quick_check skips index/table consistency); at most
  // 100 messages, enough to say what is wrong without flooding the report.
  auto integrity = prepare(db_, path_, "PRAGMA integrity_check(100)");
  if (!integrity) return integrity.error();
  int rc = 0;
  while ((rc = integrity->step()) == SQLITE_ROW) {
    const std::string row = integrity->text(0);
    if (row == "ok") continue;
    // A row may hold several lines, headed "*** in database main ***": one problem a line.
    size_t start = 0;
    while (start <= row.size()) {
      size_t end = row.find('\n', start);
      if (end == std::string::npos) end = row.size();
      const std::string line = row.substr(start, end - start);
      if (!line.empty() && line.rfind("*** in database", 0) != 0) problems.push_back("integrity_check: " + line);
      start = end + 1;
    }
  }
  if (rc != SQLITE_DONE) {
    // A page so damaged that the check itself stops: that is a finding, not a failure to check.
    problems.push_back(std::string("integrity_check stopped: ") + sqlite3_errmsg(db_) +
                       " (move the file aside to start a fresh index; blobs under oci/ are kept)");
    return problems;
  }
  auto fk = prepare(db_, path_, "PRAGMA foreign_key_check");
  if (!fk) return fk.error();
  while ((rc = fk->step()) == SQLITE_ROW) {
    problems.push_back("foreign_key_check: table " + fk->text(0) + " row " + std::to_string(fk->integer(1)) +
                       " refers to a missing row of " + fk->text(2));
  }
  if (rc != SQLITE_DONE) problems.push_back(std::string("foreign_key_check stopped: ") + sqlite3_errmsg(db_));
  return problems;
}

}  // namespace soyaos::moon
