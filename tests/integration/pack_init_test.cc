// `soyaos pack init` (issue #13, SPEC C13): for each runtime, the pack it writes passes
// `pack lint --strict` with no finding, `pack test` in a real Comet, and `pack push`, as
// written. A non-empty DIR and a bad name are refused (exit 2) and nothing is written.
// The suite is named Runtimes* so that ctest also runs it as nobody (the rootless. copies).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

class RuntimesPackInit : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    home_ = (dir_.path() / "home").string();
  }
  RunOutput soyaos(const std::vector<std::string>& args) {
    return run_soyaos(args, {{"SOYAOS_HOME", home_}}, dir_.path());
  }
  TempDir dir_;
  std::string home_;
};

TEST_P(RuntimesPackInit, InitLintsCleanStrictTestsAndPushes) {
  const std::string runtime = GetParam();
  const fs::path pack = dir_.path() / ("my-" + runtime + "-agent");  // missing: created
  auto init = soyaos({"pack", "init", "--runtime", runtime, pack.string()});
  ASSERT_EQ(init.exit_code, 0) << init.out << init.err;
  EXPECT_NE(init.out.find("created my-" + runtime + "-agent (runtime " + runtime + ")"), std::string::npos)
      << init.out;
  for (const char* f : {"soyapack.yaml", "examples/hello.txt", ".soyaignore"}) {
    EXPECT_TRUE(fs::is_regular_file(pack / f)) << f;
  }
  const std::string entry = runtime == "node" ? "main.js" : runtime == "native" ? "main.sh" : "main.py";
  ASSERT_TRUE(fs::is_regular_file(pack / entry));
  struct stat st {};
  ASSERT_EQ(::stat((pack / entry).c_str(), &st), 0);
  EXPECT_EQ((st.st_mode & S_IXUSR) != 0, runtime == "native");
  const std::string manifest = read_file(pack / "soyapack.yaml");
  EXPECT_NE(manifest.find("write: [/workdir/out, /tmp]"), std::string::npos) << manifest;

  auto validate = soyaos({"pack", "validate", pack.string()});
  EXPECT_EQ(validate.exit_code, 0) << validate.err;
  EXPECT_EQ(validate.out, "ok  my-" + runtime + "-agent@0.1.0\n");

  auto lint = soyaos({"pack", "lint", "--strict", pack.string()});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  EXPECT_EQ(lint.out, "0 errors · 0 warnings\n") << lint.out;

  auto test = soyaos({"pack", "test", pack.string()});
  EXPECT_EQ(test.exit_code, 0) << test.out << test.err;
  EXPECT_NE(test.out.find("PASS  basic"), std::string::npos) << test.out << test.err;

  // The same agent, run by hand on the example's input: the expected summary and output file.
  auto run = soyaos({"run", pack.string(), "--input", (pack / "examples/hello.txt").string(), "--out",
                     (dir_.path() / "out").string(), "--no-cache"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "summary: 1 file(s), 2 line(s), 9 word(s)\n") << run.err;
  EXPECT_EQ(read_file(dir_.path() / "out" / "summary.txt"), "1 file(s), 2 line(s), 9 word(s)\n");

  auto push = soyaos({"pack", "push", pack.string()});
  EXPECT_EQ(push.exit_code, 0) << push.out << push.err;
  auto list = soyaos({"pack", "list"});
  EXPECT_NE(list.out.find("my-" + runtime + "-agent"), std::string::npos) << list.out;
}

INSTANTIATE_TEST_SUITE_P(Runtimes, RuntimesPackInit, ::testing::Values("python3", "node", "native"),
                         [](const auto& info) { return std::string(info.param); });

TEST_P(RuntimesPackInit, AnEmptyDirectoryIsFineAndTheNameIsChecked) {
  const std::string runtime = GetParam();
  fs::create_directories(dir_.path() / "empty");
  ::chmod((dir_.path() / "empty").c_str(), 0777);
  auto init = soyaos({"pack", "init", "--runtime", runtime, "--name", "report-bot", (dir_.path() / "empty").string()});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  EXPECT_NE(read_file(dir_.path() / "empty" / "soyapack.yaml").find("\nname: report-bot\n"), std::string::npos);
}

TEST(RuntimesPackInitRefusals, ANonEmptyDirectoryIsRefusedAndLeftAlone) {
  if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
  TempDir dir;
  dir.write("existing/notes.txt", "mine\n");
  auto r = run_soyaos({"pack", "init", (dir.path() / "existing").string()}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("existing: not empty: pack init writes a new pack and never overwrites"), std::string::npos)
      << r.err;
  EXPECT_EQ(read_file(dir.path() / "existing" / "notes.txt"), "mine\n");
  EXPECT_FALSE(fs::exists(dir.path() / "existing" / "soyapack.yaml"));
  // A file, not a directory.
  dir.write("afile", "x");
  r = run_soyaos({"pack", "init", (dir.path() / "afile").string()}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("exists and is not a directory"), std::string::npos) << r.err;
}

TEST(RuntimesPackInitRefusals, ABadNameIsRefusedBeforeAnythingIsWritten) {
  if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
  TempDir dir;
  for (const char* bad : {"Bad", "9lives", "has_underscore", "-x", "a\x1b[2Jb"}) {
    auto r = run_soyaos({"pack", "init", std::string("--name=") + bad, (dir.path() / "p").string()}, {}, dir.path());
    EXPECT_EQ(r.exit_code, 2) << bad << r.err;
    EXPECT_NE(r.err.find("a pack name is 1 to 63 characters"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "escaped for the terminal";
    EXPECT_FALSE(fs::exists(dir.path() / "p"));
  }
  // Without --name, the directory's name must make one.
  auto r = run_soyaos({"pack", "init", (dir.path() / "123").string()}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("give one with --name"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path() / "123"));
  // From the directory's name: "My Agent" -> my-agent.
  r = run_soyaos({"pack", "init", (dir.path() / "My Agent").string()}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_file(dir.path() / "My Agent" / "soyapack.yaml").find("\nname: my-agent\n"), std::string::npos);
  // An unknown runtime is a usage error too.
  r = run_soyaos({"pack", "init", "--runtime", "ruby", (dir.path() / "q").string()}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(dir.path() / "q"));
}

}  // namespace
}  // namespace soyaos::testing
