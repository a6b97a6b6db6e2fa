// The result cache (cache.h). Blobs are written like the registry's (temp, fsync, rename,
// directory fsync) and the index row is committed last, so a row always names complete
// blobs; a store that fails half-way (a full disk) leaves only unreferenced blobs, which
// the next garbage collection removes.
#include "moon/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/content_digest.h"
#include "common/digest.h"
#include "common/text.h"
#include "moon/sqlite_util.h"
#include "common/unique_fd.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using detail::Stmt;
using detail::Txn;

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr int kBusyTimeoutMs = 30'000;
// An entry manifest larger than this is not one of ours.
constexpr uint64_t kMaxManifestBytes = 64u << 20;
constexpr const char* kManifestFormat = "soyaos-cache-entry/v1";
constexpr const char* kKeyFormat = "soyaos-cache-key/v1";

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

// A prepared statement, finalized on scope exit.
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

// flock(2) on HOME/cache/.lock: storers share it from their first blob to their index
// row, so an exclusive holder (eviction, clear, a corrupt entry's removal) never deletes
// a blob that a store in progress is about to reference.
class CacheLock {
 public:
  static Result<CacheLock> take(const fs::path& dir, bool exclusive) {
    UniqueFd fd(::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) return errno_error("open " + (dir / ".lock").string());
    while (::flock(fd.get(), exclusive ? LOCK_EX : LOCK_SH) != 0) {
      if (errno != EINTR) return errno_error("flock " + (dir / ".lock").string());
    }
    return CacheLock(std::move(fd));
  }

 private:
  explicit CacheLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the lock
};

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

// A relative path of the out tree: no empty, "." or ".." component, not absolute.
bool valid_rel_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.back() == '/' || p.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string c = p.substr(start, end - start);
    if (c.empty() || c == "." || c == "..") return false;
    start = end + 1;
  }
  return true;
}

Status write_all(int fd, const char* data, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_error("write " + what);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

Status fsync_dir(const fs::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno_error("open " + dir.string());
  if (::fsync(fd.get()) != 0) return errno_error("fsync " + dir.string());
  return {};
}

// Streams `src` (a readable fd) or `bytes` into a new blob; returns its digest and size.
// Temp file, fsync, rename: a blob name always holds its full content. The same content
// written twice (racing identical runs) renames identical bytes over identical bytes.
struct WrittenBlob {
  std::string digest;
  uint64_t size = 0;
};
Result<WrittenBlob> write_blob(const fs::path& blobs, int src, const std::string* bytes) {
  fs::path tmp = blobs / (".tmp-" + random_suffix());
  UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return errno_error("create " + tmp.string());
  auto fail = [&](Error e) -> Result<WrittenBlob> {
    out.reset();
    (void)::unlink(tmp.c_str());
    return e;
  };
  Sha256 h;
  WrittenBlob b;
  if (bytes != nullptr) {
    h.update(bytes->data(), bytes->size());
    if (auto s = write_all(out.get(), bytes->data(), bytes->size(), tmp.string()); !s) return fail(s.error());
    b.size = bytes->size();
  } else {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(src, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(errno_error("read an output file"));
      }
      if (n == 0) break;
      h.update(buf, static_cast<size_t>(n));
      if (auto s = write_all(out.get(), buf, static_cast<size_t>(n), tmp.string()); !s) return fail(s.error());
      b.size += static_cast<uint64_t>(n);
    }
  }
  if (::fsync(out.get()) != 0) return fail(errno_error("fsync " + tmp.string()));
  out.reset();
  b.digest = h.digest();
  fs::path final_path = blobs / b.digest.substr(7);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return fail(errno_error("rename " + tmp.string()));
  return b;
}

// Reads a whole blob and checks its digest (and size, when known). err EBADMSG when it
// is missing, too large or does not match.
Result<std::string> read_verified(const fs::path& path, const std::string& digest, std::optional<uint64_t> size,
                                  uint64_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return make_error("cache blob " + digest + ": " + Error{errno, "open"}.describe(), EBADMSG);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return make_error("cache blob " + digest + ": not a file", EBADMSG);
  auto len = static_cast<uint64_t>(st.st_size);
  if (len > max || (size && *size != len)) return make_error("cache blob " + digest + ": wrong size", EBADMSG);
  std::string data(static_cast<size_t>(len), '\0');
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::read(fd.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("cache blob " + digest + ": short read", EBADMSG);
    off += static_cast<size_t>(n);
  }
  Sha256 h;
  h.update(data.data(), data.size());
  if (h.digest() != digest) return make_error("cache blob " + digest + ": content does not match its digest", EBADMSG);
  return data;
}

// The out tree of a collected run: directories and regular files only.
struct ScannedNode {
  OutNode node;
  fs::path host;
};
Result<std::optional<std::vector<ScannedNode>>> scan_out(const fs::path& root) {
  std::vector<ScannedNode> nodes;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end; it != end; it.increment(ec)) {
    if (ec) break;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) return errno_error("stat " + it->path().string());
    ScannedNode n;
    n.host = it->path();
    n.node.path = fs::relative(it->path(), root, ec).generic_string();
    if (ec) break;
    // The entry's manifest is JSON, which cannot carry a name that is not UTF-8 byte for
    // byte, and a replay must recreate every name exactly: such a run is not cached
    // (docs/tiers-and-cache.md), never an error.
    if (!is_valid_utf8(n.node.path)) return std::optional<std::vector<ScannedNode>>();
    n.node.mode = st.st_mode & 07777;
    if (S_ISDIR(st.st_mode)) {
      n.node.dir = true;
    } else if (S_ISREG(st.st_mode)) {
      n.node.size = static_cast<uint64_t>(st.st_size);
    } else {
      return std::optional<std::vector<ScannedNode>>();  // collection never leaves these
    }
    nodes.push_back(std::move(n));
  }
  if (ec) return make_error("walk " + root.string(), ec.value());
  std::sort(nodes.begin(), nodes.end(), [](const ScannedNode& a, const ScannedNode& b) { return a.node.path < b.node.path; });
  return std::optional<std::vector<ScannedNode>>(std::move(nodes));
}

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
      // several fsyncs on the hit path. The WAL is kept instead and checkpointed by SQLite
      // as it grows (wal_autocheckpoint).
      (void)sqlite3_db_config(c.db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
      int persist = 1;
      (void)sqlite3_file_control(c.db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
      s = exec(c.db_, c.dir_, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", "set the cache index pragmas");
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

Result<std::optional<CacheHit>> ResultCache::lookup(const std::string& key, bool* dropped_corrupt) {
  if (dropped_corrupt != nullptr) *dropped_corrupt = false;
  auto q = prepare(db_, dir_, "SELECT manifest FROM entries WHERE key=?1");
  if (!q) return q.error();
  q->bind(1, key);
  int rc = q->step();
  if (rc == SQLITE_DONE) return std::optional<CacheHit>();
  if (rc != SQLITE_ROW) return db_error(db_, dir_, "look up a cache entry");
  const std::string manifest_digest = q->text(0);

  std::string bad_blob;
  auto verify = [&]() -> Result<CacheHit> {
    if (!valid_digest(manifest_digest)) return make_error("bad manifest digest", EBADMSG);
    auto text = read_verified(blob_path(manifest_digest), manifest_digest, std::nullopt, kMaxManifestBytes);
    if (!text) {
      bad_blob = manifest_digest;
      return text.error();
    }
    json m = json::parse(*text, nullptr, false);
    if (m.is_discarded() || !m.is_object() || m.value("format", "") != kManifestFormat || m.value("key", "") != key) {
      return make_error("cache entry " + key + ": manifest is not this entry's", EBADMSG);
    }
    try {
      CacheHit hit;
      hit.key = key;
      hit.pack = m.at("pack").get<std::string>();
      hit.version = m.at("version").get<std::string>();
      hit.pack_digest = m.at("pack_digest").get<std::string>();
      hit.run_id = m.at("run_id").get<std::string>();
      hit.provable = m.at("provable").get<bool>();
      hit.stored_at = m.at("stored_at").get<std::string>();
      hit.exit_code = m.at("exit_code").get<int>();
      for (auto [field, dest] : {std::pair{"stdout", &hit.out}, std::pair{"stderr", &hit.err}}) {
        const auto& b = m.at(field);
        auto digest = b.at("digest").get<std::string>();
        if (!valid_digest(digest)) return make_error("bad digest", EBADMSG);
        auto data = read_verified(blob_path(digest), digest, b.at("size").get<uint64_t>(), kMaxManifestBytes * 4);
        if (!data) {
          bad_blob = digest;
          return data.error();
        }
        *dest = std::move(data.value());
      }
      hit.has_out_dir = !m.at("out").is_null();
      if (hit.has_out_dir) {
        for (const auto& n : m.at("out")) {
          OutNode node;
          node.path = n.at("path").get<std::string>();
          node.dir = n.at("type").get<std::string>() == "dir";
          node.mode = n.at("mode").get<uint32_t>() & 07777;
          if (!node.dir) {
            if (n.at("type").get<std::string>() != "file") return make_error("bad node type", EBADMSG);
            node.digest = n.at("digest").get<std::string>();
            node.size = n.at("size").get<uint64_t>();
            if (!valid_digest(node.digest)) return make_error("bad digest", EBADMSG);
          }
          if (!valid_rel_path(node.path)) return make_error("bad path in the out tree", EBADMSG);
          hit.tree.push_back(std::move(node));
        }
      }
      return hit;
    } catch (const json::exception& e) {
      return make_error(std::string("cache entry manifest: ") + e.what(), EBADMSG);
    }
  };
  auto hit = verify();
  if (hit && hit->exit_code != 0) {
    // Only runs that exit 0 are stored (C10); a failure stored by an older soyaos is
    // dropped, never replayed (a transient error must not outlive its cause).
    if (auto s = drop_entry(key, false, ""); !s) return s.error();
    return std::optional<CacheHit>();
  }
  if (hit) return std::optional<CacheHit>(std::move(hit.value()));
  if (hit.error().err != EBADMSG) return hit.error();
  if (auto s = drop_entry(key, true, bad_blob); !s) return s.error();
  if (dropped_corrupt != nullptr) *dropped_corrupt = true;
  return std::optional<CacheHit>();
}

Status ResultCache::materialise_out(const CacheHit& hit, const fs::path& dest) {
  std::error_code ec;
  fs::path parent = dest.parent_path();
  if (parent.empty()) parent = ".";
  fs::create_directories(parent, ec);
  if (ec) return make_error("create " + parent.string(), ec.value());
  fs::path staging = parent / ("." + dest.filename().string() + ".cache-" + random_suffix());
  if (::mkdir(staging.c_str(), 0777) != 0) return errno_error("mkdir " + staging.string());
  auto cleanup = [&] { fs::remove_all(staging, ec); };
  UniqueFd root(::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) {
    Error e = errno_error("open " + staging.string());
    cleanup();
    return e;
  }
  std::string bad_blob;
  auto build = [&]() -> Status {
    for (const auto& n : hit.tree) {
      if (n.dir) {
        if (::mkdirat(root.get(), n.path.c_str(), 0700) != 0) return errno_error("mkdir " + n.path);
        continue;
      }
      UniqueFd in(::open(blob_path(n.digest).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!in) {
        bad_blob = n.digest;
        return make_error("cache blob " + n.digest + " is missing", EBADMSG);
      }
      UniqueFd out(::openat(root.get(), n.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!out) return errno_error("create " + n.path);
      Sha256 h;
      uint64_t size = 0;
      char buf[65536];
      for (;;) {
        ssize_t r = ::read(in.get(), buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno_error("read cache blob " + n.digest);
        if (r == 0) break;
        h.update(buf, static_cast<size_t>(r));
        size += static_cast<uint64_t>(r);
        if (auto s = write_all(out.get(), buf, static_cast<size_t>(r), n.path); !s) return s;
      }
      if (size != n.size || h.digest() != n.digest) {
        bad_blob = n.digest;
        return make_error("cache blob " + n.digest + ": content does not match its digest", EBADMSG);
      }
      if (::fchmod(out.get(), n.mode) != 0) return errno_error("chmod " + n.path);
    }
    // Directory modes last (deepest first), so a read-only directory does not stop its
    // own files from being created.
    for (auto it = hit.tree.rbegin(); it != hit.tree.rend(); ++it) {
      if (it->dir && ::fchmodat(root.get(), it->path.c_str(), it->mode, 0) != 0) return errno_error("chmod " + it->path);
    }
    return {};
  };
  if (auto s = build(); !s) {
    cleanup();
    if (s.error().err == EBADMSG) (void)drop_entry(hit.key, true, bad_blob);
    return s;
  }
  // rename(2) replaces an empty directory, and fails on a non-empty one: the caller's
  // check that `dest` is fresh cannot be raced into overwriting anything.
  if (::rename(staging.c_str(), dest.c_str()) != 0) {
    Error e = errno_error("rename " + staging.string() + " to " + dest.string());
    cleanup();
    return e;
  }
  return {};
}

Status ResultCache::touch(const std::string& key) {
  Txn txn(db_, dir_, exec, "begin a cache transaction", "commit to the cache index");
  if (auto s = txn.begin(); !s) return s;
  auto up = prepare(db_, dir_, "UPDATE entries SET last_used=?2, hits=hits+1 WHERE key=?1");
  if (!up) return up.error();
  up->bind(1, key).bind(2, now_us());
  if (auto s = step_done(*up, db_, dir_, "record a cache hit"); !s) return s;
  if (auto s = exec(db_, dir_,
                    "INSERT INTO counters (name, value) VALUES ('hits', 1) "
                    "ON CONFLICT (name) DO UPDATE SET value=value+1",
                    "count a hit");
      !s) {
    return s;
  }
  return txn.commit();
}

Status ResultCache::count_miss() {
  return exec(db_, dir_,
              "INSERT INTO counters (name, value) VALUES ('misses', 1) ON CONFLICT (name) DO UPDATE SET value=value+1",
              "count a miss");
}

Status ResultCache::drop(const std::string& key, bool corrupt) { return drop_entry(key, corrupt, ""); }

Status ResultCache::drop_entry(const std::string& key, bool corrupt, const std::string& bad_blob) {
  auto lock = CacheLock::take(dir_, true);
  if (!lock) return lock.error();
  {
    Txn txn(db_, dir_, exec, "begin a cache transaction", "commit to the cache index");
    if (auto s = txn.begin(); !s) return s;
    auto del = prepare(db_, dir_, "DELETE FROM entries WHERE key=?1");
    if (!del) return del.error();
    del->bind(1, key);
    if (auto s = step_done(*del, db_, dir_, "drop a cache entry"); !s) return s;
    const bool deleted = sqlite3_changes(db_) > 0;
    auto refs = prepare(db_, dir_, "DELETE FROM refs WHERE key=?1");
    if (!refs) return refs.error();
    refs->bind(1, key);
    if (auto s = step_done(*refs, db_, dir_, "drop a cache entry's references"); !s) return s;
    if (corrupt && deleted) {
      if (auto s = exec(db_, dir_,
                        "INSERT INTO counters (name, value) VALUES ('corrupt', 1) "
                        "ON CONFLICT (name) DO UPDATE SET value=value+1",
                        "count a corrupt entry");
          !s) {
        return s;
      }
    }
    if (auto s = txn.commit(); !s) return s;
  }
  // A blob whose content is wrong is wrong for whoever references it.
  if (!bad_blob.empty() && valid_digest(bad_blob)) (void)::unlink(blob_path(bad_blob).c_str());
  return collect_garbage();
}

Status ResultCache::collect_garbage() {
  std::set<std::string> referenced;
  {
    auto q = prepare(db_, dir_, "SELECT DISTINCT digest FROM refs");
    if (!q) return q.error();
    int rc = 0;
    while ((rc = q->step()) == SQLITE_ROW) referenced.insert(q->text(0).substr(7));
    if (rc != SQLITE_DONE) return db_error(db_, dir_, "list cache references");
  }
  const fs::path blobs = dir_ / "blobs" / "sha256";
  DIR* d = ::opendir(blobs.c_str());
  if (d == nullptr) return errno_error("open " + blobs.string());
  std::vector<std::string> doomed;
  while (struct dirent* de = ::readdir(d)) {
    std::string name = de->d_name;
    if (name == "." || name == "..") continue;
    // With the lock held exclusively no store is in progress: every temp file is a dead
    // store's, every unreferenced blob garbage (a failed store, an evicted entry).
    if (referenced.count(name) == 0) doomed.push_back(name);
  }
  (void)::closedir(d);
  for (const auto& name : doomed) (void)::unlink((blobs / name).c_str());
  return {};
}

Result<bool> ResultCache::store(const CacheStoreRequest& r) {
  // Only runs that exit 0 are stored (C10): a failure may be transient (a network error, an
  // API that was down) and must not be replayed after its cause is gone.
  if (r.exit_code != 0) return false;
  std::vector<ScannedNode> tree;
  if (r.out_dir) {
    auto scanned = scan_out(*r.out_dir);
    if (!scanned) return scanned.error();
    if (!*scanned) return false;
    tree = std::move(**scanned);
  }
  uint64_t total = r.out.size() + r.err.size();
  for (const auto& n : tree) total += n.node.size;
  if (total > max_bytes_) return false;

  const fs::path blobs = dir_ / "blobs" / "sha256";
  std::vector<std::string> digests;
  json manifest;
  uint64_t size = 0;
  auto write_entry = [&]() -> Status {
    auto out = write_blob(blobs, -1, &r.out);
    if (!out) return out.error();
    auto err = write_blob(blobs, -1, &r.err);
    if (!err) return err.error();
    digests = {out->digest, err->digest};
    size = out->size + err->size;
    json nodes = json::array();
    for (auto& n : tree) {
      json j = {{"path", n.node.path}, {"type", n.node.dir ? "dir" : "file"}, {"mode", n.node.mode}};
      if (!n.node.dir) {
        UniqueFd fd(::open(n.host.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) return errno_error("open " + n.host.string());
        auto b = write_blob(blobs, fd.get(), nullptr);
        if (!b) return b.error();
        j["digest"] = b->digest;
        j["size"] = b->size;
        digests.push_back(b->digest);
        size += b->size;
      }
      nodes.push_back(std::move(j));
    }
    manifest = {{"format", kManifestFormat},
                {"key", r.key},
                {"pack", r.pack},
                {"version", r.version},
                {"pack_digest", r.pack_digest},
                {"run_id", r.run_id},
                {"provable", r.provable},
                {"stored_at", scope::now_rfc3339()},
                {"exit_code", r.exit_code},
                {"stdout", {{"digest", out->digest}, {"size", out->size}}},
                {"stderr", {{"digest", err->digest}, {"size", err->size}}},
                {"out", r.out_dir ? nodes : json(nullptr)}};
    const std::string text = manifest.dump();
    auto mb = write_blob(blobs, -1, &text);
    if (!mb) return mb.error();
    digests.insert(digests.begin(), mb->digest);
    size += mb->size;
    // The renames are durable before the row that names them is committed.
    return fsync_dir(blobs);
  };
  auto insert_row = [&]() -> Result<bool> {
    Txn txn(db_, dir_, exec, "begin a cache transaction", "commit to the cache index");
    if (auto s = txn.begin(); !s) return s.error();
    auto ins = prepare(db_, dir_,
                       "INSERT OR IGNORE INTO entries (key, manifest, pack, version, pack_digest, run_id, provable, "
                       "size, stored_at, last_used) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)");
    if (!ins) return ins.error();
    ins->bind(1, r.key).bind(2, digests.front()).bind(3, r.pack).bind(4, r.version).bind(5, r.pack_digest);
    ins->bind(6, r.run_id).bind(7, int64_t{r.provable ? 1 : 0}).bind(8, static_cast<int64_t>(size));
    ins->bind(9, manifest.value("stored_at", "")).bind(10, now_us());
    if (auto s = step_done(*ins, db_, dir_, "insert a cache entry"); !s) return s.error();
    // A racing identical run stored it first: one entry (its blobs are kept; ours, when
    // the two runs' outputs differed, are unreferenced and collected later).
    if (sqlite3_changes(db_) == 0) return false;
    auto ref = prepare(db_, dir_, "INSERT OR IGNORE INTO refs (key, digest) VALUES (?1, ?2)");
    if (!ref) return ref.error();
    for (const auto& d : digests) {
      ref->bind(1, r.key).bind(2, d);
      if (auto s = step_done(*ref, db_, dir_, "insert a cache reference"); !s) return s.error();
      ref->reset();
    }
    if (auto s = exec(db_, dir_,
                      "INSERT INTO counters (name, value) VALUES ('stores', 1) "
                      "ON CONFLICT (name) DO UPDATE SET value=value+1",
                      "count a store");
        !s) {
      return s.error();
    }
    if (auto s = txn.commit(); !s) return s.error();
    return true;
  };
  // The shared lock covers the blobs and the row that references them.
  auto stored = [&]() -> Result<bool> {
    auto lock = CacheLock::take(dir_, false);
    if (!lock) return lock.error();
    if (auto s = write_entry(); !s) return s.error();
    return insert_row();
  }();
  if (!stored) {
    // A full disk or another failure: nothing references what was written; it is
    // removed now (best effort) or by the next collection.
    if (auto ex = CacheLock::take(dir_, true); ex) (void)collect_garbage();
    return stored.error();
  }
  if (!*stored) {
    // Lost a race to an identical run: our manifest (its own stored_at) is unreferenced.
    if (auto ex = CacheLock::take(dir_, true); ex) (void)collect_garbage();
    return false;
  }
  if (auto evicted = evict_to(max_bytes_); !evicted) return evicted.error();
  return true;
}

Result<int64_t> ResultCache::evict_to(uint64_t max_bytes) {
  auto total_q = prepare(db_, dir_, "SELECT COALESCE(SUM(size), 0) FROM entries");
  if (!total_q) return total_q.error();
  if (total_q->step() != SQLITE_ROW) return db_error(db_, dir_, "sum the cache size");
  if (static_cast<uint64_t>(total_q->integer(0)) <= max_bytes) return int64_t{0};

  auto lock = CacheLock::take(dir_, true);
  if (!lock) return lock.error();
  int64_t evicted = 0;
  {
    Txn txn(db_, dir_, exec, "begin a cache transaction", "commit to the cache index");
    if (auto s = txn.begin(); !s) return s.error();
    auto q = prepare(db_, dir_, "SELECT key, size, (SELECT SUM(size) FROM entries) FROM entries ORDER BY last_used, key");
    if (!q) return q.error();
    std::vector<std::string> doomed;
    uint64_t total = 0;
    bool first = true;
    while (q->step() == SQLITE_ROW) {
      if (first) total = static_cast<uint64_t>(q->integer(2));
      first = false;
      if (total <= max_bytes) break;
      doomed.push_back(q->text(0));
      total -= static_cast<uint64_t>(q->integer(1));
    }
    auto del = prepare(db_, dir_, "DELETE FROM entries WHERE key=?1");
    auto refs = prepare(db_, dir_, "DELETE FROM refs WHERE key=?1");
    if (!del) return del.error();
    if (!refs) return refs.error();
    for (const auto& k : doomed) {
      del->bind(1, k);
      refs->bind(1, k);
      if (auto s = step_done(*del, db_, dir_, "evict a cache entry"); !s) return s.error();
      if (auto s = step_done(*refs, db_, dir_, "evict a cache entry's references"); !s) return s.error();
      del->reset();
      refs->reset();
    }
    evicted = static_cast<int64_t>(doomed.size());
    auto c = prepare(db_, dir_,
                     "INSERT INTO counters (name, value) VALUES ('evictions', ?1) "
                     "ON CONFLICT (name) DO UPDATE SET value=value+?1");
    if (!c) return c.error();
    c->bind(1, evicted);
    if (auto s = step_done(*c, db_, dir_, "count evictions"); !s) return s.error();
    if (auto s = txn.commit(); !s) return s.error();
  }
  if (auto s = collect_garbage(); !s) return s.error();
  return evicted;
}

Result<std::vector<CacheEntryInfo>> ResultCache::entries(const std::optional<std::string>& pack) {
  std::string sql =
      "SELECT key, pack, version, run_id, provable, size, stored_at, last_used, hits FROM entries";
  if (pack) sql += " WHERE pack=?1";
  sql += " ORDER BY last_used DESC, key";
  auto q = prepare(db_, dir_, sql);
  if (!q) return q.error();
  if (pack) q->bind(1, *pack);
  std::vector<CacheEntryInfo> out;
  int rc = 0;
  while ((rc = q->step()) == SQLITE_ROW) {
    CacheEntryInfo e;
    e.key = q->text(0);
    e.pack = q->text(1);
    e.version = q->text(2);
    e.run_id = q->text(3);
    e.provable = q->integer(4) != 0;
    e.size = static_cast<uint64_t>(q->integer(5));
    e.stored_at = q->text(6);
    e.last_used_us = q->integer(7);
    e.hits = q->integer(8);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return db_error(db_, dir_, "list cache entries");
  return out;
}

Result<CacheStats> ResultCache::stats() {
  CacheStats s;
  s.max_bytes = max_bytes_;
  auto q = prepare(db_, dir_, "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries");
  if (!q) return q.error();
  if (q->step() != SQLITE_ROW) return db_error(db_, dir_, "count cache entries");
  s.entries = q->integer(0);
  s.bytes = static_cast<uint64_t>(q->integer(1));
  auto c = prepare(db_, dir_, "SELECT name, value FROM counters");
  if (!c) return c.error();
  while (c->step() == SQLITE_ROW) {
    const std::string name = c->text(0);
    const int64_t v = c->integer(1);
    if (name == "hits") s.hits = v;
    if (name == "misses") s.misses = v;
    if (name == "stores") s.stores = v;
    if (name == "evictions") s.evictions = v;
    if (name == "corrupt") s.corrupt = v;
  }
  return s;
}

Result<int64_t> ResultCache::clear(const std::optional<std::string>& pack) {
  auto lock = CacheLock::take(dir_, true);
  if (!lock) return lock.error();
  int64_t removed = 0;
  {
    Txn txn(db_, dir_, exec, "begin a cache transaction", "commit to the cache index");
    if (auto s = txn.begin(); !s) return s.error();
    if (pack) {
      auto refs = prepare(db_, dir_, "DELETE FROM refs WHERE key IN (SELECT key FROM entries WHERE pack=?1)");
      if (!refs) return refs.error();
      refs->bind(1, *pack);
      if (auto s = step_done(*refs, db_, dir_, "clear cache references"); !s) return s.error();
      auto del = prepare(db_, dir_, "DELETE FROM entries WHERE pack=?1");
      if (!del) return del.error();
      del->bind(1, *pack);
      if (auto s = step_done(*del, db_, dir_, "clear cache entries"); !s) return s.error();
      removed = sqlite3_changes(db_);
    } else {
      if (auto s = exec(db_, dir_, "DELETE FROM refs", "clear cache references"); !s) return s.error();
      if (auto s = exec(db_, dir_, "DELETE FROM entries", "clear cache entries"); !s) return s.error();
      removed = sqlite3_changes(db_);
      if (auto s = exec(db_, dir_, "DELETE FROM counters", "reset cache counters"); !s) return s.error();
    }
    if (auto s = txn.commit(); !s) return s.error();
  }
  if (auto s = collect_garbage(); !s) return s.error();
  return removed;
}

}  // namespace soyaos::moon
