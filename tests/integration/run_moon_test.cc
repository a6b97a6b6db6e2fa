// `soyaos run` with the embedded Moon: every event stored (E3, E4), violation flags on
// pushed versions (C8 (4)), running NAME@VERSION from the registry.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/digest.h"
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
    auto pos = r.err.find("soyaos: run ");
    return pos == std::string::npos ? "" : r.err.substr(pos + 12, 26);
  }
  TempDir dir_;
  std::filesystem::path pack_;
  std::string home_;
};

TEST_F(RunMoonTest, EveryEventOfARunIsStored) {
  auto r = run(pack_.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(r.exit_code, 3) << r.err;
  auto events = stored({"--pack", "comet-probe"});
  ASSERT_EQ(events.size(), 4u);
  // run_started is stored before the agent starts; the flag is raised (and its event
  // stored) before the batch holding the violation: flag first, at once (E4, C8 (4)).
  EXPECT_EQ(events[0]["type"], "run_started");
  EXPECT_EQ(events[1]["type"], "pack_flagged");
  EXPECT_EQ(events[2]["type"], "capability_violation");
  EXPECT_EQ(events[3]["type"], "run_finished");
  EXPECT_EQ(events[2]["data"]["resource"], "/etc/shadow");
}

TEST_F(RunMoonTest, AViolationFlagsThePushedVersionAndANewerPushDoesNotClearIt) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  // A clean run: no flag, no warning.
  auto clean = run(pack_.string(), {"exit", "0"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_EQ(clean.err.find("flagged"), std::string::npos);
  // A violation flags comet-probe@0.1.0, as a pack_flagged event naming the run.
  auto bad = run(pack_.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3);
  auto raised = stored({"--type", "pack_flagged"});
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0]["data"]["run_id"], run_id_of(bad));
  EXPECT_EQ(raised[0]["data"]["raised"], true);
  EXPECT_EQ(raised[0]["data"]["violation"]["data"]["resource"], "/etc/shadow");
  // ... so the next run warns and emits pack_flagged, naming the run that caused it.
  auto next = run(pack_.string(), {"exit", "0"});
  EXPECT_EQ(next.exit_code, 0);
  EXPECT_NE(next.err.find("comet-probe@0.1.0 is flagged"), std::string::npos) << next.err;
  EXPECT_NE(next.err.find("no unflagged version of comet-probe is pushed"), std::string::npos) << next.err;
  auto flagged = stored({"--type", "pack_flagged"});
  ASSERT_EQ(flagged.size(), 2u);  // raised, then this run's warning
  EXPECT_EQ(flagged[1]["data"]["raised"], false);
  EXPECT_NE(flagged[1]["data"]["run_id"], run_id_of(bad));
  EXPECT_EQ(flagged[1]["data"]["flagged_by_run"], run_id_of(bad));
  EXPECT_EQ(flagged[1]["data"]["violation"]["data"]["resource"], "/etc/shadow");
  auto inspect = soyaos({"pack", "inspect", "comet-probe@0.1.0"});
  EXPECT_NE(inspect.out.find("/etc/shadow"), std::string::npos) << inspect.out;
  // A newer version is pushed: the old one stays flagged (C8 (4)), and its warning names
  // the newer, unflagged version.
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
  EXPECT_NE(after.err.find("comet-probe@0.1.0 is flagged"), std::string::npos) << after.err;
  EXPECT_NE(after.err.find("the newest unflagged version is comet-probe@0.1.1"), std::string::npos) << after.err;
  auto again = stored({"--type", "pack_flagged"});
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[2]["data"]["newest_unflagged"], "0.1.1");
  EXPECT_NE(soyaos({"pack", "list"}).out.find("comet-probe@0.1.0  sha256:"), std::string::npos);
  // The newer version itself is not flagged.
  EXPECT_EQ(run(v2.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
}

TEST_F(RunMoonTest, UnflagNeedsAReasonAndClearsTheWarning) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  ASSERT_EQ(run(pack_.string(), {"read", "/etc/shadow"}).exit_code, 3);
  EXPECT_NE(run(pack_.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
  EXPECT_EQ(soyaos({"pack", "unflag", "comet-probe@0.1.0"}).exit_code, 2);
  EXPECT_NE(run(pack_.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
  ASSERT_EQ(soyaos({"pack", "unflag", "comet-probe@0.1.0", "--reason", "probe fixture"}).exit_code, 0);
  EXPECT_EQ(run(pack_.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
  auto un = stored({"--type", "pack_unflagged"});
  ASSERT_EQ(un.size(), 1u);
  EXPECT_EQ(un[0]["data"]["reason"], "probe fixture");
  // The user soyaos ran as (nobody in the rootless copy).
  EXPECT_EQ(un[0]["data"]["actor"]["uid"], rootless_mode() ? int64_t{65534} : static_cast<int64_t>(::getuid()));
}

TEST_F(RunMoonTest, ADirectoryRunFlagsByNameVersionAndDigest) {
  // Never pushed: the violation still flags comet-probe@0.1.0 and this content.
  auto bad = run(pack_.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3);
  auto raised = stored({"--type", "pack_flagged"});
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0]["data"]["run_id"], run_id_of(bad));
  EXPECT_EQ(raised[0]["data"]["digest"], tree_digest(pack_).value());
  // Another run of the same directory warns.
  auto next = run(pack_.string(), {"exit", "0"});
  EXPECT_NE(next.err.find("comet-probe@0.1.0 is flagged"), std::string::npos) << next.err;
  // The same content pushed later is flagged; so is it under another version (by digest).
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  EXPECT_NE(soyaos({"pack", "list"}).out.find("[flagged]"), std::string::npos);
  TempDir other;
  auto renamed = other.copy_from_source("tests/fixtures/probe", "pack");
  {
    auto text = read_file(renamed / "soyapack.yaml");
    text.replace(text.find("version: 0.1.0"), 14, "version: 0.2.0");
    other.write("pack/soyapack.yaml", text);
  }
  // A changed manifest is a different digest: not flagged.
  EXPECT_EQ(run(renamed.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
  // Unflag by NAME@VERSION clears the directory's flag too.
  ASSERT_EQ(soyaos({"pack", "unflag", "comet-probe@0.1.0", "--reason", "reviewed"}).exit_code, 0);
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
