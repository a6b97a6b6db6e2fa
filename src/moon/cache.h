// The Moon's result cache (SPEC.md C10, docs/tiers-and-cache.md): what a `read-only` run
// produced (stdout, stderr, exit status, the /workdir/out tree), content-addressed under
// HOME/cache/, so that the same run again replays it byte for byte without a Comet.
//
//   HOME/cache/index.db        SQLite (WAL): entries, blob references, runtime digests, stats
//   HOME/cache/blobs/sha256/H  content-addressed blobs (an entry manifest, outputs, files)
//   HOME/cache/.lock           flock(2): storers share it, eviction/clear/repair take it alone
//
// The index is its own database, not moon.db: the cache is disposable (clear, a corrupt
// index, an eviction never touch the registry or the Scope events), and it can commit
// without an fsync on the hit path (synchronous=NORMAL: a lost last_used or a lost last
// entry after a power cut costs a re-run, never a wrong replay).
//
// Trust: every blob is verified against its digest when it is replayed; the entry
// manifest is a blob too, named by the index row, and names the key it was stored for. A
// mismatch anywhere drops the entry (and the bad blob) and the caller runs the pack.
// Library code: errors are values, nothing is printed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "manifest/manifest.h"

struct sqlite3;

namespace soyaos::moon {

// Bumped whenever the Comet's enforcement changes what an agent can observe or do (the
// filesystem view, the seccomp filter, limits' defaults, the environment): results of an
// older Comet are then never replayed.
inline constexpr int kCometPolicyVersion = 2;  // 2: the runtime layer (issue #11), HOME/TMPDIR on scratch
// Default size cap of the cache (SOYAOS_CACHE_MAX overrides it).
inline constexpr uint64_t kDefaultCacheMaxBytes = uint64_t{1} << 30;
inline constexpr int kCacheSchemaVersion = 1;

// What a run's result depends on, besides the agent's own nondeterminism (clock, random).
struct CacheKeyParts {
  std::string pack_digest;         // tree digest of the pack ("sha256:…")
  std::string input_digest;        // input_digest() of --input, "none" without one
  std::vector<std::string> args;   // after --
  std::string interpreter;         // sandbox path executed (/usr/bin/python3), "native"
  std::string interpreter_digest;  // sha256 of the host interpreter binary, "none" for native
  int policy_version = kCometPolicyVersion;
  std::string operator_config;     // digest of moon.yaml when the pack has egress, else ""
};

// Lower-case hex sha256 over a canonical encoding (a JSON array, fixed order, with a
// format tag) of the parts: any change in any part gives another key.
std::string cache_key(const CacheKeyParts& parts);

// Whether a pack's results may be cached at all, from its manifest and the run's options.
struct Eligibility {
  bool cacheable = false;
  // read-only with no egress: the result depends only on the key (and the agent's own
  // use of time and randomness). With egress it also depends on the remote side.
  bool provable = false;
  std::string reason;  // why not, when not cacheable
};
Eligibility cache_eligibility(const manifest::Manifest& m, bool has_mounts);

// Digest of an --input: tree_digest() of a directory, or a tagged sha256 of a file (so a
// file and a directory holding the same bytes differ).
Result<std::string> input_digest(const std::filesystem::path& input);

// One entry of the /workdir/out tree, relative path with '/' separators.
struct OutNode {
  std::string path;
  bool dir = false;
  uint32_t mode = 0;     // permission bits (07777)
  std::string digest;    // files: "sha256:…"
  uint64_t size = 0;     // files
};

// What is stored for one run.
struct CacheStoreRequest {
  std::string key;
  std::string pack;
  std::string version;
  std::string pack_digest;
  std::string run_id;  // the run that produced it
  bool provable = false;
  int exit_code = 0;
  std::string out;  // the agent's stdout bytes
  std::string err;  // its stderr bytes
  // The host directory /workdir/out was collected into; nullopt when the pack does not
  // write /workdir/out (nothing was collected, no directory is created on replay).
  std::optional<std::filesystem::path> out_dir;
};

// A verified hit: stdout and stderr are in memory and verified; the out tree is verified
// as it is materialised (materialise_out).
struct CacheHit {
  std::string key;
  std::string pack;
  std::string version;
  std::string pack_digest;
  std::string run_id;  // the run that stored it
  bool provable = false;
  std::string stored_at;
  int exit_code = 0;
  std::string out;
  std::string err;
  // "sha256:..." of out and err: the digests the entry's manifest names, which lookup() has
  // checked the bytes against (so a replay need not hash them again).
  std::string out_digest;
  std::string err_digest;
  bool has_out_dir = false;
  std::vector<OutNode> tree;  // parents before children
};

// One row for `soyaos cache ls`.
struct CacheEntryInfo {
  std::string key;
  std::string pack;
  std::string version;
  std::string run_id;
  bool provable = false;
  uint64_t size = 0;
  std::string stored_at;
  int64_t last_used_us = 0;  // Unix time, microseconds
  int64_t hits = 0;
};

struct CacheStats {
  int64_t entries = 0;
  uint64_t bytes = 0;      // sum of entry sizes (a blob shared by two entries counts twice)
  uint64_t max_bytes = 0;
  int64_t hits = 0;        // since the cache was created (or cleared)
  int64_t misses = 0;
  int64_t stores = 0;
  int64_t evictions = 0;
  int64_t corrupt = 0;     // entries dropped because a blob or the manifest did not verify
};

// One cache entry as `moon check` audits it (cache_audit.cc), read without changing the
// cache: the index row, and what its manifest blob says.
struct CacheEntryAudit {
  std::string key;
  std::string run_id;          // the producing run, as the index row names it
  std::string pack, version, pack_digest;
  std::string problem;         // the manifest or a blob does not verify ("" when they do)
  // From the manifest, when it verified:
  std::string manifest_run_id;
  int exit_code = 0;
  std::string stdout_digest, stderr_digest;  // "sha256:…"
  bool has_out = false;
  uint64_t out_files = 0, out_bytes = 0;
};
// Every entry of HOME/cache (none when there is no cache), each blob verified against its
// digest. Opens the index read-only: the audit never drops or repairs anything.
Result<std::vector<CacheEntryAudit>> audit_cache(const std::filesystem::path& home);

class ResultCache {
 public:
  // Opens (creating) HOME/cache. `max_bytes` is the cap enforced after each store.
  static Result<ResultCache> open(const std::filesystem::path& home, uint64_t max_bytes);
  // SOYAOS_CACHE_MAX (bytes, or with a K/M/G/Ki/Mi/Gi suffix), else kDefaultCacheMaxBytes.
  // An unparsable value is an error naming it.
  static Result<uint64_t> configured_max();

  ResultCache(ResultCache&&) noexcept;
  ResultCache& operator=(ResultCache&&) noexcept;
  ~ResultCache();
  ResultCache(const ResultCache&) = delete;
  ResultCache& operator=(const ResultCache&) = delete;

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }

  // sha256 ("sha256:…") of a host file, remembered by (path, device, inode, mtime, ctime,
  // size) so that the interpreter is hashed once, not on every run.
  Result<std::string> file_identity(const std::filesystem::path& host_path);

  // The entry for `key`, verified (manifest, stdout, stderr). nullopt on a miss, and when
  // the entry was corrupt (it is then dropped: `dropped_corrupt` says so) or records a
  // non-zero exit status (stored by an older soyaos; dropped too).
  Result<std::optional<CacheHit>> lookup(const std::string& key, bool* dropped_corrupt = nullptr);
  // Creates `dest` (absent or an empty directory) holding the hit's tree, every file
  // verified against its digest while copied, modes as stored. Built in a sibling temp
  // directory renamed into place: on any failure nothing is left at `dest`. A blob that
  // does not verify drops the entry and returns an error with err == EBADMSG.
  Status materialise_out(const CacheHit& hit, const std::filesystem::path& dest);
  // Records a hit (last_used, hit counters). Best effort for the caller.
  Status touch(const std::string& key);
  Status count_miss();
  // Drops one entry (e.g. it failed to verify) and the blobs nobody else references.
  Status drop(const std::string& key, bool corrupt);

  // Stores a run's result (only an exit status of 0: false otherwise, C10): blobs first (temp, fsync, rename, directory fsync), the index
  // row and its references last in one transaction. False when not stored: the same key
  // is already there (a racing identical run), or the entry alone exceeds the cap, or the
  // out tree holds something other than files and directories. Evicts least recently used
  // entries afterwards until the cache fits its cap.
  Result<bool> store(const CacheStoreRequest& request);

  Result<std::vector<CacheEntryInfo>> entries(const std::optional<std::string>& pack = std::nullopt);
  Result<CacheStats> stats();
  // Removes every entry (or those of one pack) and the blobs left unreferenced. Returns
  // how many entries were removed.
  Result<int64_t> clear(const std::optional<std::string>& pack = std::nullopt);
  // Evicts least recently used entries until the total is at most `max_bytes`.
  Result<int64_t> evict_to(uint64_t max_bytes);

 private:
  ResultCache() = default;
  Status init_schema();
  // Drops the entry and, when its content was wrong, the blob `bad_blob` ("" none).
  Status drop_entry(const std::string& key, bool corrupt, const std::string& bad_blob);
  // Unlinks blobs not referenced by any entry and temp files of dead stores. Call with
  // the lock held exclusively.
  Status collect_garbage();
  std::filesystem::path blob_path(const std::string& digest) const;
  sqlite3* db_ = nullptr;
  std::filesystem::path dir_;
  uint64_t max_bytes_ = kDefaultCacheMaxBytes;
};

}  // namespace soyaos::moon
