// The command line itself (T5, T7): subcommands, `--`, --out, --events -.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

TEST(Cli, VersionPrints) {
  auto r = run_soyaos({"version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("soyaos "), std::string::npos);
}

TEST(Cli, UnknownCommandIsUsageError) {
  auto r = run_soyaos({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'frobnicate' is not a command; commands: "), std::string::npos) << r.err;
}

TEST(Cli, AMistypedCommandSuggestsTheNearest) {
  auto r = run_soyaos({"rnu", "examples/hello"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("soyaos: 'rnu' is not a command; did you mean 'soyaos run'?"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("A subcommand is required"), std::string::npos) << r.err;
  auto nested = run_soyaos({"pack", "tset", "."});
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_NE(nested.err.find("'tset' is not a command; did you mean 'soyaos pack test'?"), std::string::npos)
      << nested.err;
  auto scope = run_soyaos({"scope", "qeury"});
  EXPECT_NE(scope.err.find("did you mean 'soyaos scope query'?"), std::string::npos) << scope.err;
  // No command at all is still CLI11's own message.
  EXPECT_EQ(run_soyaos({}).exit_code, 2);
}

class CliRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
    home_ = (dir_.path() / "home").string();
  }
  RunOutput soyaos(const std::vector<std::string>& args, const fs::path& cwd = {}) {
    return run_soyaos(args, {{"SOYAOS_HOME", home_}}, cwd.empty() ? dir_.path() : cwd);
  }
  // How many runs the Moon has recorded.
  size_t runs() {
    auto q = soyaos({"scope", "query", "--type", "run_started", "--format", "json"});
    EXPECT_EQ(q.exit_code, 0) << q.err;
    size_t n = 0;
    for (char c : q.out) n += c == '\n' ? 1 : 0;
    return n;
  }
  TempDir dir_;
  fs::path pack_;
  std::string home_;
};

TEST_F(CliRunTest, EverythingAfterDashDashGoesToTheAgentWhateverPrecedesIt) {
  const std::string ev = (dir_.path() / "ev.jsonl").string();
  const std::string ev2 = (dir_.path() / "ev2.jsonl").string();
  auto r = soyaos({"run", pack_.string(), "--events", ev, "--", "argv", "--flag", "--events", "x", "--", "-v"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ARGV --flag|--events|x|--|-v\n");
  auto r2 = soyaos({"run", pack_.string(), "--events", ev, "--events", ev2, "--no-cache", "--out",
                    (dir_.path() / "o2").string(), "--", "argv", "--no-cache"});
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(r2.out, "ARGV --no-cache\n");
  EXPECT_NE(read_file(ev2).find("run_finished"), std::string::npos);
  // --mount takes one value too (the target is refused: not declared; 125, not a usage error).
  auto r3 = soyaos({"run", pack_.string(), "--mount", "/tmp:/data", "--", "--flag"});
  EXPECT_EQ(r3.exit_code, 125) << r3.err;
  EXPECT_NE(r3.err.find("--mount /tmp:/data"), std::string::npos) << r3.err;
}

// E7: the refusal quotes the --out path; a name holding ESC, BEL, CR and a backslash is
// printed escaped once (no raw control byte, the backslash as \\ not \\\\). Named to run
// rootless too (the ctest filter takes CliRunTest.ANonEmptyOutIsRefused*).
TEST_F(CliRunTest, ANonEmptyOutIsRefusedWithItsNameEscapedOnce) {
  dir_.write("o\x1b]0;t\a\r a\\b/old.txt", "old");
  const fs::path out = dir_.path() / "o\x1b]0;t\a\r a\\b";
  auto r = soyaos({"run", pack_.string(), "--out", out.string(), "--", "write", "/workdir/out/new.txt"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const char c : {'\x1b', '\r', '\a'}) EXPECT_EQ(r.err.find(c), std::string::npos) << r.err;
  const std::string shown = "soyaos: --out " + (dir_.path() / "o\\x1B]0;t\\x07\\r a\\\\b").string() + ": not empty";
  const auto at = r.err.find(shown);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(shown, at + 1), std::string::npos) << r.err;
  EXPECT_EQ(read_file(out / "old.txt"), "old");
}

TEST_F(CliRunTest, ANonEmptyOutIsRefusedBeforeAnythingRuns) {
  fs::path out = dir_.path() / "stale";
  dir_.write("stale/old.txt", "old");
  const size_t before = runs();
  auto r = soyaos({"run", pack_.string(), "--out", out.string(), "--", "write", "/workdir/out/new.txt"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--out " + out.string() + ": not empty"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(out / "old.txt"), "old");
  EXPECT_FALSE(fs::exists(out / "new.txt"));
  EXPECT_EQ(runs(), before) << "nothing ran";
  // A file is refused too; an empty directory and a new one are fine.
  dir_.write("a-file", "x");
  EXPECT_EQ(soyaos({"run", pack_.string(), "--out", (dir_.path() / "a-file").string()}).exit_code, 2);
  fs::create_directory(dir_.path() / "empty");
  // This process may be root while soyaos runs as nobody (the rootless copy): an --out made
  // here must be writable by whoever runs soyaos, like the TempDir it sits in.
  fs::permissions(dir_.path() / "empty", fs::perms::all);
  auto ok = soyaos({"run", pack_.string(), "--out", (dir_.path() / "empty").string(), "--", "write",
                    "/workdir/out/new.txt"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(read_file(dir_.path() / "empty" / "new.txt"), "x");
  auto fresh = soyaos({"run", pack_.string(), "--out", (dir_.path() / "new" / "deeper").string(), "--", "write",
                       "/workdir/out/new.txt"});
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(read_file(dir_.path() / "new" / "deeper" / "new.txt"), "x");
}

TEST_F(CliRunTest, AnUnusableDefaultOutIsRefusedBeforeTheAgentRuns) {
  // ./soyaos-out is a file: ./soyaos-out/RUN_ID cannot be created.
  TempDir cwd;
  cwd.write("soyaos-out", "not a directory");
  const size_t before = runs();
  auto r = soyaos({"run", pack_.string(), "--", "write", "/workdir/out/new.txt"}, cwd.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the default --out, soyaos-out/RUN_ID: cannot be created"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "the agent did not run";
  EXPECT_EQ(runs(), before);
  EXPECT_EQ(read_file(cwd.path() / "soyaos-out"), "not a directory");
}

TEST_F(CliRunTest, EventsOnStdoutKeepTheAgentsStdoutSeparate) {
  auto r = soyaos({"run", pack_.string(), "--events", "-", "--no-cache", "--", "argv", "hello"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // stdout: only events, one JSON object a line; the agent's stdout is on stderr.
  std::istringstream lines(r.out);
  size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << line;
    EXPECT_EQ(e["specversion"], "1.0");
  }
  EXPECT_GE(n, 2u);
  EXPECT_EQ(r.out.find("ARGV"), std::string::npos);
  EXPECT_NE(r.err.find("ARGV hello\n"), std::string::npos) << r.err;
  // A cache replay follows the same rule.
  auto first = soyaos({"run", pack_.string(), "--", "argv", "cached"});
  ASSERT_EQ(first.out, "ARGV cached\n");
  auto replay = soyaos({"run", pack_.string(), "--events", "-", "--", "argv", "cached"});
  EXPECT_EQ(replay.exit_code, 0);
  EXPECT_NE(replay.out.find("\"type\":\"cache_hit\""), std::string::npos) << replay.out;
  EXPECT_EQ(replay.out.find("ARGV"), std::string::npos);
  EXPECT_NE(replay.err.find("ARGV cached\n"), std::string::npos) << replay.err;
}

}  // namespace
}  // namespace soyaos::testing
