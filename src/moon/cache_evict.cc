// The result cache's bookkeeping (cache.h): hits and misses, dropping an entry, least
// recently used eviction, listing, stats, clear, and the garbage collection of blobs no
// entry references.
#include <dirent.h>
#include <sqlite3.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "moon/cache.h"
#include "moon/cache_internal.h"

namespace soyaos::moon {

using namespace cache_detail;  // the cache's own helpers
namespace fs = std::filesystem;

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
