// The result cache (src/moon/cache.h) on a real store on disk: key parts, eligibility,
// store and verified replay, corruption, LRU eviction, racing stores, a failing disk.
#include "moon/cache.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "common/digest.h"
#include "moon_test_util.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TmpDir;
using testing::write_file;

CacheKeyParts base_parts() {
  CacheKeyParts p;
  p.pack_digest = "sha256:" + std::string(64, 'a');
  p.input_digest = "none";
  p.args = {"--x", "1"};
  p.interpreter = "/usr/bin/python3";
  p.interpreter_digest = "sha256:" + std::string(64, 'b');
  return p;
}

size_t blob_count(const fs::path& home) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(home / "cache" / "blobs" / "sha256")) {
    (void)e;
    ++n;
  }
  return n;
}

CacheStoreRequest request(const std::string& key, const std::string& out, const std::string& err, int status) {
  CacheStoreRequest r;
  r.key = key;
  r.pack = "p";
  r.version = "1.0.0";
  r.pack_digest = "sha256:" + std::string(64, 'c');
  r.run_id = "RUN-" + key.substr(0, 4);
  r.provable = true;
  r.exit_code = status;
  r.out = out;
  r.err = err;
  return r;
}

TEST(CacheKey, EveryPartChangesTheKey) {
  const std::string base = cache_key(base_parts());
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, cache_key(base_parts()));  // deterministic
  std::set<std::string> keys = {base};
  auto differs = [&](auto mutate, const char* what) {
    CacheKeyParts p = base_parts();
    mutate(p);
    EXPECT_TRUE(keys.insert(cache_key(p)).second) << what << " did not change the key";
  };
  differs([](CacheKeyParts& p) { p.pack_digest.back() = 'f'; }, "pack digest");
  differs([](CacheKeyParts& p) { p.input_digest = "sha256:" + std::string(64, 'd'); }, "input digest");
  differs([](CacheKeyParts& p) { p.args = {"--x", "2"}; }, "an argument");
  differs([](CacheKeyParts& p) { p.args = {"--x 1"}; }, "argument boundaries");
  differs([](CacheKeyParts& p) { p.args = {}; }, "no arguments");
  differs([](CacheKeyParts& p) { p.interpreter = "/usr/bin/node"; }, "interpreter path");
  differs([](CacheKeyParts& p) { p.interpreter_digest.back() = 'e'; }, "interpreter digest");
  differs([](CacheKeyParts& p) { p.policy_version = kCometPolicyVersion + 1; }, "policy version");
  differs([](CacheKeyParts& p) { p.operator_config = "file:sha256:00"; }, "operator config");
}

TEST(CacheKey, EligibilityFollowsTheTierAndEgress) {
  manifest::Manifest m;
  m.capabilities.tier = manifest::Tier::read_only;
  auto e = cache_eligibility(m, false);
  EXPECT_TRUE(e.cacheable);
  EXPECT_TRUE(e.provable);  // read-only, egress: []

  manifest::EgressEntry entry;
  entry.host = "api.example.com";
  entry.port = 443;
  entry.protocol = manifest::Protocol::https;
  m.capabilities.egress.push_back(entry);
  e = cache_eligibility(m, false);
  EXPECT_TRUE(e.cacheable);    // cached: same input, same output up to the remote side
  EXPECT_FALSE(e.provable);

  EXPECT_FALSE(cache_eligibility(m, true).cacheable) << "--mount: operator data outside the key";

  m.capabilities.tier = manifest::Tier::side_effect;
  e = cache_eligibility(m, false);
  EXPECT_FALSE(e.cacheable);
  EXPECT_NE(e.reason.find("side-effect"), std::string::npos) << e.reason;
  m.capabilities.tier = manifest::Tier::unrestricted;
  EXPECT_FALSE(cache_eligibility(m, false).cacheable);
  m.capabilities.egress.clear();
  m.capabilities.egress_any = true;
  m.capabilities.tier = manifest::Tier::read_only;  // not valid (M6), refused anyway
  EXPECT_FALSE(cache_eligibility(m, false).cacheable);
}

TEST(CacheKey, InputDigestTellsAFileFromADirectory) {
  TmpDir d;
  write_file(d.path() / "f", "hello");
  write_file(d.path() / "dir" / "f", "hello");
  auto file = input_digest(d.path() / "f");
  auto dir = input_digest(d.path() / "dir");
  ASSERT_TRUE(file.ok() && dir.ok());
  EXPECT_NE(*file, *dir);
  write_file(d.path() / "f", "hellO");
  EXPECT_NE(*file, input_digest(d.path() / "f").value());
  EXPECT_FALSE(input_digest(d.path() / "missing").ok());
}

TEST(CacheKey, ConfiguredMaxParsesSizes) {
  ::setenv("SOYAOS_CACHE_MAX", "512Mi", 1);
  EXPECT_EQ(ResultCache::configured_max().value(), uint64_t{512} << 20);
  ::setenv("SOYAOS_CACHE_MAX", "2G", 1);
  EXPECT_EQ(ResultCache::configured_max().value(), uint64_t{2'000'000'000});
  ::setenv("SOYAOS_CACHE_MAX", "4096", 1);
  EXPECT_EQ(ResultCache::configured_max().value(), 4096u);
  ::setenv("SOYAOS_CACHE_MAX", "lots", 1);
  EXPECT_FALSE(ResultCache::configured_max().ok());
  ::setenv("SOYAOS_CACHE_MAX", "12Qi", 1);
  EXPECT_FALSE(ResultCache::configured_max().ok());
  ::unsetenv("SOYAOS_CACHE_MAX");
  EXPECT_EQ(ResultCache::configured_max().value(), kDefaultCacheMaxBytes);
}

TEST(ResultCache, StoresAndReplaysBytesTreeAndModes) {
  TmpDir d;
  auto cache = ResultCache::open(d.path() / "home", kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok()) << cache.error().describe();
  fs::path out = d.path() / "out";
  std::string binary(70'000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7);
  write_file(out / "report.md", "# report\n");
  write_file(out / "sub" / "deep" / "data.bin", binary);
  fs::create_directories(out / "empty");
  ASSERT_EQ(::chmod((out / "report.md").c_str(), 0600), 0);
  ASSERT_EQ(::chmod((out / "sub").c_str(), 0750), 0);

  const std::string key = cache_key(base_parts());
  // C10: only runs that exit 0 are stored; a failure is refused and leaves nothing behind.
  auto failed = request(key, "x", "", 4);
  auto refused = cache->store(failed);
  ASSERT_TRUE(refused.ok()) << refused.error().describe();
  EXPECT_FALSE(*refused);
  auto none = cache->lookup(key);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto req = request(key, std::string("line\n\0binary\xff", 13), "warning\n", 0);
  req.out_dir = out;
  auto stored = cache->store(req);
  ASSERT_TRUE(stored.ok()) << stored.error().describe();
  EXPECT_TRUE(*stored);

  auto miss = cache->lookup(cache_key(CacheKeyParts{}));
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());

  bool corrupt = true;
  auto hit = cache->lookup(key, &corrupt);
  ASSERT_TRUE(hit.ok()) << hit.error().describe();
  ASSERT_TRUE(hit->has_value());
  EXPECT_FALSE(corrupt);
  const CacheHit& h = **hit;
  EXPECT_EQ(h.out, req.out);
  EXPECT_EQ(h.err, "warning\n");
  // The digests a replay credits (E6's check against run_finished) are those of these bytes.
  EXPECT_EQ(h.out_digest, "sha256:" + sha256_hex(h.out));
  EXPECT_EQ(h.err_digest, "sha256:" + sha256_hex(h.err));
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_EQ(h.run_id, req.run_id);
  EXPECT_TRUE(h.provable);
  EXPECT_FALSE(h.stored_at.empty());
  ASSERT_TRUE(h.has_out_dir);

  fs::path replay = d.path() / "replay" / "run";
  ASSERT_TRUE(cache->materialise_out(h, replay).ok());
  EXPECT_EQ(read_file(replay / "report.md"), "# report\n");
  EXPECT_EQ(read_file(replay / "sub" / "deep" / "data.bin"), binary);
  EXPECT_TRUE(fs::is_directory(replay / "empty"));
  struct stat st {};
  ASSERT_EQ(::stat((replay / "report.md").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((replay / "sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  // No staging directory left beside it.
  size_t siblings = 0;
  for (const auto& e : fs::directory_iterator(d.path() / "replay")) siblings += e.path().filename() == "run" ? 0 : 1;
  EXPECT_EQ(siblings, 0u);
  // An existing non-empty destination is never overwritten.
  EXPECT_FALSE(cache->materialise_out(h, replay).ok());
  EXPECT_EQ(read_file(replay / "report.md"), "# report\n");

  ASSERT_TRUE(cache->touch(key).ok());
  auto s = cache->stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entries, 1);
  EXPECT_EQ(s->hits, 1);
  EXPECT_EQ(s->stores, 1);
  auto list = cache->entries();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].hits, 1);
  EXPECT_EQ((*list)[0].pack, "p");
}

TEST(ResultCache, AnEntryWithoutOutDirReplaysNoDirectory) {
  TmpDir d;
  auto cache = ResultCache::open(d.path() / "home", kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->store(request("k1", "o", "", 0)).value());
  auto hit = cache->lookup("k1");
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_FALSE((*hit)->has_out_dir);
}

TEST(ResultCache, AnOutTreeWithASymlinkIsNotStored) {
  TmpDir d;
  auto cache = ResultCache::open(d.path() / "home", kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  fs::create_directories(d.path() / "out");
  fs::create_symlink("/etc/passwd", d.path() / "out" / "link");
  auto req = request("k1", "o", "", 0);
  req.out_dir = d.path() / "out";
  auto stored = cache->store(req);
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(*stored);
  EXPECT_FALSE(cache->lookup("k1")->has_value());
}

// Every blob of the entry, by what it holds.
fs::path blob_holding(const fs::path& home, const std::string& content) {
  for (const auto& e : fs::directory_iterator(home / "cache" / "blobs" / "sha256")) {
    if (read_file(e.path()) == content) return e.path();
  }
  return {};
}

TEST(ResultCache, ATamperedOutputIsNeverReplayedAndTheEntryIsRemoved) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->store(request("k1", "the real output\n", "", 0)).value());
  fs::path blob = blob_holding(home, "the real output\n");
  ASSERT_FALSE(blob.empty());
  write_file(blob, "a forged output!\n");
  bool corrupt = false;
  auto hit = cache->lookup("k1", &corrupt);
  ASSERT_TRUE(hit.ok()) << hit.error().describe();
  EXPECT_FALSE(hit->has_value());
  EXPECT_TRUE(corrupt);
  EXPECT_FALSE(fs::exists(blob)) << "the bad blob is removed";
  EXPECT_EQ(cache->entries()->size(), 0u);
  EXPECT_EQ(cache->stats()->corrupt, 1);
  // The next store of the same key works again.
  ASSERT_TRUE(cache->store(request("k1", "the real output\n", "", 0)).value());
  EXPECT_EQ(cache->lookup("k1").value()->out, "the real output\n");
}

TEST(ResultCache, ATamperedManifestOrMissingBlobIsIgnored) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->store(request("k1", "one\n", "", 0)).value());
  ASSERT_TRUE(cache->store(request("k2", "two\n", "", 0)).value());
  // k1: its manifest blob rewritten (valid JSON, another exit status).
  for (const auto& e : fs::directory_iterator(home / "cache" / "blobs" / "sha256")) {
    std::string text = read_file(e.path());
    if (text.find("\"key\":\"k1\"") != std::string::npos) {
      auto pos = text.find("\"exit_code\":0");
      ASSERT_NE(pos, std::string::npos);
      text.replace(pos, 13, "\"exit_code\":1");
      write_file(e.path(), text);
    }
  }
  bool corrupt = false;
  EXPECT_FALSE(cache->lookup("k1", &corrupt)->has_value());
  EXPECT_TRUE(corrupt);
  // k2: its stdout blob deleted.
  fs::remove(blob_holding(home, "two\n"));
  EXPECT_FALSE(cache->lookup("k2", &corrupt)->has_value());
  EXPECT_TRUE(corrupt);
  EXPECT_EQ(cache->entries()->size(), 0u);
}

TEST(ResultCache, ATamperedOutFileFailsTheReplayAndLeavesNothing) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  write_file(d.path() / "out" / "a.txt", "genuine file\n");
  auto req = request("k1", "", "", 0);
  req.out_dir = d.path() / "out";
  ASSERT_TRUE(cache->store(req).value());
  write_file(blob_holding(home, "genuine file\n"), "forged  file\n");
  auto hit = cache->lookup("k1");
  ASSERT_TRUE(hit.ok() && hit->has_value());  // the file blobs are verified as copied
  auto st = cache->materialise_out(**hit, d.path() / "replay");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().err, EBADMSG);
  EXPECT_FALSE(fs::exists(d.path() / "replay"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path()), fs::directory_iterator{}), 2) << "no staging left";
  EXPECT_FALSE(cache->lookup("k1")->has_value()) << "the entry was dropped";
}

TEST(ResultCache, EvictsTheLeastRecentlyUsedToFitTheCap) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  // Each entry: ~10 KB of output plus its manifest (~500 bytes).
  const uint64_t cap = 32'000;
  auto cache = ResultCache::open(home, cap);
  ASSERT_TRUE(cache.ok());
  auto payload = [](char c) { return std::string(10'000, c); };
  ASSERT_TRUE(cache->store(request("k1", payload('1'), "", 0)).value());
  ASSERT_TRUE(cache->store(request("k2", payload('2'), "", 0)).value());
  ASSERT_TRUE(cache->store(request("k3", payload('3'), "", 0)).value());
  ASSERT_TRUE(cache->touch("k1").ok());  // k2 is now the least recently used
  ASSERT_TRUE(cache->store(request("k4", payload('4'), "", 0)).value());
  EXPECT_TRUE(cache->lookup("k1")->has_value());
  EXPECT_FALSE(cache->lookup("k2")->has_value());
  EXPECT_TRUE(cache->lookup("k3")->has_value());
  EXPECT_TRUE(cache->lookup("k4")->has_value());
  EXPECT_TRUE(blob_holding(home, payload('2')).empty()) << "an evicted entry's blobs are removed";
  auto s = cache->stats();
  EXPECT_LE(s->bytes, cap);
  EXPECT_EQ(s->evictions, 1);
  // An entry larger than the whole cap is not stored at all.
  auto big = cache->store(request("k5", std::string(cap + 1, 'x'), "", 0));
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(*big);
  EXPECT_EQ(cache->entries()->size(), 3u);
}

// The index keeps its WAL between processes, and each process rebuilds the WAL index from
// it (reading every frame): the WAL must stay small however many hits are recorded (issue
// #16: with SQLite's default checkpoint it grew to 4 MiB, ~2 ms of CPU at every open). Each
// hit's bookkeeping is a commit; a process per hit, as `soyaos run` is.
TEST(ResultCache, TheKeptWalStaysBoundedAcrossHits) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  {
    auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(cache->store(request("k1", "out", "", 0)).value());
  }
  uintmax_t largest = 0;
  for (int i = 0; i < 150; ++i) {
    auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(cache->lookup("k1")->has_value());
    ASSERT_TRUE(cache->touch("k1").ok());
    largest = std::max(largest, fs::file_size(home / "cache" / "index.db-wal"));
  }
  // 64 frames of 4 KiB (+ headers) before the checkpoint, plus the commit that passed it.
  EXPECT_LE(largest, uintmax_t{80} * 4120) << "the cache index's WAL is not checkpointed and truncated";
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  EXPECT_EQ(cache->stats()->hits, 150);
}

TEST(ResultCache, ClearRemovesEntriesAndBlobs) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  auto other = request("k2", "b", "", 0);
  other.pack = "other";
  ASSERT_TRUE(cache->store(request("k1", "a", "", 0)).value());
  ASSERT_TRUE(cache->store(other).value());
  EXPECT_EQ(cache->clear(std::string("other")).value(), 1);
  EXPECT_EQ(cache->entries()->size(), 1u);
  EXPECT_EQ(cache->clear().value(), 1);
  EXPECT_EQ(cache->entries()->size(), 0u);
  EXPECT_EQ(blob_count(home), 0u);
}

TEST(ResultCache, RacingIdenticalStoresGiveOneEntry) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  ASSERT_TRUE(ResultCache::open(home, kDefaultCacheMaxBytes).ok());
  fs::path out = d.path() / "out";
  write_file(out / "r.txt", std::string(200'000, 'r'));
  // Four processes (each with its own connection, as racing `soyaos run`s) store the
  // same key at once.
  std::vector<pid_t> kids;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto c = ResultCache::open(home, kDefaultCacheMaxBytes);
      if (!c) ::_exit(10);
      auto req = request("same-key", "same output\n", "", 0);
      req.out_dir = out;
      auto r = c->store(req);
      ::_exit(!r ? 11 : (*r ? 0 : 1));
    }
    kids.push_back(pid);
  }
  int stored = 0, skipped = 0;
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 0) ++stored;
    if (WEXITSTATUS(status) == 1) ++skipped;
  }
  EXPECT_EQ(stored, 1);
  EXPECT_EQ(skipped, 3);
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  EXPECT_EQ(cache->entries()->size(), 1u);
  auto hit = cache->lookup("same-key");
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->out, "same output\n");
  ASSERT_TRUE(cache->materialise_out(**hit, d.path() / "replay").ok());
  EXPECT_EQ(read_file(d.path() / "replay" / "r.txt"), std::string(200'000, 'r'));
  // Identical content, identical blobs: 3 (stdout, stderr, file) + the manifest.
  EXPECT_EQ(blob_count(home), 4u);
}

TEST(ResultCache, AFullDiskLeavesNoPartialEntry) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  ASSERT_TRUE(ResultCache::open(home, kDefaultCacheMaxBytes).ok());
  fs::path out = d.path() / "out";
  write_file(out / "big.bin", std::string(3 << 20, 'b'));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A file size limit makes every write past 1 MiB fail (EFBIG), as a full disk does
    // part-way through a store.
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {1 << 20, 1 << 20};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(10);
    auto c = ResultCache::open(home, kDefaultCacheMaxBytes);
    if (!c) ::_exit(11);
    auto req = request("k1", "out\n", "err\n", 0);
    req.out_dir = out;
    auto r = c->store(req);
    ::_exit(r.ok() ? 12 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the store must fail";
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  EXPECT_FALSE(cache->lookup("k1")->has_value());
  EXPECT_EQ(cache->entries()->size(), 0u);
  EXPECT_EQ(blob_count(home), 0u) << "no blob or temp file of the failed store is left";
}

TEST(ResultCache, FileIdentityIsRememberedAndFollowsContent) {
  TmpDir d;
  auto cache = ResultCache::open(d.path() / "home", kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok());
  write_file(d.path() / "interp", "v1");
  fs::create_symlink(d.path() / "interp", d.path() / "link");
  auto a = cache->file_identity(d.path() / "link");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, cache->file_identity(d.path() / "interp").value());
  write_file(d.path() / "interp", "v2");
  auto b = cache->file_identity(d.path() / "link");
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
}

TEST(ResultCache, ACorruptIndexIsMovedAsideAndStartedAfresh) {
  TmpDir d;
  const fs::path home = d.path() / "home";
  {
    auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(cache->store(request("k1", "x", "", 0)).value());
  }
  fs::remove(home / "cache" / "index.db-wal");
  fs::remove(home / "cache" / "index.db-shm");
  write_file(home / "cache" / "index.db", std::string(8192, 'Z'));
  auto cache = ResultCache::open(home, kDefaultCacheMaxBytes);
  ASSERT_TRUE(cache.ok()) << cache.error().describe();
  EXPECT_FALSE(cache->lookup("k1")->has_value());
  ASSERT_TRUE(cache->store(request("k1", "x", "", 0)).value());
}

}  // namespace
}  // namespace soyaos::moon
