// The result cache (cache.h): the key, eligibility, and the index database (open, schema,
// the runtime identity memo). Blobs: cache_blobs.cc; hits, drops, eviction: cache_evict.cc.
// Blobs are written like the registry's (temp, fsync, rename, directory fsync) and the
// index row is committed last, so a row always names complete blobs; a store that fails
// half-way (a full disk) leaves only unreferenced blobs, which the next garbage collection
// removes.
#include "moon/cache.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/content_digest.h"
#include "common/digest.h"
#include "common/unique_fd.h"
#include "moon/cache_internal.h"

namespace soyaos::moon {
namespace cache_detail {

namespace fs = std::filesystem;

bool is_corruption(int rc) {
  rc &= 0xff;
  return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

Error db_error(sqlite3* db, const fs::path& dir, const std::string& what) {
  return make_error(what + " (" + (dir / "index.db").string() + "): " + sqlite3_errmsg(db),
                    is_corruption(sqlite3_extended_errcode(db)) ? EBADMSG : 0);
}

Status exec(sqlite3* db, const fs::path& dir, const char* sql, const std::string& what) {
  char* msg = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
  std::string m = msg != nullptr ? msg : sqlite3_errstr(rc);
  sqlite3_free(msg);
  if (rc == SQLITE_OK) return {};
  return make_error(what + " (" + (dir / "index.db").string() + "): " + m, is_corruption(rc) ? EBADMSG : 0);
}

Result<Stmt> prepare(sqlite3* db, const fs::path& dir, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s, nullptr) != SQLITE_OK) {
    return db_error(db, dir, "prepare a cache query");
  }
  return Stmt(s);
}

Status step_done(Stmt& s, sqlite3* db, const fs::path& dir, const std::string& what) {
  int rc = s.step();
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) return {};
  return db_error(db, dir, what);
}

Result<CacheLock> CacheLock::take(const fs::path& dir, bool exclusive) {
  UniqueFd fd(::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return errno_error("open " + (dir / ".lock").string());
  while (::flock(fd.get(), exclusive ? LOCK_EX : LOCK_SH) != 0) {
    if (errno != EINTR) return errno_error("flock " + (dir / ".lock").string());
  }
  return CacheLock(std::move(fd));
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_suffix() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd());
}

bool valid_digest(const std::string& d) {
  if (d.size() != 7 + 64 || d.compare(0, 7, "sha256:") != 0) return false;
  return std::all_of(d.begin() + 7, d.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace cache_detail

namespace {

using namespace cache_detail;  // this file's own helpers
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr int kBusyTimeoutMs = 30'000;
constexpr const char* kKeyFormat = "soyaos-cache-key/v1";

// The commit that takes the index's WAL past this many frames (4 KiB pages; a hit's
// bookkeeping adds 3) checkpoints it and truncates it (issue #16). The WAL is kept between
// processes (open() below), and every process's first connection rebuilds the WAL index
// from it — reading and checksumming every frame: with SQLite's default (a PASSIVE
// checkpoint at 1000 frames, the file never shrinking) that was up to 4 MiB and ~2 ms of
// CPU on every `soyaos run`, hit or not (docs/benchmarks-issue16-history.md, "the cache
// hit, every millisecond named"). Bounded here to ~256 KiB, at the price of one checkpoint
// (and its syncs) every ~20 hits. The Store's moon.db does the same (store.cc,
// checkpoint_when_large).
constexpr int kWalCheckpointFrames = 64;

// SQLite's wal hook after each commit of this connection (it replaces wal_autocheckpoint).
// No waiting for readers (busy timeout 0 for the call): a hit must not stall behind
// another process's read; a later commit checkpoints instead.
int checkpoint_when_large(void* /*unused*/, sqlite3* db, const char* name, int frames) {
  if (frames < kWalCheckpointFrames) return SQLITE_OK;
  sqlite3_busy_timeout(db, 0);
  (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  return SQLITE_OK;  // a checkpoint that could not run is not the commit's failure
}

const char* const kSchema = R"sql(
CREATE TABLE IF NOT EXISTS entries (
  key TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  pack TEXT NOT NULL,
  version TEXT NOT NULL,
  pack_digest TEXT NOT NULL,
  run_id TEXT NOT NULL,
  provable INTEGER NOT NULL,
  size INTEGER NOT NULL,
  stored_at TEXT NOT NULL,
  last_used INTEGER NOT NULL,
  hits INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_lru ON entries (last_used);
CREATE INDEX IF NOT EXISTS entries_pack ON entries (pack);
CREATE TABLE IF NOT EXISTS refs (
  key TEXT NOT NULL,
  digest TEXT NOT NULL,
  PRIMARY KEY (key, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_digest ON refs (digest);
CREATE TABLE IF NOT EXISTS runtime_ids (
  path TEXT PRIMARY KEY,
  dev INTEGER NOT NULL,
  ino INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  ctime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  digest TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
)sql";

Result<uint64_t> parse_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0 || i > 19) return make_error("SOYAOS_CACHE_MAX=" + text + ": not a size (e.g. 1073741824, 512Mi, 2G)");
  uint64_t n = std::stoull(text.substr(0, i));
  const std::string unit = text.substr(i);
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1},          {"B", 1},         {"K", 1000},    {"M", 1000'000}, {"G", 1000'000'000},
      {"Ki", 1u << 10}, {"Mi", 1u << 20}, {"Gi", 1u << 30}, {"T", 1000'000'000'000}, {"Ti", uint64_t{1} << 40}};
  for (const auto& [name, mult] : kUnits) {
    if (unit == name) {
      if (n > UINT64_MAX / mult) return make_error("SOYAOS_CACHE_MAX=" + text + ": too large");
      return n * mult;
    }
  }
  return make_error("SOYAOS_CACHE_MAX=" + text + ": unknown unit (use K, M, G, Ki, Mi, Gi)");
}

}  // namespace

// ---- key and eligibility ----

std::string cache_key(const CacheKeyParts& p) {
  // A JSON array: every part is delimited and typed, so no two different part lists
  // encode to the same bytes (args ["a b"] vs ["a", "b"]).
  json enc = json::array({kKeyFormat, p.pack_digest, p.input_digest, p.args, p.interpreter, p.interpreter_digest,
                          p.policy_version, p.operator_config});
  return sha256_hex(enc.dump(-1, ' ', false, json::error_handler_t::strict));
}

Eligibility cache_eligibility(const manifest::Manifest& m, bool has_mounts) {
  Eligibility e;
  if (m.capabilities.tier != manifest::Tier::read_only) {
    e.reason = std::string("determinism_tier is ") + manifest::to_string(m.capabilities.tier) +
               ": only read-only results are cached";
    return e;
  }
  if (m.capabilities.egress_any) {
    e.reason = "egress \"*\": results are never cached";
    return e;
  }
  if (has_mounts) {
    e.reason = "--mount: operator data outside the cache key";
    return e;
  }
  // C11: a secret's value is never part of the key (it must not be stored or compared), so
  // a cached result would be replayed to an operator with another key, or none: the answer
  // one account was allowed to get, served without that account's credential.
  if (!m.secrets.empty()) {
    e.reason = "the pack declares secrets: a run that holds a secret is never cached";
    return e;
  }
  e.cacheable = true;
  e.provable = m.capabilities.egress.empty();
  return e;
}

// One definition for the cache key and run_started (common/content_digest.h).
Result<std::string> input_digest(const fs::path& input) { return soyaos::input_digest(input); }

// ---- the cache ----

ResultCache::ResultCache(ResultCache&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)), dir_(std::move(o.dir_)), max_bytes_(o.max_bytes_) {}
ResultCache& ResultCache::operator=(ResultCache&& o) noexcept {
  if (this != &o) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    dir_ = std::move(o.dir_);
    max_bytes_ = o.max_bytes_;
  }
  return *this;
}
ResultCache::~ResultCache() { sqlite3_close_v2(db_); }

Result<uint64_t> ResultCache::configured_max() {
  const char* v = std::getenv("SOYAOS_CACHE_MAX");
  if (v == nullptr || *v == '\0') return kDefaultCacheMaxBytes;
  return parse_size(v);
}

fs::path ResultCache::blob_path(const std::string& digest) const { return dir_ / "blobs" / "sha256" / digest.substr(7); }

Result<ResultCache> ResultCache::open(const fs::path& home, uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::exists(home, ec)) {
    fs::create_directories(home, ec);
    if (ec) return make_error("create the SoyaOS home " + home.string(), ec.value());
    fs::permissions(home, fs::perms::owner_all, ec);  // private, as the Store makes it
  }
  ResultCache c;
  c.dir_ = home / "cache";
  c.max_bytes_ = max_bytes;
  fs::create_directories(c.dir_ / "blobs" / "sha256", ec);
  if (ec) return make_error("create " + (c.dir_ / "blobs" / "sha256").string(), ec.value());
  const fs::path db_path = c.dir_ / "index.db";
  // A corrupt index only costs re-runs: it is moved aside and a fresh one started (its
  // blobs become unreferenced and are collected).
  for (int attempt = 0; attempt < 2; ++attempt) {
    int rc = sqlite3_open_v2(db_path.c_str(), &c.db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             nullptr);
    if (rc != SQLITE_OK && c.db_ == nullptr) return make_error("open " + db_path.string() + ": out of memory");
    Status s;
    if (rc != SQLITE_OK) {
      s = db_error(c.db_, c.dir_, "open the cache index");
    } else {
      sqlite3_busy_timeout(c.db_, kBusyTimeoutMs);
      sqlite3_extended_result_codes(c.db_, 1);
      // Each `soyaos run` is a short process: by default the last connection to close
      // checkpoints the WAL and deletes it, and the next process recreates it, which costs
      // several fsyncs on the hit path. The WAL is kept instead, and checkpointed and
      // truncated once it passes kWalCheckpointFrames (checkpoint_when_large).
      (void)sqlite3_db_config(c.db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
      int persist = 1;
      (void)sqlite3_file_control(c.db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
      s = exec(c.db_, c.dir_, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", "set the cache index pragmas");
      sqlite3_wal_hook(c.db_, checkpoint_when_large, nullptr);
      if (s) s = c.init_schema();
    }
    if (s) return c;
    sqlite3_close_v2(c.db_);
    c.db_ = nullptr;
    if (s.error().err != EBADMSG || attempt > 0) return s.error();
    fs::path aside = db_path;
    aside += ".corrupt-" + random_suffix();
    fs::rename(db_path, aside, ec);
    fs::remove(fs::path(db_path.string() + "-wal"), ec);
    fs::remove(fs::path(db_path.string() + "-shm"), ec);
  }
  return make_error("open " + db_path.string());
}

Status ResultCache::init_schema() {
  auto version = [&]() -> Result<int64_t> {
    auto st = prepare(db_, dir_, "PRAGMA user_version");
    if (!st) return st.error();
    if (st->step() != SQLITE_ROW) return db_error(db_, dir_, "read the cache schema version");
    return st->integer(0);
  };
  auto v = version();
  if (!v) return v.error();
  if (*v == kCacheSchemaVersion) return {};
  if (*v > kCacheSchemaVersion) {
    return make_error("the cache index " + (dir_ / "index.db").string() + " has schema version " + std::to_string(*v) +
                      ", newer than this soyaos supports");
  }
  Txn txn(db_, dir_, exec, "begin a cache transaction", "commit to the cache index");
  if (auto s = txn.begin(); !s) return s;
  v = version();  // another process may have created it meanwhile
  if (!v) return v.error();
  if (*v == 0) {
    if (auto s = exec(db_, dir_, kSchema, "create the cache schema"); !s) return s;
    if (auto s = exec(db_, dir_, "PRAGMA user_version=1", "set the cache schema version"); !s) return s;
  }
  return txn.commit();
}

Result<std::string> ResultCache::file_identity(const fs::path& host_path) {
  std::error_code ec;
  fs::path real = fs::canonical(host_path, ec);
  if (ec) return make_error("resolve " + host_path.string(), ec.value());
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return errno_error("stat " + real.string());
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  const int64_t ctime = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  auto q = prepare(db_, dir_, "SELECT dev, ino, mtime_ns, ctime_ns, size, digest FROM runtime_ids WHERE path=?1");
  if (!q) return q.error();
  q->bind(1, real.string());
  if (q->step() == SQLITE_ROW && q->integer(0) == static_cast<int64_t>(st.st_dev) &&
      q->integer(1) == static_cast<int64_t>(st.st_ino) && q->integer(2) == mtime && q->integer(3) == ctime &&
      q->integer(4) == static_cast<int64_t>(st.st_size)) {
    return q->text(5);
  }
  UniqueFd fd(::open(real.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno_error("open " + real.string());
  Sha256 h;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("read " + real.string());
    if (n == 0) break;
    h.update(buf, static_cast<size_t>(n));
  }
  std::string digest = h.digest();
  auto up = prepare(db_, dir_,
                    "INSERT OR REPLACE INTO runtime_ids (path, dev, ino, mtime_ns, ctime_ns, size, digest) "
                    "VALUES (?1,?2,?3,?4,?5,?6,?7)");
  if (!up) return up.error();
  up->bind(1, real.string()).bind(2, static_cast<int64_t>(st.st_dev)).bind(3, static_cast<int64_t>(st.st_ino));
  up->bind(4, mtime).bind(5, ctime).bind(6, static_cast<int64_t>(st.st_size)).bind(7, digest);
  // Remembering it is an optimisation: a failure (a read-only home) does not matter.
  (void)up->step();
  return digest;
}

}  // namespace soyaos::moon
