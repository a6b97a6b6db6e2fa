#include "moon/store.h"

#include "moon/sqlite_util.h"
#include "moon/store_sql.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "moon/chain.h"
#include "common/digest.h"
#include "common/text.h"
#include "moon/semver.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using detail::corrupt_error;
using detail::db_error;
using detail::exec;
using detail::is_corruption;
using detail::prepare;
using detail::read_rows;
using detail::Stmt;
using detail::step_done;
using detail::Txn;

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr int kBusyTimeoutMs = 30'000;

// How long a write waits for another writer's lock: 30 s, or SOYAOS_MOON_BUSY_TIMEOUT_MS
// (docs/events.md: the tests of a held lock use a short one).
int busy_timeout_ms() {
  const char* v = std::getenv("SOYAOS_MOON_BUSY_TIMEOUT_MS");
  if (v == nullptr || *v == '\0') return kBusyTimeoutMs;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && ms >= 0 && ms <= 3'600'000) ? static_cast<int>(ms) : kBusyTimeoutMs;
}

// Per connection. journal_size_limit: a WAL that grew past 4 MiB (a big push) is truncated
// once checkpointed.
const char* const kConnectionPragmas =
    "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA journal_size_limit=4194304";

// The commit that takes the WAL past this many frames (4 KiB pages; a no-op run adds ~30,
// a cache hit ~9) checkpoints it.
constexpr int kWalCheckpointFrames = 128;

// SQLite's wal hook, run after each commit of this connection (replaces its
// wal_autocheckpoint). A TRUNCATE checkpoint, not a PASSIVE one: the WAL is kept between
// processes, and each new process rebuilds the WAL index from it with every frame counted
// as not yet checkpointed (SQLite resets nBackfill on recovery) — a checkpointed but
// untruncated WAL would be copied into moon.db again by every later commit, 2 more fsyncs
// each. No waiting for readers here (busy timeout 0 for the call): a run must not stall
// behind another's read; when one holds the WAL, a later commit checkpoints.
int checkpoint_when_large(void* /*unused*/, sqlite3* db, const char* name, int frames) {
  if (frames < kWalCheckpointFrames) return SQLITE_OK;
  sqlite3_busy_timeout(db, 0);
  (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  sqlite3_busy_timeout(db, busy_timeout_ms());
  return SQLITE_OK;  // a checkpoint that could not run is not the commit's failure
}

// The head file is rewritten (an fsync and a rename) when a batch ends a run, holds the
// Moon's own events, or this many events after the last head: the window in which cutting
// off the database's tail together with its checkpoints goes unseen (docs/events.md).
constexpr int64_t kHeadEvery = 256;

PackRecord pack_from(Stmt& s) {
  PackRecord p;
  p.id = s.integer(0);
  p.name = s.text(1);
  p.version = s.text(2);
  p.digest = s.text(3);
  p.tree_digest = s.text(4);
  p.oci_manifest = s.text(5);
  p.oci_manifest_size = s.integer(6);
  p.size = s.integer(7);
  p.pushed_at = s.text(8);
  p.manifest = s.text(9);
  return p;
}

constexpr const char* kPackCols =
    "id, name, version, digest, tree_digest, oci_manifest, oci_manifest_size, size, pushed_at, manifest";

std::string str_or_empty(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

Result<fs::path> default_home() {
  if (const char* h = std::getenv("SOYAOS_HOME"); h != nullptr && *h != '\0') return fs::path(h);
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x == '/') return fs::path(x) / "soyaos";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/')
    return fs::path(home) / ".local" / "share" / "soyaos";
  return make_error("cannot find the SoyaOS home: set SOYAOS_HOME (or HOME)");
}

Store::Store(Store&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)),
      path_(std::move(o.path_)),
      key_(std::move(o.key_)),
      pending_head_(std::move(o.pending_head_)),
      head_warned_(o.head_warned_) {}
Store& Store::operator=(Store&& o) noexcept {
  if (this != &o) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    path_ = std::move(o.path_);
    key_ = std::move(o.key_);
    pending_head_ = std::move(o.pending_head_);
    head_warned_ = o.head_warned_;
  }
  return *this;
}
Store::~Store() { sqlite3_close_v2(db_); }

Result<Store> Store::open(const fs::path& home) {
  std::error_code ec;
  // The home holds every run's events: private to its owner when we create it (an
  // existing directory keeps the mode its owner chose).
  if (!fs::exists(home, ec)) {
    fs::create_directories(home, ec);
    if (ec) return make_error("create the SoyaOS home " + home.string(), ec.value());
    fs::permissions(home, fs::perms::owner_all, ec);
  }
  if (!fs::is_directory(home, ec)) return make_error("the SoyaOS home " + home.string() + " is not a directory", ENOTDIR);
  Store store;
  store.path_ = home / "moon.db";
  int rc = sqlite3_open_v2(store.path_.c_str(), &store.db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    if (store.db_ == nullptr) return make_error("open " + store.path_.string() + ": out of memory");
    return db_error(store.db_, store.path_, "open the Moon database");
  }
  sqlite3_busy_timeout(store.db_, busy_timeout_ms());
  sqlite3_extended_result_codes(store.db_, 1);
  // The WAL is kept between processes and never checkpointed on close (issue #16): a
  // process's last connection closing used to checkpoint and delete it (3 more fsyncs per
  // `soyaos run`: the WAL, its directory, the database). Instead the commit that takes
  // the WAL past kWalCheckpointFrames checkpoints and truncates it (checkpoint_when_large),
  // which also bounds what each new process reads to rebuild the WAL index. A commit is as
  // durable as before: synchronous=FULL fsyncs the WAL at COMMIT (E4).
  (void)sqlite3_db_config(store.db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  int persist = 1;
  (void)sqlite3_file_control(store.db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  // WAL: readers never block the writer; synchronous=FULL: durable at COMMIT (E4).
  // SQLite answers this pragma SQLITE_BUSY at once, without its busy handler, while another
  // connection is creating the database or switching it to WAL (processes opening a new
  // home together: MoonChain.TenWriterProcessesKeepOneValidChain failed 2 runs in 10 on a
  // loaded machine). Retried here, within the same busy timeout.
  for (int waited_ms = 0;; ) {
    auto s = exec(store.db_, store.path_, "PRAGMA journal_mode=WAL", "set WAL mode");
    if (s) break;
    if ((sqlite3_extended_errcode(store.db_) & 0xff) != SQLITE_BUSY || waited_ms >= busy_timeout_ms()) return s.error();
    ::usleep(2000);
    waited_ms += 2;
  }
  if (auto s = exec(store.db_, store.path_, kConnectionPragmas, "set pragmas"); !s) return s.error();
  sqlite3_wal_hook(store.db_, checkpoint_when_large, nullptr);
  if (auto s = store.init_schema(); !s) return s.error();
  return store;
}

Status Store::chain_existing_events() {
  // Chained at upgrade, not before: these rows were stored without a chain, so the chain
  // proves only that they are unchanged since the upgrade (chain_meta says up to where).
  // In chunks, so a large store is never held in memory at once.
  constexpr int64_t kChunk = 4096;
  auto read = prepare(db_, path_, "SELECT seq, json FROM events WHERE seq > ?1 ORDER BY seq LIMIT " +
                                      std::to_string(kChunk));
  if (!read) return read.error();
  auto update = prepare(db_, path_, "UPDATE events SET prev_hash=?2, hash=?3 WHERE seq=?1");
  if (!update) return update.error();
  std::string prev(chain::kGenesisHash);
  int64_t last = 0;
  while (true) {
    std::vector<std::pair<int64_t, std::string>> rows;
    read->bind(1, last);
    int rc = 0;
    while ((rc = read->step()) == SQLITE_ROW) rows.emplace_back(read->integer(0), read->text(1));
    if (rc != SQLITE_DONE) return db_error(db_, path_, "read events to chain");
    read->reset();
    if (rows.empty()) break;
    for (const auto& [seq, text] : rows) {
      std::string hash = chain::event_hash(seq, prev, text);
      update->bind(1, seq).bind(2, prev).bind(3, hash);
      if (auto s = step_done(*update, db_, path_, "chain event " + std::to_string(seq)); !s) return s;
      update->reset();
      prev = std::move(hash);
      last = seq;
    }
  }
  auto meta = prepare(db_, path_, "INSERT OR REPLACE INTO chain_meta (name, value) VALUES (?1, ?2)");
  if (!meta) return meta.error();
  for (const auto& [name, value] : {std::pair<std::string, std::string>{"chained_at_upgrade_through", std::to_string(last)},
                                    {"upgraded_at", scope::now_rfc3339()}}) {
    meta->bind(1, name).bind(2, value);
    if (auto s = step_done(*meta, db_, path_, "record the chain upgrade"); !s) return s;
    meta->reset();
  }
  if (last == 0) return {};
  auto cp = add_checkpoint(last, prev);
  if (!cp) return cp.error();
  pending_head_ = std::make_unique<chain::Checkpoint>(std::move(cp.value()));
  return {};
}

Result<const chain::MoonKey*> Store::signing_key() {
  if (!key_) {
    auto k = chain::MoonKey::load_or_create(path_.parent_path());
    if (!k) return make_error("the Moon's signing key: " + k.error().describe());
    key_ = std::make_unique<chain::MoonKey>(std::move(k.value()));
  }
  return static_cast<const chain::MoonKey*>(key_.get());
}

Result<chain::Checkpoint> Store::add_checkpoint(int64_t seq, const std::string& hash) {
  auto key = signing_key();
  if (!key) return key.error();
  auto cp = (*key)->sign(seq, hash, scope::now_rfc3339());
  if (!cp) return cp.error();
  auto st = prepare(db_, path_, "INSERT INTO checkpoints (seq, hash, time, key_id, signature) VALUES (?1,?2,?3,?4,?5)");
  if (!st) return st.error();
  st->bind(1, cp->seq).bind(2, cp->hash).bind(3, cp->time).bind(4, cp->key_id).bind(5, cp->signature);
  if (auto s = step_done(*st, db_, path_, "store a checkpoint"); !s) return s.error();
  return cp;
}

Status Store::flush_head() {
  if (!pending_head_) return {};
  const chain::Checkpoint cp = *pending_head_;
  pending_head_.reset();
  // Only a committed checkpoint: after a rolled-back transaction the head would name an
  // end the store never had (a false "truncated").
  auto st = prepare(db_, path_, "SELECT 1 FROM checkpoints WHERE seq=?1 AND hash=?2");
  if (!st) return st.error();
  st->bind(1, cp.seq).bind(2, cp.hash);
  if (st->step() != SQLITE_ROW) return {};
  if (auto s = chain::write_head(path_.parent_path(), cp); !s) {
    // Not an error of the write: the transaction is committed. Returned as one, every caller
    // would retry what is stored — the recorder its batch, the daemon's group commit every
    // member's — and store it twice. A head file behind the store is what a crash between
    // the commit and this write leaves too; the next commit writes it again, and `moon check`
    // says when it is behind. So: a warning on stderr (the daemon's log), once per store.
    if (!head_warned_) {
      head_warned_ = true;
      std::fprintf(stderr, "soyaos: warning: events stored, but the Scope head file was not updated: %s\n",
                   escape_for_terminal(s.error().describe()).c_str());  // E7: the path is SOYAOS_HOME's
    }
  }
  return {};
}

// ---- packs ----

Result<std::optional<PackRecord>> Store::pack(const std::string& name, const std::string& version) {
  auto st = prepare(db_, path_, std::string("SELECT ") + kPackCols + " FROM packs WHERE name=?1 AND version=?2");
  if (!st) return st.error();
  st->bind(1, name).bind(2, version);
  int rc = st->step();
  if (rc == SQLITE_ROW) return std::optional<PackRecord>(pack_from(*st));
  if (rc == SQLITE_DONE) return std::optional<PackRecord>();
  return db_error(db_, path_, "read pack " + name + "@" + version);
}

Result<std::vector<PackRecord>> Store::packs() {
  auto st = prepare(db_, path_, std::string("SELECT ") + kPackCols + " FROM packs ORDER BY name, id");
  if (!st) return st.error();
  auto rows = read_rows(*st, pack_from, db_, path_, "list packs");
  if (!rows) return rows.error();
  std::vector<PackRecord> out = std::move(*rows);
  std::stable_sort(out.begin(), out.end(), [](const PackRecord& a, const PackRecord& b) {
    if (a.name != b.name) return a.name < b.name;
    return compare_semver(a.version, b.version) < 0;
  });
  return out;
}

Result<std::optional<PackRecord>> Store::pack_by_digest(const std::string& digest) {
  auto st = prepare(db_, path_, std::string("SELECT ") + kPackCols +
                                    " FROM packs WHERE digest=?1 OR tree_digest=?1 ORDER BY id DESC LIMIT 1");
  if (!st) return st.error();
  st->bind(1, digest);
  int rc = st->step();
  if (rc == SQLITE_ROW) return std::optional<PackRecord>(pack_from(*st));
  if (rc == SQLITE_DONE) return std::optional<PackRecord>();
  return db_error(db_, path_, "find pack by digest " + digest);
}

Result<bool> Store::insert_pack(const PackRecord& p, const json& pushed_event) {
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (auto s = txn.begin(); !s) return s.error();
  auto st = prepare(db_, path_,
                    "INSERT OR IGNORE INTO packs (name, version, digest, tree_digest, oci_manifest, "
                    "oci_manifest_size, size, pushed_at, manifest) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)");
  if (!st) return st.error();
  st->bind(1, p.name).bind(2, p.version).bind(3, p.digest).bind(4, p.tree_digest).bind(5, p.oci_manifest);
  st->bind(6, p.oci_manifest_size).bind(7, p.size).bind(8, p.pushed_at).bind(9, p.manifest);
  if (auto s = step_done(*st, db_, path_, "insert pack " + p.name + "@" + p.version); !s) return s.error();
  if (sqlite3_changes(db_) == 0) return false;
  if (auto s = append_events(std::span<const json>(&pushed_event, 1)); !s) return s.error();
  if (auto s = txn.commit(); !s) return s.error();
  if (auto s = flush_head(); !s) return s.error();
  return true;
}

// ---- manifests of runs ----

Result<std::string> Store::put_manifest(const std::string& text) {
  const std::string digest = "sha256:" + sha256_hex(text);
  auto st = prepare(db_, path_, "INSERT OR IGNORE INTO manifests (digest, manifest, stored_at) VALUES (?1, ?2, ?3)");
  if (!st) return st.error();
  st->bind(1, digest).bind(2, text).bind(3, scope::now_rfc3339());
  if (auto s = step_done(*st, db_, path_, "store manifest " + digest); !s) return s.error();
  return digest;
}

Result<std::optional<std::string>> Store::manifest(const std::string& digest) {
  auto st = prepare(db_, path_, "SELECT manifest FROM manifests WHERE digest=?1");
  if (!st) return st.error();
  st->bind(1, digest);
  int rc = st->step();
  if (rc == SQLITE_ROW) return std::optional<std::string>(st->text(0));
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  return db_error(db_, path_, "read manifest " + digest);
}

// ---- events ----

Status Store::append_events(std::span<const json> events) {
  if (events.empty()) return {};
  // Serialized here, stored by append_rows: one insert path for objects and lines.
  struct Owned {
    std::string text, time, type, run, pack, version;
  };
  std::vector<Owned> owned;
  owned.reserve(events.size());
  for (const auto& e : events) {
    if (!e.is_object()) return make_error("append events to " + path_.string() + ": an event is not a JSON object");
    Owned o;
    // The time column is the event's own `time`; an event without one gets the store's,
    // in the JSON too, so that the hashed text says when (a backdated column shows).
    o.time = str_or_empty(e, "time");
    if (o.time.empty()) {
      o.time = scope::now_rfc3339();
      json stamped = e;
      stamped["time"] = o.time;
      o.text = scope::dump_event(stamped);
    } else {
      o.text = scope::dump_event(e);
    }
    o.type = str_or_empty(e, "type");
    const json empty;
    const json& data = e.contains("data") ? e["data"] : empty;
    o.run = str_or_empty(data, "run_id");
    o.pack = str_or_empty(data, "pack");
    o.version = str_or_empty(data, "version");
    owned.push_back(std::move(o));
  }
  std::vector<EventRow> rows;
  rows.reserve(owned.size());
  for (const auto& o : owned) rows.push_back({o.text, o.time, o.type, o.run, o.pack, o.version});
  return append_rows(rows);
}

Status Store::append_rows(std::span<const EventRow> rows) {
  if (rows.empty()) return {};
  for (const auto& r : rows) {
    if (r.time.empty()) return make_error("append events to " + path_.string() + ": an event without its time");
  }
  // Nested inside insert_pack's transaction when one is open (autocommit off). BEGIN
  // IMMEDIATE takes the write lock before the chain's end is read: two writers never
  // link to the same event (E6).
  const bool own = sqlite3_get_autocommit(db_) != 0;
  Txn txn(db_, path_, exec, "begin a transaction", "commit");
  if (own) {
    if (auto s = txn.begin(); !s) return s;
  }
  // The chain's end. The next seq also stays above any seq ever used (sqlite_sequence):
  // a deleted tail leaves a visible gap instead of being silently reused.
  auto tail = prepare(db_, path_,
                      "SELECT seq, COALESCE(hash, '') FROM events ORDER BY seq DESC LIMIT 1");
  if (!tail) return tail.error();
  int64_t last = 0;
  std::string prev(chain::kGenesisHash);
  if (int rc = tail->step(); rc == SQLITE_ROW) {
    last = tail->integer(0);
    prev = tail->text(1);  // "" after a row stored outside soyaos: linked as is, reported by moon check
  } else if (rc != SQLITE_DONE) {
    return db_error(db_, path_, "read the end of the event chain");
  }
  auto counter = prepare(db_, path_, "SELECT seq FROM sqlite_sequence WHERE name='events'");
  if (!counter) return counter.error();
  if (counter->step() == SQLITE_ROW) last = std::max(last, counter->integer(0));
  // Done with both: a statement left at a row keeps the connection's read transaction
  // open through COMMIT, and the checkpoint after the commit (checkpoint_when_large, the
  // only one: none on close, see open()) then fails (SQLITE_LOCKED), so the WAL would grow
  // without bound.
  tail->reset();
  counter->reset();

  auto st = prepare(db_, path_,
                    "INSERT INTO events (seq, time, type, run_id, pack, version, json, prev_hash, hash) "
                    "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)");
  if (!st) return st.error();
  bool head_due = false;
  for (const auto& r : rows) {
    const int64_t seq = ++last;
    std::string hash = chain::event_hash(seq, prev, r.json);
    // The row's text outlives the step (bound without a copy); reset() unbinds it.
    st->bind(1, seq).bind_static(2, r.time).bind_static(3, r.type);
    st->bind_static_or_null(4, r.run_id).bind_static_or_null(5, r.pack).bind_static_or_null(6, r.version);
    st->bind_static(7, r.json).bind(8, prev).bind(9, hash);
    if (auto s = step_done(*st, db_, path_, "append an event"); !s) return s;
    st->reset();
    prev = std::move(hash);
    if (r.type == "run_finished" || r.type == "run_incomplete" || r.run_id.empty()) head_due = true;
  }
  // Every batch ends with a signed checkpoint in the same transaction: a committed event
  // is always covered, so an event after the last checkpoint was not stored by a Moon.
  auto cp = add_checkpoint(last, prev);
  if (!cp) return cp.error();
  if (!head_due) {
    auto head = chain::read_head(path_.parent_path());
    head_due = !head || !*head || last - (*head)->seq >= kHeadEvery;
  }
  if (head_due) pending_head_ = std::make_unique<chain::Checkpoint>(std::move(cp.value()));
  if (!own) return {};  // the outer transaction's owner flushes the head after its commit
  if (auto s = txn.commit(); !s) {
    pending_head_.reset();
    return s;
  }
  return flush_head();
}

Result<EventStore> EventStore::open(const fs::path& home) {
  auto s = Store::open(home);
  if (!s) return s.error();
  return EventStore(std::move(s).value());
}

}  // namespace soyaos::moon
