// The Moon database's schema and its upgrades (moon/store.h): each version's SQL, applied
// in order in one transaction by Store::init_schema; a current database costs one read of
// user_version.
#include <sqlite3.h>

#include <string>

#include "moon/sqlite_util.h"
#include "moon/store.h"
#include "moon/store_sql.h"

namespace soyaos::moon {
namespace {

using detail::db_error;
using detail::exec;
using detail::prepare;
using detail::Txn;

const char* const kSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS packs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  digest TEXT NOT NULL,
  tree_digest TEXT NOT NULL,
  oci_manifest TEXT NOT NULL,
  oci_manifest_size INTEGER NOT NULL,
  size INTEGER NOT NULL,
  pushed_at TEXT NOT NULL,
  manifest TEXT NOT NULL,
  UNIQUE (name, version)
);
CREATE INDEX IF NOT EXISTS packs_digest ON packs (digest);
CREATE INDEX IF NOT EXISTS packs_tree_digest ON packs (tree_digest);
CREATE TABLE IF NOT EXISTS flags (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  run_id TEXT NOT NULL,
  violation TEXT NOT NULL,
  flagged_at TEXT NOT NULL,
  packs_seen INTEGER NOT NULL,
  cleared INTEGER NOT NULL DEFAULT 0,
  cleared_at TEXT,
  UNIQUE (name, version, run_id)
);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time TEXT NOT NULL,
  type TEXT NOT NULL,
  run_id TEXT,
  pack TEXT,
  version TEXT,
  json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events (run_id);
CREATE INDEX IF NOT EXISTS events_type ON events (type);
CREATE INDEX IF NOT EXISTS events_pack ON events (pack);
CREATE INDEX IF NOT EXISTS events_time ON events (time);
)sql";

// Schema 2 (C8 (4)): a flag records the digest that ran (directory runs flag by digest)
// and who cleared it and why.
const char* const kSchemaV2 = R"sql(
ALTER TABLE flags ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE flags ADD COLUMN cleared_by_uid INTEGER;
ALTER TABLE flags ADD COLUMN cleared_by_user TEXT;
ALTER TABLE flags ADD COLUMN cleared_reason TEXT;
CREATE INDEX IF NOT EXISTS flags_digest ON flags (digest);
)sql";

// Schema 3 (E6): the hash chain (prev_hash, hash of every event), the signed checkpoints
// of it, and when the events stored before this schema were chained (docs/events.md).
const char* const kSchemaV3 = R"sql(
ALTER TABLE events ADD COLUMN prev_hash TEXT;
ALTER TABLE events ADD COLUMN hash TEXT;
CREATE TABLE IF NOT EXISTS checkpoints (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  seq INTEGER NOT NULL,
  hash TEXT NOT NULL,
  time TEXT NOT NULL,
  key_id TEXT NOT NULL,
  signature TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_seq ON checkpoints (seq);
CREATE TABLE IF NOT EXISTS chain_meta (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
)sql";


// Schema 4 (E5): the manifest of every run, directory runs included, by the sha256 of
// its bytes (run_started's manifest_digest).
const char* const kSchemaV4 = R"sql(
CREATE TABLE IF NOT EXISTS manifests (
  digest TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  stored_at TEXT NOT NULL
);
)sql";

// Schema 5 (E7): expression indexes for the filters `scope query` reads out of the JSON —
// `--pack sha256:` (data.digest), and `--user` (the uid of a run_started: the daemon's
// soyaosuid, else data.user.uid; and the actor of a Moon change). Without them each of
// these scanned every event (~2 s at 250k events). The expressions must stay identical to
// query_events' for SQLite to use them (docs/events.md, Queries).
const char* const kSchemaV5 = R"sql(
CREATE INDEX IF NOT EXISTS events_digest ON events (json_extract(json, '$.data.digest'));
CREATE INDEX IF NOT EXISTS events_run_uid ON events
  (CAST(COALESCE(json_extract(json, '$.soyaosuid'), json_extract(json, '$.data.user.uid')) AS TEXT))
  WHERE type = 'run_started';
CREATE INDEX IF NOT EXISTS events_actor_uid ON events (CAST(json_extract(json, '$.data.actor.uid') AS TEXT));
)sql";

// Schema 6 (C12): pack signatures (by the OCI manifest digest they cover) and the
// operator's approvals of pack versions' capabilities (store_consent.cc).
const char* const kSchemaV6 = R"sql(
CREATE TABLE IF NOT EXISTS signatures (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  manifest_digest TEXT NOT NULL,
  key_id TEXT NOT NULL,
  signature TEXT NOT NULL,
  reference TEXT NOT NULL,
  added_at TEXT NOT NULL,
  by_uid INTEGER NOT NULL,
  by_user TEXT NOT NULL,
  UNIQUE (manifest_digest, signature)
);
CREATE TABLE IF NOT EXISTS approvals (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  repository TEXT NOT NULL,
  digest TEXT NOT NULL,
  reference TEXT NOT NULL,
  manifest TEXT NOT NULL,
  approved_at TEXT NOT NULL,
  by_uid INTEGER NOT NULL,
  by_user TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_by_repository ON approvals (repository, id);
CREATE INDEX IF NOT EXISTS approvals_by_digest ON approvals (digest);
)sql";

// Schema 7 (C12, C8 (4)): flags travel (store_flags.cc). A flag read from a registry says
// where it came from (origin); the packs this Moon took from registries (remote_origins,
// by tree digest: a violation of that content is published to each); the flags waiting to
// be published as referrers (flag_outbox, retried with backoff, bounded).
const char* const kSchemaV7 = R"sql(
ALTER TABLE flags ADD COLUMN origin TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS remote_origins (
  tree_digest TEXT NOT NULL,
  registry TEXT NOT NULL,
  repository TEXT NOT NULL,
  manifest_digest TEXT NOT NULL,
  manifest_size INTEGER NOT NULL,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  seen_at TEXT NOT NULL,
  PRIMARY KEY (tree_digest, registry, repository, manifest_digest)
);
CREATE TABLE IF NOT EXISTS flag_outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  registry TEXT NOT NULL,
  repository TEXT NOT NULL,
  manifest_digest TEXT NOT NULL,
  manifest_size INTEGER NOT NULL,
  run_id TEXT NOT NULL,
  body TEXT NOT NULL,
  queued_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  published_at TEXT,
  referrer TEXT,
  UNIQUE (registry, repository, manifest_digest, run_id)
);
CREATE INDEX IF NOT EXISTS flag_outbox_pending ON flag_outbox (registry, published_at);
)sql";

// Schema 8 (C12): a queued flag is claimed by one publisher at a time (Store::claim_flag):
// the client's gate and `moon serve` no longer push the same flag together.
const char* const kSchemaV8 = R"sql(
ALTER TABLE flag_outbox ADD COLUMN claimed_until INTEGER NOT NULL DEFAULT 0;
ALTER TABLE flag_outbox ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
)sql";

// Schema 9 (issue #16): events_actor_uid holds only the events that have an actor (the
// Moon's own changes: push, flag, unflag). Every other event — all of a run's — had a NULL
// entry in it: one more index page written by each commit (a cache hit's 10 became 9) and
// one more json_extract at each insert, for entries no query reads. A query's
// `CAST(...) = ?` implies the index's `IS NOT NULL`, so SQLite still uses it (the
// expression must stay identical to query_events' and to the index's).
const char* const kSchemaV9 = R"sql(
DROP INDEX IF EXISTS events_actor_uid;
CREATE INDEX events_actor_uid ON events (CAST(json_extract(json, '$.data.actor.uid') AS TEXT))
  WHERE CAST(json_extract(json, '$.data.actor.uid') AS TEXT) IS NOT NULL;
)sql";

}  // namespace

Status Store::init_schema() {
  auto read_version = [&]() -> Result<int64_t> {
    auto st = prepare(db_, path_, "PRAGMA user_version");
    if (!st) return st.error();
    if (st->step() != SQLITE_ROW) return db_error(db_, path_, "read the schema version");
    return st->integer(0);
  };
  auto v = read_version();
  if (!v) return v.error();
  if (*v == kSchemaVersion) return {};
  if (*v > kSchemaVersion)
    return make_error("the Moon database " + path_.string() + " has schema version " + std::to_string(*v) +
                      ", newer than this soyaos supports (" + std::to_string(kSchemaVersion) + ")");
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (auto s = txn.begin(); !s) return s;
  v = read_version();  // another process may have created it meanwhile
  if (!v) return v.error();
  if (*v == 0) {
    if (auto s = exec(db_, path_, kSchemaV1, "create the schema"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=1", "set the schema version"); !s) return s;
    *v = 1;
  }
  if (*v == 1) {
    if (auto s = exec(db_, path_, kSchemaV2, "upgrade the schema to version 2"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=2", "set the schema version"); !s) return s;
    *v = 2;
  }
  if (*v == 2) {
    if (auto s = exec(db_, path_, kSchemaV3, "upgrade the schema to version 3"); !s) return s;
    if (auto s = chain_existing_events(); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=3", "set the schema version"); !s) return s;
    *v = 3;
  }
  if (*v == 3) {
    if (auto s = exec(db_, path_, kSchemaV4, "upgrade the schema to version 4"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=4", "set the schema version"); !s) return s;
    *v = 4;
  }
  if (*v == 4) {
    if (auto s = exec(db_, path_, kSchemaV5, "upgrade the schema to version 5"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=5", "set the schema version"); !s) return s;
    *v = 5;
  }
  if (*v == 5) {
    if (auto s = exec(db_, path_, kSchemaV6, "upgrade the schema to version 6"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=6", "set the schema version"); !s) return s;
    *v = 6;
  }
  if (*v == 6) {
    if (auto s = exec(db_, path_, kSchemaV7, "upgrade the schema to version 7"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=7", "set the schema version"); !s) return s;
    *v = 7;
  }
  if (*v == 7) {
    if (auto s = exec(db_, path_, kSchemaV8, "upgrade the schema to version 8"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=8", "set the schema version"); !s) return s;
    *v = 8;
  }
  if (*v == 8) {
    if (auto s = exec(db_, path_, kSchemaV9, "upgrade the schema to version 9"); !s) return s;
    if (auto s = exec(db_, path_, "PRAGMA user_version=9", "set the schema version"); !s) return s;
  }
  if (auto s = txn.commit(); !s) return s;
  return flush_head();
}

}  // namespace soyaos::moon
