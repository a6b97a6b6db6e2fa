// `soyaos moon check` and `soyaos scope verify` against a real record (SPEC.md E6): real
// runs of the probe pack (a cached run, its replay, a run with a violation) fill a home
// once; each test tampers with a COPY of it the way an intruder with the files would
// (python3's sqlite3, the cache's files) and checks that the finding names the seq, run
// or entry. Root, nobody (rootless.) and daemon mode (daemon.: the daemon holds the key).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The cacheable run: stdout, stderr and an out tree.
const std::vector<std::string> kRich = {"steps", "write:/workdir/out/a.txt", "stderr:a warning on stderr"};

class MoonRecord : public ::testing::Test {
 protected:
  // The golden home, built once per suite: three real runs.
  static void SetUpTestSuite() {
    if (rootless_mode() && ::geteuid() != 0) return;
    golden_ = std::make_unique<TempDir>();
    const fs::path pack = golden_->copy_from_source("tests/fixtures/probe", "pack");
    const std::string home = (golden_->path() / "home").string();
    auto run = [&](const std::string& tag, std::vector<std::string> agent) {
      std::vector<std::string> args = {"run", pack.string(), "--out", (golden_->path() / ("out-" + tag)).string(),
                                       "--"};
      args.insert(args.end(), agent.begin(), agent.end());
      return run_soyaos(args, {{"SOYAOS_HOME", home}}, golden_->path());
    };
    cold_ = run("cold", kRich);
    hit_ = run("hit", kRich);
    bad_ = run("bad", {"read", "/etc/shadow"});
  }
  static void TearDownTestSuite() { golden_.reset(); }

  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    ASSERT_EQ(cold_.exit_code, 0) << cold_.err;
    ASSERT_NE(hit_.err.find("replayed from cache"), std::string::npos) << hit_.err;
    ASSERT_EQ(bad_.exit_code, 3) << bad_.err;
    // A copy, owners and modes kept (rootless: nobody's files stay nobody's).
    home_ = t_.path() / "home";
    ASSERT_EQ(std::system(("cp -a '" + (golden_->path() / "home").string() + "' '" + home_.string() + "'").c_str()), 0);
    std::error_code ec;
    fs::remove(home_ / "moon.sock", ec);  // daemon mode: the golden home's daemon stays there
  }

  RunOutput soyaos(const std::vector<std::string>& args) {
    // The files themselves, never a daemon (moon check and scope verify read them anyway).
    return run_soyaos(args, {{"SOYAOS_HOME", home_.string()}, {"SOYAOS_MOON_SOCKET", ""}}, t_.path());
  }
  // SQL through python3's sqlite3 (an intruder's tool), on the copy.
  void tamper(const std::string& sql) {
    const fs::path script = t_.path() / "tamper.py";
    std::ofstream(script, std::ios::trunc) << "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n"
                                           << "c.executescript(open(sys.argv[2]).read())\nc.commit()\n";
    const fs::path sql_file = t_.path() / "tamper.sql";
    std::ofstream(sql_file, std::ios::trunc) << sql;
    ASSERT_EQ(std::system(("python3 '" + script.string() + "' '" + (home_ / "moon.db").string() + "' '" +
                           sql_file.string() + "'")
                              .c_str()),
              0)
        << sql;
    owner_back();
  }
  // Files the intruder (root) created in the copy go back to its owner (rootless: nobody).
  void owner_back() {
    ASSERT_EQ(std::system(("chown -R --reference='" + home_.string() + "' '" + home_.string() + "'").c_str()), 0);
  }
  // The cacheable run again, in the copy, into a fresh --out (a replay needs one).
  RunOutput run_rich(const std::string& tag) {
    std::vector<std::string> args = {"run", (golden_->path() / "pack").string(), "--out",
                                     (t_.path() / ("out-" + tag)).string(), "--"};
    args.insert(args.end(), kRich.begin(), kRich.end());
    return run_soyaos(args, {{"SOYAOS_HOME", home_.string()}, {"SOYAOS_MOON_SOCKET", ""}}, t_.path());
  }
  // A run that found a forged entry: not replayed, run for real, why on stderr and in the
  // run's own cache_rejected event; the entry is dropped and the genuine result stored, so
  // the record checks clean again and the next run replays that (E6, C10).
  void expect_rejected(const std::string& why) {
    // The golden home's bad run flagged the pack, and a flagged version is never replayed.
    auto unflag = soyaos({"pack", "unflag", "comet-probe@0.1.0", "--reason", "replay test"});
    ASSERT_EQ(unflag.exit_code, 0) << unflag.out << unflag.err;
    auto r = run_rich("rejected");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("replayed from cache"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("is not replayed: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("RESULT ok"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("forged"), std::string::npos) << r.out;
    const std::string rejected = query("SELECT json FROM events WHERE type='cache_rejected'");
    const json j = json::parse(rejected, nullptr, false);
    ASSERT_TRUE(j.is_object()) << rejected;
    EXPECT_NE(j["data"].value("reason", "").find(why), std::string::npos) << rejected;
    EXPECT_EQ(j["data"]["dropped"], true) << rejected;
    EXPECT_EQ(query("SELECT type FROM events WHERE run_id='" + j["data"].value("run_id", "") + "' ORDER BY seq LIMIT 1"),
              "run_started");
    auto next = run_rich("next");
    EXPECT_EQ(next.exit_code, 0) << next.err;
    EXPECT_NE(next.err.find("replayed from cache"), std::string::npos) << next.err;
  }
  std::string query(const std::string& sql) {
    const fs::path script = t_.path() / "query.py";
    std::ofstream(script, std::ios::trunc) << "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n"
                                           << "print(c.execute(sys.argv[2]).fetchone()[0], end='')\n";
    const fs::path out = t_.path() / "query.out";
    EXPECT_EQ(std::system(("python3 '" + script.string() + "' '" + (home_ / "moon.db").string() + "' \"" + sql +
                           "\" > '" + out.string() + "'")
                              .c_str()),
              0);
    return read_file(out);
  }
  std::string seq_of(const std::string& type, const std::string& run) {
    return query("SELECT seq FROM events WHERE type='" + type + "' AND run_id='" + run + "'");
  }
  void expect_named(const RunOutput& r, const std::string& a, const std::string& b = "") {
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    bool found = false;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.find(a) != std::string::npos && (b.empty() || line.find(b) != std::string::npos)) found = true;
    }
    EXPECT_TRUE(found) << "no line with '" << a << "' and '" << b << "' in:\n" << r.out << r.err;
  }

  static std::unique_ptr<TempDir> golden_;
  static RunOutput cold_, hit_, bad_;
  TempDir t_;
  fs::path home_;
};

std::unique_ptr<TempDir> MoonRecord::golden_;
RunOutput MoonRecord::cold_, MoonRecord::hit_, MoonRecord::bad_;

TEST_F(MoonRecord, UntouchedStorePasses) {
  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "ok\n");
  EXPECT_NE(r.err.find("verified: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 cache entries"), std::string::npos) << r.err;
  auto v = soyaos({"scope", "verify"});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_EQ(v.out, "ok\n");
  const std::string bad_run = query("SELECT run_id FROM events WHERE type='capability_violation'");
  auto one = soyaos({"scope", "verify", "--run", bad_run});
  EXPECT_EQ(one.exit_code, 0) << one.out << one.err;
  // The key never left the home's owner; the public half and the head are there.
  struct stat st {};
  ASSERT_EQ(::stat((home_ / "moon.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_TRUE(fs::exists(home_ / "moon.pub"));
  EXPECT_TRUE(fs::exists(home_ / "scope.head"));
  // An unknown run is a problem, not an ok.
  auto none = soyaos({"scope", "verify", "--run", "NOSUCHRUN"});
  EXPECT_EQ(none.exit_code, 1) << none.out;
}

TEST_F(MoonRecord, EditedEventIsNamed) {
  const std::string run = query("SELECT run_id FROM events WHERE type='capability_violation'");
  const std::string seq = seq_of("capability_violation", run);
  tamper("UPDATE events SET json=replace(json, '/etc/shadow', '/etc/motd') WHERE seq=" + seq);
  expect_named(soyaos({"moon", "check"}), "scope: seq " + seq + " (capability_violation, run " + run + ")", "edited");
  expect_named(soyaos({"scope", "verify", "--run", run}), "seq " + seq + " (", "edited");
}

TEST_F(MoonRecord, BackdatedEventIsNamed) {
  const std::string run = query("SELECT run_id FROM events WHERE type='capability_violation'");
  const std::string seq = seq_of("capability_violation", run);
  tamper("UPDATE events SET time='2020-01-01T00:00:00.000000Z' WHERE seq=" + seq);
  expect_named(soyaos({"moon", "check"}), "scope: seq " + seq + " (", "backdated");
}

TEST_F(MoonRecord, DeletedMiddleRowIsNamed) {
  const std::string run = query("SELECT run_id FROM events WHERE type='capability_violation'");
  const std::string seq = seq_of("capability_violation", run);
  tamper("DELETE FROM events WHERE seq=" + seq);
  expect_named(soyaos({"moon", "check"}), "scope: seq " + seq + ": deleted");
  expect_named(soyaos({"scope", "verify", "--run", run}), "seq " + seq + ": deleted");
}

TEST_F(MoonRecord, DeletedTailIsNamed) {
  const std::string last = query("SELECT MAX(seq) FROM events");
  const std::string run = query("SELECT run_id FROM events WHERE type='capability_violation'");
  const std::string first_of_run = query("SELECT MIN(seq) FROM events WHERE run_id='" + run + "'");
  // The whole last run, its checkpoints and the sequence counter: the head file remains.
  tamper("DELETE FROM events WHERE seq >= " + first_of_run + "; DELETE FROM checkpoints WHERE seq >= " + first_of_run +
         "; UPDATE sqlite_sequence SET seq=" + std::to_string(std::stoll(first_of_run) - 1) + " WHERE name='events'");
  expect_named(soyaos({"moon", "check"}), "seq " + first_of_run + ".." + last + ": deleted", "scope.head");
}

TEST_F(MoonRecord, InsertedForgedRowIsNamed) {
  // A fabricated event for the clean run, hashed and linked by the documented formula.
  const std::string last = query("SELECT MAX(seq) FROM events");
  const std::string prev = query("SELECT hash FROM events WHERE seq=" + last);
  const std::string run = query("SELECT run_id FROM events WHERE type='run_finished' ORDER BY seq LIMIT 1");
  const std::string forged = R"({"type":"capability_violation","time":"2026-01-01T00:00:00.000000Z","data":{"run_id":")" +
                             run + R"("}})";
  const std::string seq = std::to_string(std::stoll(last) + 1);
  const fs::path script = t_.path() / "forge.py";
  std::ofstream(script) << "import hashlib, sqlite3, sys\n"
                        << "seq, prev, j = int(sys.argv[2]), sys.argv[3], sys.argv[4]\n"
                        << "h = hashlib.sha256(f'{seq}\\n{prev}\\n{j}'.encode()).hexdigest()\n"
                        << "c = sqlite3.connect(sys.argv[1])\n"
                        << "c.execute('INSERT INTO events (seq, time, type, run_id, json, prev_hash, hash) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?)', (seq, '2026-01-01T00:00:00.000000Z', "
                           "'capability_violation', sys.argv[5], j, prev, h))\n"
                        << "c.commit()\n";
  ASSERT_EQ(std::system(("python3 '" + script.string() + "' '" + (home_ / "moon.db").string() + "' " + seq + " " + prev +
                         " '" + forged + "' " + run)
                            .c_str()),
            0);
  owner_back();
  expect_named(soyaos({"moon", "check"}), "scope: seq " + seq, "after the last checkpoint");
  expect_named(soyaos({"scope", "verify", "--run", run}), "run " + run, "after the last checkpoint");
}

TEST_F(MoonRecord, ReorderedRowsAreNamed) {
  tamper("UPDATE events SET seq=-1 WHERE seq=2; UPDATE events SET seq=2 WHERE seq=3; UPDATE events SET seq=3 WHERE seq=-1");
  auto r = soyaos({"moon", "check"});
  expect_named(r, "scope: seq 2 (", "edited");
  expect_named(r, "scope: seq 3 (", "edited");
}

TEST_F(MoonRecord, ForgedCheckpointIsNamed) {
  const std::string id = query("SELECT MAX(id) FROM checkpoints");
  tamper("UPDATE checkpoints SET time='2026-01-01T00:00:00.000000Z' WHERE id=" + id);
  expect_named(soyaos({"moon", "check"}), "scope: checkpoint " + id + " (seq", "bad signature");
  // Pinning another Moon's key (that of a home where a pack was pushed) names them all.
  const fs::path other = t_.path() / "other";
  const auto src = t_.copy_from_source("examples/hello-report", "src-hello");
  auto push = run_soyaos({"pack", "push", src.string()}, {{"SOYAOS_HOME", other.string()}}, t_.path());
  ASSERT_EQ(push.exit_code, 0) << push.err;
  auto pinned = soyaos({"scope", "verify", "--key", (other / "moon.pub").string()});
  expect_named(pinned, "checkpoint 1 (seq", "not by this Moon's key");
  auto missing = soyaos({"scope", "verify", "--key", (t_.path() / "nope.pem").string()});
  EXPECT_EQ(missing.exit_code, 1) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("--key"), std::string::npos) << missing.err;
}

TEST_F(MoonRecord, ForgedCacheEntryIsNamed) {
  // The intruder rewrites the cached stdout of the clean run (a new blob, a new entry
  // manifest naming it, the index row pointing at that manifest): internally consistent,
  // replayable, and crediting the real run.
  const fs::path script = t_.path() / "forge_cache.py";
  std::ofstream(script) << R"PY(import hashlib, json, os, sqlite3, sys
home = sys.argv[1]
blobs = os.path.join(home, "cache", "blobs", "sha256")
def put(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, d), "wb") as f:
        f.write(data)
    os.chmod(os.path.join(blobs, d), 0o644)
    return "sha256:" + d
c = sqlite3.connect(os.path.join(home, "cache", "index.db"))
key, manifest = c.execute("SELECT key, manifest FROM entries").fetchone()
m = json.loads(open(os.path.join(blobs, manifest[7:]), "rb").read())
out = b"RESULT ok forged\n"
m["stdout"] = {"digest": put(out), "size": len(out)}
text = json.dumps(m).encode()
new = put(text)
c.execute("UPDATE entries SET manifest=? WHERE key=?", (new, key))
c.execute("INSERT OR IGNORE INTO refs (key, digest) VALUES (?, ?)", (key, new))
c.commit()
print(key[:12], end="")
)PY";
  const fs::path out = t_.path() / "forged.key";
  ASSERT_EQ(std::system(("python3 '" + script.string() + "' '" + home_.string() + "' > '" + out.string() + "'").c_str()),
            0);
  owner_back();
  const std::string key = read_file(out);
  const std::string run = query("SELECT run_id FROM events WHERE type='run_finished' ORDER BY seq LIMIT 1");
  auto r = soyaos({"moon", "check"});
  expect_named(r, "cache: entry " + key + " (comet-probe@0.1.0, run " + run + "): forged", "stdout");
  expect_named(soyaos({"scope", "verify", "--run", run}), "cache: entry " + key, "forged");
  expect_rejected("stdout");
  auto clean = soyaos({"moon", "check"});
  EXPECT_EQ(clean.exit_code, 0) << "the forged entry is gone, the genuine one checks: " << clean.out << clean.err;
}

TEST_F(MoonRecord, ReplayOfAnEntryCreditedToAnUnknownRunIsNamed) {
  // The cache_hit's original run loses its run_finished (and the entry credits a run the
  // record does not know): both are named.
  const std::string run = query("SELECT run_id FROM events WHERE type='run_finished' ORDER BY seq LIMIT 1");
  tamper("UPDATE events SET run_id='GONE', json=replace(json, '" + run + "', 'GONE') WHERE run_id='" + run + "'");
  auto r = soyaos({"moon", "check"});
  expect_named(r, "(cache_hit, run ", "a forged entry was replayed");
  expect_named(r, "cache: entry ", "has no run_finished");
  expect_rejected("has no run_finished");
}

}  // namespace
}  // namespace soyaos::testing
