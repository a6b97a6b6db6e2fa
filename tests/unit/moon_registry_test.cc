// The Moon's registry (moon/registry.h): push/pull round trips, content addressing,
// refusals, tamper detection, flags (C8(4)), and crash safety under SIGKILL.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/digest.h"
#include "moon/backend.h"
#include "moon/registry.h"
#include "moon_test_util.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using testing::make_pack;
using testing::read_file;
using testing::TmpDir;
using testing::write_file;

Registry open_reg(const fs::path& home) {
  auto r = Registry::open(home);
  EXPECT_TRUE(r) << r.error().describe();
  return std::move(r).value();
}

PushResult push_ok(Registry& reg, const fs::path& dir) {
  auto r = reg.push(dir, current_actor());
  EXPECT_TRUE(r) << r.error().describe();
  return r ? std::move(r).value() : PushResult{};
}

TEST(MoonRegistry, PushThenPullGivesTheSameTree) {
  TmpDir t;
  make_pack(t.path() / "src", "demo", "1.0.0");
  auto reg = open_reg(t.path() / "home");
  auto r = push_ok(reg, t.path() / "src");
  ASSERT_EQ(r.outcome, PushOutcome::pushed);
  EXPECT_EQ(r.pack.tree_digest, tree_digest(t.path() / "src").value());
  EXPECT_EQ(r.pack.manifest, read_file(t.path() / "src" / "soyapack.yaml"));

  auto p = reg.pull({"demo", "1.0.0"}, t.path() / "out");
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(tree_digest(t.path() / "out").value(), r.pack.tree_digest);
  EXPECT_EQ(read_file(t.path() / "out" / "main.py"), "print('hello')\n");
  EXPECT_EQ(read_file(t.path() / "out" / "data/nested/deep/x.json"), "{\"a\":1}\n");

  // OCI layout: oci-layout, index.json naming the ref, three blobs.
  const fs::path oci = t.path() / "home" / "oci";
  EXPECT_EQ(json::parse(read_file(oci / "oci-layout"))["imageLayoutVersion"], "1.0.0");
  const json index = json::parse(read_file(oci / "index.json"));
  ASSERT_EQ(index["manifests"].size(), 1U);
  EXPECT_EQ(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "demo@1.0.0");
  const std::string mdig = index["manifests"][0]["digest"];
  const json image = json::parse(read_file(oci / "blobs/sha256" / mdig.substr(7)));
  EXPECT_EQ(image["layers"][0]["mediaType"], kPackMediaType);
  EXPECT_EQ(image["layers"][0]["digest"], r.pack.digest);
  const std::string cdig = image["config"]["digest"];
  const json config = json::parse(read_file(oci / "blobs/sha256" / cdig.substr(7)));
  EXPECT_EQ(config["manifest"]["name"], "demo");
  EXPECT_EQ(config["manifest"]["capabilities"]["fs"]["read"][0], "/workdir");
  EXPECT_TRUE(reg.verify().value().empty());

  // pack_pushed went into the store.
  EventQuery q;
  q.type = "pack_pushed";
  auto ev = reg.store().query_events(q);
  ASSERT_EQ(ev->size(), 1U);
  EXPECT_EQ((*ev)[0].pack, "demo");
  EXPECT_EQ(json::parse((*ev)[0].json)["data"]["archive_digest"], r.pack.digest);
}

TEST(MoonRegistry, SameContentTwiceIsOneDigestDifferentContentIsRefused) {
  TmpDir t;
  make_pack(t.path() / "a", "demo", "1.0.0");
  make_pack(t.path() / "b", "demo", "1.0.0");  // same content elsewhere
  auto reg = open_reg(t.path() / "home");
  auto first = push_ok(reg, t.path() / "a");
  auto second = push_ok(reg, t.path() / "b");
  EXPECT_EQ(first.outcome, PushOutcome::pushed);
  EXPECT_EQ(second.outcome, PushOutcome::already_pushed);
  EXPECT_EQ(first.pack.digest, second.pack.digest);
  EXPECT_EQ(reg.list()->size(), 1U);

  write_file(t.path() / "b" / "main.py", "print('changed')\n");
  auto third = push_ok(reg, t.path() / "b");
  EXPECT_EQ(third.outcome, PushOutcome::conflict);
  EXPECT_EQ(third.pack.digest, first.pack.digest);
  EXPECT_NE(third.attempted_digest, first.pack.digest);
  // The refused content left no blob behind.
  EXPECT_FALSE(fs::exists(t.path() / "home/oci/blobs/sha256" / third.attempted_digest.substr(7)));
  EventQuery q;
  q.type = "pack_pushed";
  EXPECT_EQ(reg.store().query_events(q)->size(), 1U);
}

TEST(MoonRegistry, InvalidOrLintErrorPacksAreRefused) {
  TmpDir t;
  auto reg = open_reg(t.path() / "home");
  write_file(t.path() / "bad" / "soyapack.yaml", "soyapack: v0\nname: Bad Name\n");
  auto r = push_ok(reg, t.path() / "bad");
  EXPECT_EQ(r.outcome, PushOutcome::invalid);
  EXPECT_FALSE(r.diagnostics.empty());
  // A side-effect tool in a read-only pack: a lint error.
  make_pack(t.path() / "lint", "demo", "1.0.0");
  write_file(t.path() / "lint" / "soyapack.yaml",
             testing::pack_manifest("demo", "1.0.0") +
                 "tools:\n  fetch:\n    kind: builtin.http_get\n    url: https://api.example.com/x\n");
  r = push_ok(reg, t.path() / "lint");
  EXPECT_EQ(r.outcome, PushOutcome::lint_errors);
  EXPECT_TRUE(reg.list()->empty());
}

TEST(MoonRegistry, TamperedBlobIsRefusedAndNothingIsExtracted) {
  TmpDir t;
  make_pack(t.path() / "src", "demo", "1.0.0");
  auto reg = open_reg(t.path() / "home");
  auto r = push_ok(reg, t.path() / "src");
  const fs::path blob = t.path() / "home/oci/blobs/sha256" / r.pack.digest.substr(7);
  std::string bytes = read_file(blob);
  const auto at = bytes.find("print('hello')");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 14, "print('pwned')");  // same size: the archive stays well-formed
  write_file(blob, bytes);
  auto p = reg.pull({"demo", "1.0.0"}, t.path() / "out");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find(r.pack.digest), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("tampered"), std::string::npos) << p.error().message;
  EXPECT_FALSE(fs::exists(t.path() / "out"));
  // Malformed too (header clobbered): still reported as a digest mismatch.
  bytes[0] = '/';
  write_file(blob, bytes);
  p = reg.pull({"demo", "1.0.0"}, t.path() / "out");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find(r.pack.digest), std::string::npos) << p.error().message;
  EXPECT_FALSE(reg.verify().value().empty());
  // No temp directories left next to the destination.
  for (const auto& e : fs::directory_iterator(t.path()))
    EXPECT_EQ(e.path().filename().string().find(".out.pull"), std::string::npos) << e.path();
}

TEST(MoonRegistry, PullDestinationRules) {
  TmpDir t;
  make_pack(t.path() / "src", "demo", "1.0.0");
  auto reg = open_reg(t.path() / "home");
  push_ok(reg, t.path() / "src");
  write_file(t.path() / "full" / "keep.txt", "mine\n");
  auto p = reg.pull({"demo", "1.0.0"}, t.path() / "full");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("not empty"), std::string::npos);
  EXPECT_EQ(read_file(t.path() / "full" / "keep.txt"), "mine\n");
  fs::create_directories(t.path() / "empty");
  EXPECT_TRUE(reg.pull({"demo", "1.0.0"}, t.path() / "empty"));
  EXPECT_TRUE(fs::exists(t.path() / "empty" / "main.py"));
  EXPECT_TRUE(reg.pull({"demo", "1.0.0"}, t.path() / "a" / "b" / "c"));
  EXPECT_FALSE(reg.pull({"demo", "9.9.9"}, t.path() / "nine"));
  write_file(t.path() / "afile", "x");
  EXPECT_FALSE(reg.pull({"demo", "1.0.0"}, t.path() / "afile"));
}

TEST(MoonRegistry, FindByTreeOrArchiveDigest) {
  TmpDir t;
  make_pack(t.path() / "src", "demo", "1.0.0");
  auto reg = open_reg(t.path() / "home");
  auto r = push_ok(reg, t.path() / "src");
  auto by_tree = reg.find_by_digest(tree_digest(t.path() / "src").value());
  ASSERT_TRUE(by_tree && by_tree->has_value());
  EXPECT_EQ((*by_tree)->version, "1.0.0");
  auto by_archive = reg.find_by_digest(r.pack.digest);
  ASSERT_TRUE(by_archive && by_archive->has_value());
  EXPECT_EQ((*by_archive)->name, "demo");
  EXPECT_FALSE(reg.find_by_digest("sha256:0000")->has_value());
}

TEST(MoonRegistry, FlagsStayOnTheirVersionUntilUnflaggedWithAReason) {
  TmpDir t;
  const auto home = t.path() / "home";
  auto reg = open_reg(home);
  make_pack(t.path() / "v1", "demo", "1.0.0");
  make_pack(t.path() / "v2", "demo", "2.0.0");
  push_ok(reg, t.path() / "v1");
  EXPECT_FALSE(reg.active_flag("demo", "1.0.0")->has_value());

  const json violation = {{"type", "capability_violation"},
                          {"data", {{"surface", "fs"}, {"resource", "/etc/shadow"}, {"syscall", "openat"}}}};
  EXPECT_TRUE(reg.flag("demo", "1.0.0", "sha256:aa", "RUN1", violation, current_actor()).value());
  EXPECT_FALSE(reg.flag("demo", "1.0.0", "sha256:aa", "RUN1", violation, current_actor()).value());  // once per run
  auto active = reg.active_flag("demo", "1.0.0");
  ASSERT_TRUE(active && active->has_value());
  EXPECT_EQ((*active)->run_id, "RUN1");
  EXPECT_EQ((*active)->digest, "sha256:aa");
  EXPECT_EQ(json::parse((*active)->violation), violation);

  // Raising it stored one pack_flagged event naming the run that caused it.
  auto events = reg.store().query_events({.type = "pack_flagged"});
  ASSERT_EQ(events->size(), 1U);
  auto ev = json::parse((*events)[0].json);
  EXPECT_EQ(ev["data"]["run_id"], "RUN1");
  EXPECT_EQ(ev["data"]["raised"], true);
  EXPECT_EQ(ev["data"]["violation"], violation);

  // A newer version does not clear it (C8 (4)).
  push_ok(reg, t.path() / "v2");
  EXPECT_TRUE(reg.active_flag("demo", "1.0.0")->has_value());
  EXPECT_FALSE(reg.active_flag("demo", "2.0.0")->has_value());

  // By digest: another NAME@VERSION of the same content is flagged too.
  EXPECT_TRUE(reg.active_flag("copy", "9.0.0", "sha256:aa")->has_value());
  EXPECT_FALSE(reg.active_flag("copy", "9.0.0", "sha256:bb")->has_value());
  EXPECT_FALSE(reg.active_flag("copy", "9.0.0")->has_value());

  // Unflag needs a reason, and records who and why in the flag and a pack_unflagged event.
  EXPECT_FALSE(reg.unflag("demo", "1.0.0", "  ", Actor{1234, "alice"}));
  EXPECT_TRUE(reg.active_flag("demo", "1.0.0")->has_value());
  EXPECT_TRUE(reg.flag("demo", "1.0.0", "sha256:aa", "RUN2", violation, current_actor()).value());
  EXPECT_EQ(reg.unflag("demo", "1.0.0", "false positive: test fixture", Actor{1234, "alice"}).value(), 2);
  EXPECT_FALSE(reg.active_flag("demo", "1.0.0")->has_value());
  auto flags = reg.flags("demo", "1.0.0");
  ASSERT_EQ(flags->size(), 2U);
  for (const auto& f : *flags) {
    EXPECT_TRUE(f.cleared);
    EXPECT_EQ(f.cleared_by.uid, 1234);
    EXPECT_EQ(f.cleared_by.user, "alice");
    EXPECT_EQ(f.cleared_reason, "false positive: test fixture");
  }
  auto un = reg.store().query_events({.type = "pack_unflagged"});
  ASSERT_EQ(un->size(), 1U);
  auto u = json::parse((*un)[0].json);
  EXPECT_EQ(u["subject"], "demo@1.0.0");
  EXPECT_EQ(u["data"]["reason"], "false positive: test fixture");
  EXPECT_EQ(u["data"]["actor"]["uid"], 1234);
  EXPECT_EQ(u["data"]["actor"]["user"], "alice");
  EXPECT_EQ(u["data"]["cleared"], 2);
  // Nothing left to clear: no event.
  EXPECT_EQ(reg.unflag("demo", "1.0.0", "again", Actor{1234, "alice"}).value(), 0);
  EXPECT_EQ(reg.store().query_events({.type = "pack_unflagged"})->size(), 1U);
}

TEST(MoonRegistry, SchemaOneUpgradesKeepingItsFlags) {
  TmpDir t;
  const auto home = t.path() / "home";
  fs::create_directories(home);
  {
    // A version-1 store with one flag, as an older soyaos left it.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((home / "moon.db").c_str(), &db), SQLITE_OK);
    const char* sql =
        "CREATE TABLE packs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, version TEXT NOT NULL,"
        " digest TEXT NOT NULL, tree_digest TEXT NOT NULL, oci_manifest TEXT NOT NULL, oci_manifest_size INTEGER"
        " NOT NULL, size INTEGER NOT NULL, pushed_at TEXT NOT NULL, manifest TEXT NOT NULL, UNIQUE (name, version));"
        "CREATE TABLE flags (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, version TEXT NOT NULL,"
        " run_id TEXT NOT NULL, violation TEXT NOT NULL, flagged_at TEXT NOT NULL, packs_seen INTEGER NOT NULL,"
        " cleared INTEGER NOT NULL DEFAULT 0, cleared_at TEXT, UNIQUE (name, version, run_id));"
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, type TEXT NOT NULL,"
        " run_id TEXT, pack TEXT, version TEXT, json TEXT NOT NULL);"
        "INSERT INTO flags (name, version, run_id, violation, flagged_at, packs_seen)"
        " VALUES ('demo', '1.0.0', 'OLD', '{}', '2026-11-29T12:00:00.000000Z', 0);"
        "PRAGMA user_version=1;";
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto reg = open_reg(home);
  auto f = reg.active_flag("demo", "1.0.0");
  ASSERT_TRUE(f && f->has_value());
  EXPECT_EQ((*f)->run_id, "OLD");
  EXPECT_EQ((*f)->digest, "");
  EXPECT_EQ(reg.unflag("demo", "1.0.0", "reviewed", Actor{0, "root"}).value(), 1);
}

TEST(MoonRegistry, ParseRef) {
  std::string why;
  auto r = parse_ref("issue-summarizer@1.4.2", why);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->name, "issue-summarizer");
  EXPECT_EQ(r->version, "1.4.2");
  EXPECT_TRUE(parse_ref("a@1.0.0-rc.1+b5", why));
  for (const char* bad : {"", "demo", "demo@", "@1.0.0", "Demo@1.0.0", "demo@1.0", "demo@v1.0.0", "demo@1.0.0@x",
                          "de mo@1.0.0", "../x@1.0.0", "demo@01.0.0"}) {
    why.clear();
    EXPECT_FALSE(parse_ref(bad, why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(MoonRegistry, RelativeLinkInsideThePackIsKeptOtherLinksAreRefused) {
  TmpDir t;
  make_pack(t.path() / "src", "demo", "1.0.0");
  fs::create_symlink("main.py", t.path() / "src" / "alias.py");
  auto reg = open_reg(t.path() / "home");
  auto r = reg.push(t.path() / "src", current_actor());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->outcome, PushOutcome::pushed);
  make_pack(t.path() / "bad", "demo", "1.0.1");
  fs::create_symlink("../src/main.py", t.path() / "bad" / "alias.py");
  r = reg.push(t.path() / "bad", current_actor());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("alias.py -> ../src/main.py"), std::string::npos) << r.error().message;
  EXPECT_EQ(reg.list()->size(), 1U);
}

// Pushers racing on one NAME@VERSION: one content wins, identical pushes report it, the
// others are refused; the layout stays consistent.
TEST(MoonRegistry, ConcurrentPushesOfOneVersion) {
  TmpDir t;
  const fs::path home = t.path() / "home";
  ASSERT_TRUE(Registry::open(home));
  make_pack(t.path() / "a", "race", "1.0.0", "print('a')\n");
  make_pack(t.path() / "b", "race", "1.0.0", "print('b')\n");
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto reg = Registry::open(home);
      if (!reg) _exit(10);
      auto r = reg->push(t.path() / (i % 2 == 0 ? "a" : "b"), current_actor());
      if (!r) _exit(11);
      _exit(static_cast<int>(r->outcome));
    }
    kids.push_back(pid);
  }
  int pushed = 0, conflicts = 0, already = 0;
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    const auto o = static_cast<PushOutcome>(WEXITSTATUS(status));
    pushed += o == PushOutcome::pushed;
    conflicts += o == PushOutcome::conflict;
    already += o == PushOutcome::already_pushed;
  }
  EXPECT_EQ(pushed, 1);
  EXPECT_EQ(conflicts, 4);
  EXPECT_EQ(already, 3);
  auto reg = open_reg(home);
  EXPECT_EQ(reg.list()->size(), 1U);
  EXPECT_TRUE(reg.verify().value().empty());
  EXPECT_EQ(json::parse(read_file(home / "oci/index.json"))["manifests"].size(), 1U);
}

// kill -9 during pushes: afterwards every listed pack pulls and verifies, index.json lists
// exactly the stored packs, and every visible blob holds the content its name says.
TEST(MoonRegistry, SigkillDuringPushLeavesAConsistentRegistry) {
  TmpDir t;
  const fs::path home = t.path() / "home";
  ASSERT_TRUE(Registry::open(home));
  std::mt19937 rng(12345);
  std::mt19937_64 rng64(67890);
  // A large pack: 12 MiB of random bytes in several files (3 MiB and half the kills under
  // AddressSanitizer, whose unoptimised Debug build made this one test take 210 s of CI).
#if defined(__SANITIZE_ADDRESS__)
  constexpr size_t kPartBytes = size_t{1} << 20;
  constexpr int kKills = 10;
#else
  constexpr size_t kPartBytes = size_t{4} << 20;
  constexpr int kKills = 20;
#endif
  auto make_big = [&](const fs::path& dir, int version) {
    make_pack(dir, "big", "1.0." + std::to_string(version));
    std::string data(kPartBytes, '\0');
    for (int f = 0; f < 3; ++f) {
      // 8 random bytes per draw: incompressible content without a per-byte loop.
      for (size_t i = 0; i + 8 <= data.size(); i += 8) {
        const uint64_t word = rng64();
        std::memcpy(&data[i], &word, sizeof word);
      }
      write_file(dir / "blob" / ("part" + std::to_string(f)), data);
    }
  };
  auto push_in_child = [&](const fs::path& dir) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto reg = Registry::open(home);
      if (!reg) _exit(10);
      auto r = reg->push(dir, current_actor());
      _exit(r && r->outcome == PushOutcome::pushed ? 0 : 11);
    }
    return pid;
  };
  // How long one push takes, to spread the kills over it.
  make_big(t.path() / "p0", 0);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = push_in_child(t.path() / "p0");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto push_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();

  int killed = 0, completed = 1;
  for (int i = 1; i <= kKills; ++i) {
    const fs::path dir = t.path() / ("p" + std::to_string(i));
    make_big(dir, i);
    pid = push_in_child(dir);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<uint64_t>(push_us * 12 / 10 + 1)));
    ::kill(pid, SIGKILL);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) ++killed;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ++completed;

    auto reg = open_reg(home);
    auto problems = reg.verify();
    ASSERT_TRUE(problems) << problems.error().describe();
    for (const auto& p : *problems) ADD_FAILURE() << "after kill " << i << ": " << p;
    for (const auto& e : fs::directory_iterator(home / "oci/blobs/sha256")) {
      const std::string n = e.path().filename().string();
      if (n.rfind(".tmp-", 0) == 0) continue;  // a killed push's temp file: not a blob
      EXPECT_EQ(sha256_hex(read_file(e.path())), n) << "half-written blob visible after kill " << i;
    }
  }
  auto reg = open_reg(home);
  auto packs = reg.list().value();
  // A push killed after its commit is a completed push that did not get to report it.
  EXPECT_GE(static_cast<int>(packs.size()), completed);
  EXPECT_LE(static_cast<int>(packs.size()), completed + killed);
  for (const auto& p : packs) {
    const fs::path out = t.path() / ("out-" + p.version);
    auto pulled = reg.pull({p.name, p.version}, out);
    ASSERT_TRUE(pulled) << p.version << ": " << pulled.error().describe();
    EXPECT_EQ(tree_digest(out).value(), p.tree_digest);
    fs::remove_all(out);
  }
  // A later push cleans the temp files of dead pushes.
  make_pack(t.path() / "last", "big", "9.0.0");
  push_ok(reg, t.path() / "last");
  for (const auto& e : fs::directory_iterator(home / "oci/blobs/sha256"))
    EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0U) << e.path();
  std::printf("sigkill: %d killed, %d completed pushes (one push ~%lld ms)\n", killed, completed,
              static_cast<long long>(push_us / 1000));
}

}  // namespace
}  // namespace soyaos::moon
