// `soyaos run` with the embedded Moon: every event stored (E3, E4), violation flags on
// pushed versions (C8 (4)), running NAME@VERSION from the registry.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "harness.h"

namespace soyaos::testing {
namespace {

class RunMoonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
    home_ = (dir_.path() / "home").string();
  }
  RunOutput soyaos(const std::vector<std::string>& args) {
    return run_soyaos(args, {{"SOYAOS_HOME", home_}}, dir_.path());
  }
  RunOutput run(const std::string& pack, const std::vector<std::string>& action) {
    std::vector<std::string> args = {"run", pack, "--out", (dir_.path() / "out").string(), "--"};
    args.insert(args.end(), action.begin(), action.end());
    return soyaos(args);
  }
  std::vector<nlohmann::json> stored(const std::vector<std::string>& filter) {
    std::vector<std::string> args = {"scope", "query", "--format", "json", "--limit", "0"};
    args.insert(args.end(), filter.begin(), filter.end());
    auto r = soyaos(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<nlohmann::json> out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    }
    return out;
  }
  static std::string run_id_of(const RunOutput& r) {
    auto pos = r.err.find("run ");
    return pos == std::string::npos ? "" : r.err.substr(pos + 4, 26);
  }
  TempDir dir_;
  std::filesystem::path pack_;
  std::string home_;
};

TEST_F(RunMoonTest, EveryEventOfARunIsStored) {
  auto r = run(pack_.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(r.exit_code, 3) << r.err;
  auto events = stored({"--pack", "comet-probe"});
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["type"], "run_started");
  EXPECT_EQ(events[1]["type"], "capability_violation");
  EXPECT_EQ(events[2]["type"], "run_finished");
  EXPECT_EQ(events[1]["data"]["resource"], "/etc/shadow");
}

TEST_F(RunMoonTest, AViolationFlagsThePushedVersionUntilANewerOneIsPushed) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  // A clean run: no flag, no warning.
  auto clean = run(pack_.string(), {"exit", "0"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_EQ(clean.err.find("flagged"), std::string::npos);
  // A violation flags comet-probe@0.1.0 ...
  auto bad = run(pack_.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3);
  // ... so the next run warns and emits pack_flagged, naming the run that caused it.
  auto next = run(pack_.string(), {"exit", "0"});
  EXPECT_EQ(next.exit_code, 0);
  EXPECT_NE(next.err.find("comet-probe@0.1.0 is flagged"), std::string::npos) << next.err;
  auto flagged = stored({"--type", "pack_flagged"});
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0]["data"]["flagged_by_run"], run_id_of(bad));
  EXPECT_EQ(flagged[0]["data"]["violation"]["data"]["resource"], "/etc/shadow");
  auto inspect = soyaos({"pack", "inspect", "comet-probe@0.1.0"});
  EXPECT_NE(inspect.out.find("/etc/shadow"), std::string::npos) << inspect.out;
  // A newer version is pushed: the old one is no longer flagged (C8 (4)).
  TempDir other;
  auto v2 = other.copy_from_source("tests/fixtures/probe", "pack");
  {
    auto text = read_file(v2 / "soyapack.yaml");
    text.replace(text.find("version: 0.1.0"), 14, "version: 0.1.1");
    other.write("pack/soyapack.yaml", text);
  }
  ASSERT_EQ(soyaos({"pack", "push", v2.string()}).exit_code, 0);
  auto after = run(pack_.string(), {"exit", "0"});
  EXPECT_EQ(after.exit_code, 0);
  EXPECT_EQ(after.err.find("flagged"), std::string::npos) << after.err;
}

TEST_F(RunMoonTest, UnflagClearsTheWarning) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  ASSERT_EQ(run(pack_.string(), {"read", "/etc/shadow"}).exit_code, 3);
  EXPECT_NE(run(pack_.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
  ASSERT_EQ(soyaos({"pack", "unflag", "comet-probe@0.1.0"}).exit_code, 0);
  EXPECT_EQ(run(pack_.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
}

TEST_F(RunMoonTest, ADirectoryNeverPushedIsNotFlagged) {
  ASSERT_EQ(run(pack_.string(), {"read", "/etc/shadow"}).exit_code, 3);
  EXPECT_EQ(run(pack_.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
}

TEST_F(RunMoonTest, RunsNameAtVersionFromTheRegistry) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  std::filesystem::remove_all(pack_);  // only the registry has it now
  auto r = run("comet-probe@0.1.0", {"read", "/workdir/probe.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("RESULT ok"), std::string::npos) << r.out;
  // Again, from the cache.
  EXPECT_EQ(run("comet-probe@0.1.0", {"exit", "0"}).exit_code, 0);
  EXPECT_EQ(run("comet-probe@9.9.9", {"exit", "0"}).exit_code, 125);
}

TEST_F(RunMoonTest, AnUnusableMoonRefusesTheRun) {
  // SOYAOS_HOME is a file: the event store cannot be opened, so nothing runs.
  dir_.write("notadir", "x");
  auto r = run_soyaos({"run", pack_.string(), "--out", (dir_.path() / "out").string(), "--", "write",
                       "/workdir/out/ran"},
                      {{"SOYAOS_HOME", (dir_.path() / "notadir").string()}}, dir_.path());
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("moon"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "out" / "ran"));
}

}  // namespace
}  // namespace soyaos::testing
