// `soyaos moon check` end to end (docs/moon.md): moon.yaml, moon.db integrity, registry
// blobs against their digests; and `soyaos run` / `pack test` refusing an invalid
// moon.yaml (SPEC.md C6a) with exit 125 before any Comet is set up.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

class MoonCheck : public ::testing::Test {
 protected:
  RunOutput soyaos(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
    env.emplace("SOYAOS_HOME", home().string());
    env.emplace("SOYAOS_MOON_CONFIG", "");  // never the developer's own
    return run_soyaos(args, env, t_.path());
  }
  [[nodiscard]] fs::path home() const { return t_.path() / "home"; }
  void push_example() {
    const auto src = t_.copy_from_source("examples/hello-report", "src-hello");
    auto r = soyaos({"pack", "push", src.string()});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  void write_config(const std::string& text) {
    fs::create_directories(home());
    std::ofstream(home() / "moon.yaml", std::ios::binary) << text;
  }
  TempDir t_;
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST_F(MoonCheck, FreshHomeIsOk) {
  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
  EXPECT_FALSE(fs::exists(home() / "moon.db"));  // checking creates nothing
}

TEST_F(MoonCheck, CleanRegistryAndValidConfigAreOk) {
  push_example();
  write_config("dns:\n  hosts: {echo.test: 127.0.0.1}\negress:\n  deny: [evil.example.com]\n");
  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "ok\n");
}

TEST_F(MoonCheck, CorruptDatabaseIsAProblemNotACrash) {
  push_example();
  // Overwrite a whole page in the middle of the file: bytes inside a page's unused area
  // are not corruption SQLite can see, a page with a garbage header always is.
  const fs::path db = home() / "moon.db";
  // The Moon keeps its WAL between processes (docs/benchmarks.md, issue #16): move every
  // page into moon.db first, so that the garbage lands on live pages.
  ASSERT_EQ(std::system(("python3 -c \"import sqlite3; c=sqlite3.connect('" + db.string() +
                         "'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()\"").c_str()),
            0);
  ASSERT_FALSE(fs::exists(home() / "moon.db-wal") && fs::file_size(home() / "moon.db-wal") > 0);
  const auto size = fs::file_size(db);
  ASSERT_GE(size, 4U * 4096);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>((size / 4096 / 2) * 4096));
    const std::string garbage(4096, '\xa5');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find(db.string() + ": integrity_check"), std::string::npos) << r.out;
  const auto ls = lines(r.out);
  ASSERT_FALSE(ls.empty());
  EXPECT_EQ(ls.back(), std::to_string(ls.size() - 1) + (ls.size() == 2 ? " problem" : " problems")) << r.out;

  // The header too: the database cannot even be opened.
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    const std::string garbage(100, '\xa5');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("is corrupt or not a SQLite database"), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out).back(), "1 problem") << r.out;
}

TEST_F(MoonCheck, TamperedBlobIsReported) {
  push_example();
  auto list = soyaos({"pack", "list", "--format", "json"});
  ASSERT_EQ(list.exit_code, 0);
  const auto at = list.out.find("sha256:");
  ASSERT_NE(at, std::string::npos) << list.out;
  const std::string digest = list.out.substr(at, 7 + 64);
  const fs::path blob = home() / "oci" / "blobs" / "sha256" / digest.substr(7);
  ASSERT_TRUE(fs::exists(blob)) << blob;
  fs::permissions(blob, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(blob, std::ios::binary | std::ios::app) << "tampered";

  // And a stray blob no pack references, whose content is not what its name says.
  std::ofstream(home() / "oci" / "blobs" / "sha256" / std::string(64, 'a'), std::ios::binary) << "stray";

  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("registry: hello-report@1.0.0 archive: blob " + digest + " hashes to sha256:"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("registry: oci/blobs/sha256/" + std::string(64, 'a') + ": content hashes to sha256:"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(lines(r.out).back(), "2 problems") << r.out;
}

TEST_F(MoonCheck, BadConfigIsReportedWithLineAndColumn) {
  write_config("egress:\n  deny: [evil.example.com, \"bad host\"]\nproxy:\n  alow: []\n");
  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string file = (home() / "moon.yaml").string();
  EXPECT_EQ(r.out, file + ":2:28: error: egress.deny[1]: \"bad host\" must be a DNS name, a leading *. wildcard "
                          "(*.example.com) or an IP literal\n" +
                       file + ":4:3: error: proxy.alow: unknown key (allowed: allow)\n2 problems\n");
}

// E7: a finding quotes the configuration's own key raw and is escaped once where it is
// printed: no ESC, BEL or CR byte on stdout, the backslash as \\ (not doubled), one line.
TEST_F(MoonCheck, AHostileKeyIsOneFindingEscapedOnce) {
  write_config("\"k\\e]0;t\\a\\r\\n a\\\\b\": 1\n");
  auto r = soyaos({"moon", "check"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string file = (home() / "moon.yaml").string();
  for (const char c : {'\x1b', '\r', '\a'}) EXPECT_EQ(r.out.find(c), std::string::npos) << r.out;
  const auto l = lines(r.out);
  ASSERT_EQ(l.size(), 2u) << r.out;
  EXPECT_EQ(l[0].rfind(file + ":1:1: error: k\\x1B]0;t\\x07\\r\\n a\\\\b: unknown key (allowed: ", 0), 0u) << r.out;
  EXPECT_EQ(l[1], "1 problem");
}

TEST_F(MoonCheck, MissingConfigNamedByTheEnvironmentIsAProblem) {
  const std::string missing = (t_.path() / "nope.yaml").string();
  auto r = soyaos({"moon", "check"}, {{"SOYAOS_MOON_CONFIG", missing}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, missing + ": error: cannot open (named by SOYAOS_MOON_CONFIG): No such file or directory\n1 problem\n");
}

TEST_F(MoonCheck, RunRefusesAnInvalidConfig) {
  const auto pack = t_.copy_from_source("tests/fixtures/probe", "pack");
  write_config("dns:\n  upstream: 192.0.2.53:0\n");
  auto r = soyaos({"run", pack.string(), "--out", (t_.path() / "out").string(), "--", "read", "/workdir/probe.py"});
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  const std::string file = (home() / "moon.yaml").string();
  EXPECT_EQ(r.err, file + ":2:13: error: dns.upstream: \"192.0.2.53:0\": the port must be an integer 1..65535\n" +
                       "soyaos: moon configuration invalid: " + file + "\n");
  EXPECT_EQ(r.out, "");

  // pack test runs packs too: the same refusal.
  r = soyaos({"pack", "test", pack.string()});
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  EXPECT_NE(r.err.find("soyaos: moon configuration invalid: " + file), std::string::npos) << r.err;
}

}  // namespace
}  // namespace soyaos::testing
