// The result cache's blobs (cache.h): writing an entry (store), verifying and replaying
// one (lookup, materialise_out). Every blob is checked against its digest when replayed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "moon/cache.h"
#include "moon/cache_internal.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using namespace cache_detail;  // the cache's own helpers
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

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

}  // namespace

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
      for (auto [field, dest, dest_digest] : {std::tuple{"stdout", &hit.out, &hit.out_digest},
                                              std::tuple{"stderr", &hit.err, &hit.err_digest}}) {
        const auto& b = m.at(field);
        auto digest = b.at("digest").get<std::string>();
        if (!valid_digest(digest)) return make_error("bad digest", EBADMSG);
        auto data = read_verified(blob_path(digest), digest, b.at("size").get<uint64_t>(), kMaxManifestBytes * 4);
        if (!data) {
          bad_blob = digest;
          return data.error();
        }
        *dest = std::move(data.value());
        *dest_digest = std::move(digest);  // what the bytes were just checked against
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

}  // namespace soyaos::moon
