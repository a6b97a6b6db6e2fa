// --input (SPEC.md T6, C2): repeated NAME=PATH inputs at /workdir/inputs/NAME, an unnamed
// file under its own name, an unnamed directory as /workdir/inputs itself; every form read
// from inside a real Comet, and the usage errors refused before anything runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

class InputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack").string();
    home_ = (dir_.path() / "home").string();
    dir_.write("data.json", "{\"a\": 1}\n");
    dir_.write("notes.txt", "notes\n");
    dir_.write("tree/one.txt", "one\n");
    dir_.write("tree/sub/two.txt", "two\n");
  }
  RunOutput run(const std::vector<std::string>& inputs, const std::vector<std::string>& agent) {
    std::vector<std::string> args = {"run", pack_, "--no-cache", "--out", (dir_.path() / ("o" + std::to_string(n_++))).string()};
    for (const auto& i : inputs) {
      args.emplace_back("--input");
      args.push_back(i);
    }
    args.emplace_back("--");
    args.insert(args.end(), agent.begin(), agent.end());
    return run_soyaos(args, {{"SOYAOS_HOME", home_}}, dir_.path());
  }
  std::string p(const std::string& rel) const { return (dir_.path() / rel).string(); }
  TempDir dir_;
  std::string pack_, home_;
  int n_ = 0;
};

TEST_F(InputsTest, AnUnnamedFileKeepsItsName) {
  auto r = run({p("data.json")}, {"steps", "listdir:/workdir/inputs", "read:/workdir/inputs/data.json",
                                  "write:/workdir/inputs/data.json"});
  EXPECT_EQ(r.exit_code, 3) << r.err;  // the write is refused (read-only) and reported
  EXPECT_EQ(r.out, "RESULT ok data.json\nRESULT ok 9\nRESULT errno=EACCES\n");
}

TEST_F(InputsTest, AnUnnamedDirectoryIsTheInputsDirectory) {
  auto r = run({p("tree")}, {"steps", "listdir:/workdir/inputs", "read:/workdir/inputs/sub/two.txt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "RESULT ok one.txt,sub\nRESULT ok 4\n");
}

TEST_F(InputsTest, NamedInputsAreMountedUnderTheirNames) {
  auto r = run({"config=" + p("data.json"), "docs=" + p("tree"), p("notes.txt")},
               {"steps", "listdir:/workdir/inputs", "read:/workdir/inputs/config", "listdir:/workdir/inputs/docs",
                "read:/workdir/inputs/docs/one.txt", "read:/workdir/inputs/notes.txt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "RESULT ok config,docs,notes.txt\nRESULT ok 9\nRESULT ok one.txt,sub\nRESULT ok 4\nRESULT ok 6\n");
}

TEST_F(InputsTest, BadInputsAreUsageErrorsBeforeAnythingRuns) {
  auto twice = run({"x=" + p("data.json"), "x=" + p("notes.txt")}, {"exit", "0"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("/workdir/inputs/x is given twice"), std::string::npos) << twice.err;
  auto same_name = run({p("data.json"), "data.json=" + p("notes.txt")}, {"exit", "0"});
  EXPECT_EQ(same_name.exit_code, 2) << same_name.err;
  auto dir_and_more = run({p("tree"), p("data.json")}, {"exit", "0"});
  EXPECT_EQ(dir_and_more.exit_code, 2);
  EXPECT_NE(dir_and_more.err.find("must be the only input"), std::string::npos) << dir_and_more.err;
  auto missing = run({"in=" + p("nope")}, {"exit", "0"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--input in=" + p("nope")), std::string::npos) << missing.err;
  EXPECT_EQ(missing.out, "");
}

}  // namespace
}  // namespace soyaos::testing
