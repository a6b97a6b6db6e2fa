// `soyaos pack push|pull|list|inspect|unflag` and `soyaos scope query|tail` end to end:
// the real binary with SOYAOS_HOME in a temp directory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <chrono>

#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class MoonCli : public ::testing::Test {
 protected:
  RunOutput soyaos(const std::vector<std::string>& args) { return run_soyaos(args, {{"SOYAOS_HOME", home()}}); }
  [[nodiscard]] std::string home() const { return (t_.path() / "home").string(); }
  [[nodiscard]] const TempDir& tmp() const { return t_; }
  std::string pack(const std::string& name = "hello-report") {
    return tmp().copy_from_source("examples/" + name, "src-" + name).string();
  }

 private:
  TempDir t_;
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string field(const std::string& line, int n) {
  std::istringstream in(line);
  std::string w;
  for (int i = 0; i <= n; ++i) in >> w;
  return w;
}

TEST_F(MoonCli, PushTwiceThenPullIsByteIdentical) {
  const std::string src = pack();
  auto r = soyaos({"pack", "push", src});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.out.rfind("pushed  hello-report@1.0.0  sha256:", 0), 0U) << r.out;
  const std::string digest = field(r.out, 2);
  EXPECT_EQ(digest.size(), 7U + 64);

  r = soyaos({"pack", "push", src});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "already pushed  hello-report@1.0.0  " + digest + "\n");

  r = soyaos({"pack", "list"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "hello-report@1.0.0  " + digest + "\n");

  const fs::path out = tmp().path() / "pulled";
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pulled  hello-report@1.0.0  " + digest + "  -> " + out.string() + "\n");
  EXPECT_EQ(tree_digest(out).value(), tree_digest(src).value());
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    EXPECT_EQ(read_file(e.path()), read_file(out / fs::relative(e.path(), src))) << e.path();
  }
  // Into it again: not empty, refused.
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", out.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  // Default destination: ./NAME in the current directory.
  r = run_soyaos({"pack", "pull", "hello-report@1.0.0"}, {{"SOYAOS_HOME", home()}}, tmp().path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp().path() / "hello-report" / "soyapack.yaml"));
}

TEST_F(MoonCli, DifferentContentSameVersionIsRefused) {
  const std::string src = pack();
  ASSERT_EQ(soyaos({"pack", "push", src}).exit_code, 0);
  tmp().write("src-hello-report/main.py", "print('changed')\n");
  auto r = soyaos({"pack", "push", src});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("hello-report@1.0.0 is already in the registry with different content"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lines(soyaos({"pack", "list"}).out).size(), 1U);
}

TEST_F(MoonCli, InvalidAndLintErrorPacksAreRefused) {
  tmp().write("bad/soyapack.yaml", "soyapack: v0\nname: demo\n");
  auto r = soyaos({"pack", "push", (tmp().path() / "bad").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("refused: the manifest is invalid"), std::string::npos) << r.err;
  tmp().write("lint/main.py", "print(1)\n");
  tmp().write("lint/soyapack.yaml",
              "soyapack: v0\nname: demo\nversion: 1.0.0\nagent:\n  runtime: python3\n  entrypoint: main.py\n"
              "tools:\n  fetch:\n    kind: builtin.http_get\n    url: https://api.example.com/x\n"
              "capabilities:\n  egress: []\n  determinism_tier: read-only\n");
  r = soyaos({"pack", "push", (tmp().path() / "lint").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("err   "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("refused: lint errors"), std::string::npos) << r.err;
  EXPECT_EQ(soyaos({"pack", "list"}).out, "");
}

TEST_F(MoonCli, TamperedBlobIsRefusedOnPull) {
  const std::string src = pack();
  auto r = soyaos({"pack", "push", src});
  ASSERT_EQ(r.exit_code, 0);
  const std::string digest = field(r.out, 2);
  const fs::path blob = fs::path(home()) / "oci/blobs/sha256" / digest.substr(7);
  std::string bytes = read_file(blob);
  bytes[bytes.size() / 2] ^= 1;
  {
    std::ofstream f(blob, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", (tmp().path() / "out").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("blob " + digest), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tampered"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp().path() / "out"));
}

TEST_F(MoonCli, MalformedNamesAreUsageErrors) {
  for (const char* cmd : {"pull", "inspect", "unflag"}) {
    for (const char* ref : {"hello-report", "hello-report@", "@1.0.0", "Hello@1.0.0", "hello@1.0", "a@b@c"}) {
      auto r = soyaos({"pack", cmd, ref});
      EXPECT_EQ(r.exit_code, 2) << cmd << " " << ref;
      EXPECT_NE(r.err.find(std::string("soyaos pack ") + cmd + ": "), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
  auto r = soyaos({"pack", "pull"});
  EXPECT_EQ(r.exit_code, 2);
  r = soyaos({"pack", "inspect", "nope@1.0.0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nope@1.0.0 is not in the registry"), std::string::npos) << r.err;
}

TEST_F(MoonCli, InspectListAndUnflagShowFlags) {
  const std::string src = pack();
  ASSERT_EQ(soyaos({"pack", "push", src}).exit_code, 0);
  // Raise a flag the way `soyaos run` will (Registry::flag): a row in moon.db's flags.
  const std::string db = home() + "/moon.db";
  tmp().write("flag.py",
              "import sqlite3, sys\n"
              "c = sqlite3.connect(sys.argv[1])\n"
              "v = '{\"data\":{\"surface\":\"fs\",\"resource\":\"/etc/shadow\",\"syscall\":\"openat\",\"errno\":\"ENOENT\"}}'\n"
              "c.execute(\"INSERT INTO flags (name, version, run_id, violation, flagged_at, packs_seen) \"\n"
              "          \"VALUES ('hello-report', '1.0.0', '01RUN', ?, '2026-11-29T12:00:00.000000Z', \"\n"
              "          \"(SELECT MAX(id) FROM packs))\", (v,))\n"
              "c.commit()\n");
  ASSERT_EQ(std::system(("python3 " + (tmp().path() / "flag.py").string() + " " + db).c_str()), 0);

  auto r = soyaos({"pack", "list"});
  ASSERT_EQ(lines(r.out).size(), 1U);
  EXPECT_NE(r.out.find("  [flagged]\n"), std::string::npos) << r.out;

  r = soyaos({"pack", "inspect", "hello-report@1.0.0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flagged:      yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run 01RUN  [active]  fs /etc/shadow (openat: ENOENT)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  name: hello-report"), std::string::npos) << r.out;

  r = soyaos({"pack", "inspect", "hello-report@1.0.0", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0);
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["name"], "hello-report");
  EXPECT_TRUE(doc["flagged"].get<bool>());
  EXPECT_EQ(doc["flags"][0]["violation"]["data"]["resource"], "/etc/shadow");
  EXPECT_EQ(doc["manifest"]["resources"]["pids"], 16);
  EXPECT_EQ(doc["tree_digest"], tree_digest(src).value());

  // --reason is required (and not blank): a usage error, nothing cleared.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"pack", "unflag", "hello-report@1.0.0"},
        std::vector<std::string>{"pack", "unflag", "hello-report@1.0.0", "--reason", " "}}) {
    r = soyaos(args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--reason TEXT is required"), std::string::npos) << r.err;
  }
  EXPECT_NE(soyaos({"pack", "list"}).out.find("[flagged]"), std::string::npos);

  r = soyaos({"pack", "unflag", "hello-report@1.0.0", "--reason", "fixture reads shadow on purpose"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "unflagged  hello-report@1.0.0  (1 flag cleared)\n");
  EXPECT_EQ(soyaos({"pack", "list"}).out.find("[flagged]"), std::string::npos);
  r = soyaos({"pack", "unflag", "hello-report@1.0.0", "--reason", "again"});
  EXPECT_EQ(r.out, "not flagged  hello-report@1.0.0\n");
  r = soyaos({"pack", "inspect", "hello-report@1.0.0"});
  EXPECT_NE(r.out.find("[cleared "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": fixture reads shadow on purpose]"), std::string::npos) << r.out;
  // The unflag is an event naming who did it (this process's uid) and why.
  r = soyaos({"scope", "query", "--type", "pack_unflagged", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(lines(r.out).size(), 1U) << r.out;
  const json ev = json::parse(lines(r.out)[0]);
  EXPECT_EQ(ev["subject"], "hello-report@1.0.0");
  EXPECT_EQ(ev["data"]["reason"], "fixture reads shadow on purpose");
  EXPECT_EQ(ev["data"]["actor"]["uid"], static_cast<int64_t>(::getuid()));
  EXPECT_EQ(ev["data"]["cleared"], 1);
  r = soyaos({"pack", "inspect", "hello-report@1.0.0", "--format", "json"});
  const json after = json::parse(r.out);
  EXPECT_EQ(after["flags"][0]["cleared_reason"], "fixture reads shadow on purpose");
  EXPECT_EQ(after["flags"][0]["cleared_by"]["uid"], static_cast<int64_t>(::getuid()));
}

TEST_F(MoonCli, ScopeQueryAndTail) {
  ASSERT_EQ(soyaos({"pack", "push", pack("hello-report")}).exit_code, 0);
  ASSERT_EQ(soyaos({"pack", "push", pack("issue-summarizer")}).exit_code, 0);
  auto r = soyaos({"scope", "query"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 2U) << r.out;
  // SEQ  TIME  TYPE  SUBJECT  summary
  EXPECT_EQ(field(ls[0], 0), "1");
  EXPECT_EQ(field(ls[0], 2), "pack_pushed");
  EXPECT_EQ(field(ls[0], 3), "hello-report@1.0.0");
  EXPECT_EQ(field(ls[0], 1).size(), 27U);  // 2026-11-29T12:00:00.123456Z
  EXPECT_NE(r.err.find("cursor: 2"), std::string::npos) << r.err;

  r = soyaos({"scope", "query", "--pack", "issue-summarizer", "--format", "json"});
  ls = lines(r.out);
  ASSERT_EQ(ls.size(), 1U);
  const json e = json::parse(ls[0]);
  EXPECT_EQ(e["type"], "pack_pushed");
  EXPECT_EQ(e["specversion"], "1.0");
  EXPECT_EQ(e["data"]["pack"], "issue-summarizer");

  EXPECT_EQ(lines(soyaos({"scope", "query", "--type", "run_finished"}).out).size(), 0U);
  EXPECT_EQ(lines(soyaos({"scope", "query", "--type", "pack_pushed", "--limit", "1"}).out).size(), 1U);
  EXPECT_EQ(lines(soyaos({"scope", "query", "--since", "1h"}).out).size(), 2U);
  EXPECT_EQ(lines(soyaos({"scope", "query", "--since", "2999-01-01"}).out).size(), 0U);
  EXPECT_EQ(lines(soyaos({"scope", "query", "--run", "NOPE"}).out).size(), 0U);
  r = soyaos({"scope", "query", "--since", "yesterday"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--since"), std::string::npos);
  EXPECT_EQ(soyaos({"scope", "query", "--format", "xml"}).exit_code, 2);

  r = soyaos({"scope", "tail"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(lines(r.out).size(), 2U);
  r = soyaos({"scope", "tail", "-n", "1", "--format", "json"});
  ASSERT_EQ(lines(r.out).size(), 1U);
  EXPECT_EQ(json::parse(r.out)["subject"], "issue-summarizer@1.4.2");
}

TEST_F(MoonCli, ScopeTailFollowPrintsNewEvents) {
  ASSERT_EQ(soyaos({"pack", "push", pack("hello-report")}).exit_code, 0);
  const fs::path out = tmp().path() / "tail.out";
  // tail -f in the background for 3 s; a push lands while it polls.
  const std::string cmd = "SOYAOS_HOME='" + home() + "' timeout 3 '" + soyaos_binary() + "' scope tail -f -n 1 > '" +
                          out.string() + "' 2>&1 &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_EQ(soyaos({"pack", "push", pack("issue-summarizer")}).exit_code, 0);
  std::string text;
  for (int i = 0; i < 50 && lines(text).size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    text = read_file(out);
  }
  const auto ls = lines(text);
  ASSERT_EQ(ls.size(), 2U) << text;
  EXPECT_EQ(field(ls[0], 3), "hello-report@1.0.0");  // SEQ  TIME  TYPE  SUBJECT
  EXPECT_EQ(field(ls[1], 3), "issue-summarizer@1.4.2");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // let timeout end it
}

TEST_F(MoonCli, CorruptDatabaseIsAClearError) {
  fs::create_directories(home());
  tmp().write("home/moon.db", std::string(4096, 'x'));
  for (const std::vector<std::string>& args : {std::vector<std::string>{"pack", "list"},
                                               std::vector<std::string>{"scope", "query"}}) {
    auto r = soyaos(args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(home() + "/moon.db is corrupt"), std::string::npos) << r.err;
  }
}

TEST_F(MoonCli, HomeDefaultsToXdgDataHome) {
  auto r = run_soyaos({"pack", "push", pack()}, {{"SOYAOS_HOME", ""}, {"XDG_DATA_HOME", (tmp().path() / "xdg").string()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp().path() / "xdg/soyaos/moon.db"));
  EXPECT_TRUE(fs::exists(tmp().path() / "xdg/soyaos/oci/index.json"));
}

}  // namespace
}  // namespace soyaos::testing
