// Private to the result cache's sources (cache.cc: the key and the index; cache_blobs.cc:
// writing, verifying and replaying blobs; cache_evict.cc: hits, drops, eviction and
// garbage collection): the SQLite helpers, the cache lock and small shared utilities.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "moon/sqlite_util.h"

namespace soyaos::moon::cache_detail {

using detail::Stmt;
using detail::Txn;

// An entry manifest larger than this is not one of ours.
inline constexpr uint64_t kMaxManifestBytes = 64u << 20;
inline constexpr const char* kManifestFormat = "soyaos-cache-entry/v1";

bool is_corruption(int rc);
Error db_error(sqlite3* db, const std::filesystem::path& dir, const std::string& what);
Status exec(sqlite3* db, const std::filesystem::path& dir, const char* sql, const std::string& what);
Result<Stmt> prepare(sqlite3* db, const std::filesystem::path& dir, const std::string& sql);
Status step_done(Stmt& s, sqlite3* db, const std::filesystem::path& dir, const std::string& what);

// flock(2) on HOME/cache/.lock: storers share it from their first blob to their index
// row, so an exclusive holder (eviction, clear, a corrupt entry's removal) never deletes
// a blob that a store in progress is about to reference.
class CacheLock {
 public:
  static Result<CacheLock> take(const std::filesystem::path& dir, bool exclusive);

 private:
  explicit CacheLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the lock
};

int64_t now_us();
std::string random_suffix();
bool valid_digest(const std::string& d);

}  // namespace soyaos::moon::cache_detail
