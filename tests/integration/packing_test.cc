// Packing (SPEC.md T6, T3): relative links inside the pack are kept, every other link is
// refused; `.soyaignore` and the default exclusions (.git, .env*) apply to the pushed
// archive, the digest and the /workdir of a directory run alike. The suite is named
// RunMoon* so that ctest also runs it as nobody (rootless.) and against a Moon daemon
// (daemon.).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/digest.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct PackRun {
  RunOutput output;
  std::vector<std::string> results;  // every "RESULT ..." line, without the prefix
  std::vector<json> events;
  std::vector<json> of_type(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == type) out.push_back(e);
    }
    return out;
  }
};

class RunMoonPacking : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
    home_ = (dir_.path() / "home").string();
  }
  RunOutput soyaos(const std::vector<std::string>& args) { return run_soyaos(args, {{"SOYAOS_HOME", home_}}, dir_.path()); }

  // Runs PACK (a directory or NAME@VERSION) with `probe.py steps STEPS...`.
  PackRun run(const std::string& pack, const std::vector<std::string>& steps, std::vector<std::string> extra = {}) {
    const std::string tag = std::to_string(runs_++);
    const fs::path events = dir_.path() / ("events" + tag + ".jsonl");
    std::vector<std::string> args = {"run", pack, "--no-cache", "--out", (dir_.path() / ("out" + tag)).string(),
                                     "--events", events.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.emplace_back("--");
    args.emplace_back("steps");
    args.insert(args.end(), steps.begin(), steps.end());
    PackRun r;
    r.output = soyaos(args);
    std::istringstream out(r.output.out);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("RESULT ", 0) == 0) r.results.push_back(line.substr(7));
    }
    std::istringstream ev(read_file(events));
    for (std::string line; std::getline(ev, line);) {
      if (!line.empty()) r.events.push_back(json::parse(line));
    }
    return r;
  }

  // The links a real npm install and a real venv make (all relative, inside the tree).
  void add_npm_and_venv_links() const {
    dir_.write("pack/node_modules/tool/cli.js", "console.log('tool')\n");
    fs::create_directories(pack_ / "node_modules" / ".bin");
    fs::create_symlink("../tool/cli.js", pack_ / "node_modules" / ".bin" / "tool");
    dir_.write("pack/venv/bin/python3.11", "#!/bin/sh\n");
    fs::create_symlink("python3.11", pack_ / "venv" / "bin" / "python3");
    fs::create_symlink("python3", pack_ / "venv" / "bin" / "python");
    dir_.write("pack/venv/lib/python3.11/site-packages/mod.py", "X = 1\n");
    fs::create_directory_symlink("lib", pack_ / "venv" / "lib64");
  }

  // Files that must never leave the operator's machine, and a `.soyaignore`.
  void add_ignored_files() const {
    dir_.write("pack/.env", "API_KEY=sk-do-not-ship\n");
    dir_.write("pack/.env.local", "x\n");
    dir_.write("pack/.env.example", "API_KEY=\n");
    dir_.write("pack/.git/config", "[core]\n");
    dir_.write("pack/sub/.env", "y\n");
    dir_.write("pack/sub/ok.txt", "ok\n");
    dir_.write("pack/debug.log", "noise\n");
    dir_.write("pack/keep.log", "kept\n");
    dir_.write("pack/cache/blob.bin", "zzz\n");
    dir_.write("pack/inputs/secret.txt", "private\n");
    dir_.write("pack/.soyaignore", "# local state\n*.log\n!keep.log\n/cache/\n/inputs/\n!.env.example\n");
  }

  std::string tree_digest_line(const std::string& ref) {
    auto r = soyaos({"pack", "inspect", ref});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto pos = r.out.find("tree digest:  ");
    if (pos == std::string::npos) return "";
    return r.out.substr(pos + 14, r.out.find('\n', pos) - pos - 14);
  }

  TempDir dir_;
  fs::path pack_;
  std::string home_;
  int runs_ = 0;
};

const std::vector<std::string> kThroughLinks = {
    "read:/workdir/node_modules/.bin/tool",     "readlink:/workdir/node_modules/.bin/tool",
    "realpath:/workdir/node_modules/.bin/tool", "realpath:/workdir/venv/bin/python",
    "listdir:/workdir/venv/lib64",              "realpath:/workdir/venv/lib64/python3.11/site-packages/mod.py"};
const std::vector<std::string> kThroughLinksExpect = {
    "ok 20",
    "ok ../tool/cli.js",
    "ok /workdir/node_modules/tool/cli.js",
    "ok /workdir/venv/bin/python3.11",
    "ok python3.11",
    "ok /workdir/venv/lib/python3.11/site-packages/mod.py"};

TEST_F(RunMoonPacking, NpmAndVenvLinksArePushedPulledAndResolveInsideWorkdir) {
  add_npm_and_venv_links();
  const std::string digest = tree_digest(pack_).value();

  // A directory run: the links work and resolve below /workdir.
  auto dir_run = run(pack_.string(), kThroughLinks);
  ASSERT_EQ(dir_run.output.exit_code, 0) << dir_run.output.err;
  EXPECT_EQ(dir_run.results, kThroughLinksExpect);
  EXPECT_TRUE(dir_run.of_type("capability_violation").empty());
  ASSERT_FALSE(dir_run.of_type("run_started").empty());
  EXPECT_EQ(dir_run.of_type("run_started")[0]["data"]["digest"], digest);

  // Pushed, the same pack: the same tree digest, links kept as links.
  auto push = soyaos({"pack", "push", pack_.string()});
  ASSERT_EQ(push.exit_code, 0) << push.err;
  EXPECT_EQ(tree_digest_line("comet-probe@0.1.0"), digest);
  const fs::path pulled = dir_.path() / "pulled";
  auto pull = soyaos({"pack", "pull", "comet-probe@0.1.0", "-o", pulled.string()});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_EQ(fs::read_symlink(pulled / "node_modules" / ".bin" / "tool"), "../tool/cli.js");
  EXPECT_EQ(fs::read_symlink(pulled / "venv" / "bin" / "python3"), "python3.11");
  EXPECT_EQ(fs::read_symlink(pulled / "venv" / "bin" / "python"), "python3");
  EXPECT_EQ(fs::read_symlink(pulled / "venv" / "lib64"), "lib");
  EXPECT_EQ(read_file(pulled / "node_modules" / ".bin" / "tool"), "console.log('tool')\n");
  EXPECT_EQ(tree_digest(pulled).value(), digest);

  // Run from the registry: same digest, same view.
  auto reg_run = run("comet-probe@0.1.0", kThroughLinks);
  ASSERT_EQ(reg_run.output.exit_code, 0) << reg_run.output.err;
  EXPECT_EQ(reg_run.results, kThroughLinksExpect);
  ASSERT_FALSE(reg_run.of_type("run_started").empty());
  EXPECT_EQ(reg_run.of_type("run_started")[0]["data"]["digest"], digest);
}

TEST_F(RunMoonPacking, LinksLeavingThePackAreRefusedByPushAndByADirectoryRun) {
  struct Case {
    const char* link;
    const char* target;
  };
  // A real venv's python3 -> /usr/bin/python3; an escape with ..; a chain through a link to
  // the pack root and up; a loop; a link to an excluded file.
  const Case cases[] = {{"venv/bin/python3", "/usr/bin/python3"},
                        {"data", "../outside"},
                        {"up", "root/../pack/probe.py"},
                        {"loop", "loop"},
                        {"env-link", ".env"}};
  dir_.write("outside", "host file\n");
  dir_.write("pack/.env", "API_KEY=x\n");
  fs::create_symlink(".", pack_ / "root");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.link);
    fs::create_directories((pack_ / c.link).parent_path());
    fs::create_symlink(c.target, pack_ / c.link);
    const std::string named = std::string(c.link) + " -> " + c.target;
    auto push = soyaos({"pack", "push", pack_.string()});
    EXPECT_EQ(push.exit_code, 1);
    EXPECT_NE(push.err.find(named), std::string::npos) << push.err;
    EXPECT_NE(push.err.find("does not stay inside the pack"), std::string::npos) << push.err;
    EXPECT_EQ(soyaos({"pack", "list"}).out, "");
    auto r = run(pack_.string(), {"read:/workdir/probe.py"});
    EXPECT_EQ(r.output.exit_code, 125) << r.output.err;
    EXPECT_NE(r.output.err.find(named), std::string::npos) << r.output.err;
    EXPECT_TRUE(r.results.empty()) << "the agent must not have run";
    fs::remove(pack_ / c.link);
  }
}

TEST_F(RunMoonPacking, IgnoredFilesAreNeitherPushedNorVisibleInADirectoryRun) {
  add_ignored_files();
  const std::string digest = tree_digest(pack_).value();
  const std::vector<std::string> steps = {
      "read:/workdir/.env",        "read:/workdir/.env.local",   "read:/workdir/.git/config",
      "read:/workdir/sub/.env",    "read:/workdir/debug.log",    "read:/workdir/cache/blob.bin",
      "listdir:/workdir",          "listdir:/workdir/sub",       "listdir:/workdir/inputs",
      "read:/workdir/keep.log",    "read:/workdir/.env.example", "read:/workdir/inputs/secret.txt"};
  const std::vector<std::string> expect = {
      "errno=ENOENT", "errno=ENOENT", "errno=ENOENT", "errno=ENOENT", "errno=ENOENT", "errno=ENOENT",
      "ok .env.example,.soyaignore,inputs,keep.log,out,probe.py,soyapack.yaml,sub",
      "ok ok.txt",    "ok ",          "ok 5",         "ok 9",         "errno=ENOENT"};
  auto dir_run = run(pack_.string(), steps);
  EXPECT_EQ(dir_run.output.exit_code, 0) << dir_run.output.err;
  EXPECT_EQ(dir_run.results, expect);
  // Not part of the pack, as in the pushed version: a missing file, not a violation.
  EXPECT_TRUE(dir_run.of_type("capability_violation").empty());
  ASSERT_FALSE(dir_run.of_type("run_started").empty());
  EXPECT_EQ(dir_run.of_type("run_started")[0]["data"]["digest"], digest);

  auto push = soyaos({"pack", "push", pack_.string()});
  ASSERT_EQ(push.exit_code, 0) << push.err;
  EXPECT_EQ(tree_digest_line("comet-probe@0.1.0"), digest);
  const fs::path pulled = dir_.path() / "pulled";
  ASSERT_EQ(soyaos({"pack", "pull", "comet-probe@0.1.0", "-o", pulled.string()}).exit_code, 0);
  for (const char* gone : {".env", ".env.local", ".git", "sub/.env", "debug.log", "cache", "inputs"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(pulled / gone))) << gone;
  }
  for (const char* kept : {".env.example", "keep.log", "sub/ok.txt", ".soyaignore", "probe.py"}) {
    EXPECT_TRUE(fs::exists(pulled / kept)) << kept;
  }
  EXPECT_EQ(tree_digest(pulled).value(), digest);
  auto reg_run = run("comet-probe@0.1.0", steps);
  EXPECT_EQ(reg_run.output.exit_code, 0) << reg_run.output.err;
  EXPECT_EQ(reg_run.results, expect);
  ASSERT_FALSE(reg_run.of_type("run_started").empty());
  EXPECT_EQ(reg_run.of_type("run_started")[0]["data"]["digest"], digest);
}

TEST_F(RunMoonPacking, AnExcludedEntrypointOrABadSoyaignoreIsRefused) {
  dir_.write("pack/.soyaignore", "*.py\n");
  auto v = soyaos({"pack", "validate", pack_.string()});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_NE((v.out + v.err).find("probe.py is excluded from the pack by .soyaignore"), std::string::npos)
      << v.out << v.err;
  EXPECT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 1);
  dir_.write("pack/.soyaignore", "ok\n[unterminated\n");
  auto push = soyaos({"pack", "push", pack_.string()});
  EXPECT_EQ(push.exit_code, 1);
  EXPECT_NE(push.err.find(".soyaignore:2: unterminated character class"), std::string::npos) << push.err;
  auto r = run(pack_.string(), {"read:/workdir/probe.py"});
  EXPECT_EQ(r.output.exit_code, 125) << r.output.err;
  EXPECT_NE(r.output.err.find(".soyaignore:2:"), std::string::npos) << r.output.err;
}

}  // namespace
}  // namespace soyaos::testing
