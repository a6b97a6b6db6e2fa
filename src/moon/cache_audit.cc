// audit_cache (cache.h): what `soyaos moon check` reads of the result cache. The index is
// opened read-only and nothing is dropped: a check reports, `soyaos cache clear` repairs.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "moon/cache.h"
#include "moon/cache_internal.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
// The entry format, its size bound and the digest syntax are the cache's own
// (cache_internal.h): what a check accepts is what the cache writes and reads.
using cache_detail::kManifestFormat;
using cache_detail::kMaxManifestBytes;
using cache_detail::valid_digest;
using detail::Stmt;

// The blob's digest recomputed ("" with `why` set when it cannot be read); its bytes in
// `keep` when asked and no larger than kMaxManifestBytes.
std::string blob_digest(const fs::path& path, std::string* keep, std::string& why) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    why = Error{errno, "open " + path.string()}.describe();
    return "";
  }
  Sha256 h;
  char buf[65536];
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = Error{errno, "read " + path.string()}.describe();
      return "";
    }
    if (n == 0) break;
    h.update(buf, static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
    if (keep != nullptr) {
      if (total > kMaxManifestBytes) {
        why = path.string() + " is too large for an entry manifest";
        return "";
      }
      keep->append(buf, static_cast<size_t>(n));
    }
  }
  return h.digest();
}

}  // namespace

Result<std::vector<CacheEntryAudit>> audit_cache(const fs::path& home) {
  std::vector<CacheEntryAudit> out;
  const fs::path dir = home / "cache";
  const fs::path index = dir / "index.db";
  struct stat st {};
  if (::stat(index.c_str(), &st) != 0) {
    if (errno == ENOENT) return out;
    return errno_error("stat " + index.string());
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(index.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> db(raw, sqlite3_close_v2);
  if (rc != SQLITE_OK) return make_error("open " + index.string() + ": " + (raw ? sqlite3_errmsg(raw) : "out of memory"));
  sqlite3_busy_timeout(db.get(), 30'000);
  sqlite3_stmt* s = nullptr;
  const char* sql = "SELECT key, manifest, run_id, pack, version, pack_digest FROM entries ORDER BY stored_at, key";
  if (sqlite3_prepare_v2(db.get(), sql, -1, &s, nullptr) != SQLITE_OK)
    return make_error("read " + index.string() + ": " + sqlite3_errmsg(db.get()));
  Stmt q(s);
  const fs::path blobs = dir / "blobs" / "sha256";
  int step = 0;
  while ((step = q.step()) == SQLITE_ROW) {
    CacheEntryAudit e;
    e.key = q.text(0);
    const std::string manifest_digest = q.text(1);
    e.run_id = q.text(2);
    e.pack = q.text(3);
    e.version = q.text(4);
    e.pack_digest = q.text(5);
    auto check_blob = [&](const std::string& digest, std::string* keep) -> bool {
      if (!valid_digest(digest)) {
        e.problem = "names a malformed blob digest '" + digest + "'";
        return false;
      }
      std::string why;
      const std::string got = blob_digest(blobs / digest.substr(7), keep, why);
      if (got.empty()) {
        e.problem = "blob " + digest + ": " + why;
        return false;
      }
      if (got != digest) {
        e.problem = "blob " + digest + " does not match its digest (edited)";
        return false;
      }
      return true;
    };
    std::string text;
    if (check_blob(manifest_digest, &text)) {
      const auto m = nlohmann::json::parse(text, nullptr, false);
      try {
        if (m.is_discarded() || !m.is_object() || m.value("format", "") != kManifestFormat ||
            m.value("key", "") != e.key) {
          e.problem = "its manifest is not this entry's";
        } else {
          e.manifest_run_id = m.at("run_id").get<std::string>();
          e.exit_code = m.at("exit_code").get<int>();
          e.stdout_digest = m.at("stdout").at("digest").get<std::string>();
          e.stderr_digest = m.at("stderr").at("digest").get<std::string>();
          bool ok = check_blob(e.stdout_digest, nullptr) && check_blob(e.stderr_digest, nullptr);
          e.has_out = ok && !m.at("out").is_null();
          if (e.has_out) {
            for (const auto& n : m.at("out")) {
              if (n.at("type").get<std::string>() != "file") continue;
              ++e.out_files;
              e.out_bytes += n.at("size").get<uint64_t>();
              if (!check_blob(n.at("digest").get<std::string>(), nullptr)) break;
            }
          }
        }
      } catch (const nlohmann::json::exception& x) {
        e.problem = std::string("its manifest is malformed: ") + x.what();
      }
    }
    out.push_back(std::move(e));
  }
  if (step != SQLITE_DONE) return make_error("read " + index.string() + ": " + sqlite3_errmsg(db.get()));
  return out;
}

}  // namespace soyaos::moon
