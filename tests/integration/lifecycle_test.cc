// Graceful stops (SPEC.md C9): SIGINT, SIGTERM, SIGHUP to `soyaos run`, the wall-clock
// timeout, Ctrl-C on a real terminal and a reader that goes away (`| head`). Each against a
// real agent in a real Comet: the agent gets SIGTERM and its grace period (or SIGKILL after
// it), its outputs are collected, run_finished is emitted to --events and stored in the
// Moon (`scope query`), and soyaos exits 128+N (124 on a timeout).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    home_ = (dir_.path() / "home").string();
  }
  // The probe pack with `resources:` replaced (timeout and grace).
  fs::path pack(const std::string& name, const std::string& resources) {
    fs::path p = dir_.copy_from_source("tests/fixtures/probe", name);
    std::string m = read_file(p / "soyapack.yaml");
    m = m.substr(0, m.find("resources:")) + "resources:\n" + resources;
    std::ofstream(p / "soyapack.yaml", std::ios::trunc) << m;
    return p;
  }
  std::map<std::string, std::string> env() const { return {{"SOYAOS_HOME", home_}}; }
  // `run PACK --out OUT --events EVENTS -- ARGS`, in the background.
  std::unique_ptr<Background> start(const fs::path& p, const std::string& tag, const std::vector<std::string>& agent,
                                    bool via_terminal = false, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"run",  p.string(), "--out", out(tag).string(), "--events",
                                     events_file(tag).string(), "--no-cache"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.emplace_back("--");
    args.insert(args.end(), agent.begin(), agent.end());
    return std::make_unique<Background>(args, env(), dir_.path(), via_terminal);
  }
  fs::path out(const std::string& tag) const { return dir_.path() / ("out-" + tag); }
  fs::path events_file(const std::string& tag) const { return dir_.path() / ("events-" + tag + ".jsonl"); }
  std::vector<nlohmann::json> events(const std::string& tag) const {
    std::vector<nlohmann::json> v;
    std::istringstream lines(read_file(events_file(tag)));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) v.push_back(nlohmann::json::parse(line));
    }
    return v;
  }
  // The run_finished event of run `tag` as --events got it, checked against the Moon's copy.
  nlohmann::json finished(const std::string& tag) {
    auto ev = events(tag);
    EXPECT_FALSE(ev.empty());
    if (ev.empty()) return {};
    EXPECT_EQ(ev.front()["type"], "run_started");
    EXPECT_EQ(ev.back()["type"], "run_finished");
    const std::string run_id = ev.front()["data"]["run_id"];
    auto q = run_soyaos({"scope", "query", "--run", run_id, "--type", "run_finished", "--format", "json"}, env());
    EXPECT_EQ(q.exit_code, 0) << q.err;
    auto stored = nlohmann::json::parse(q.out.substr(0, q.out.find('\n')), nullptr, false);
    EXPECT_FALSE(stored.is_discarded()) << q.out;
    if (!stored.is_discarded()) {
      EXPECT_EQ(stored["data"], ev.back()["data"]);
    }
    return ev.back()["data"];
  }
  TempDir dir_;
  std::string home_;
};

const std::vector<std::string> kTrap = {"wait_for_stop", "trap", "/workdir/out/stopped.txt", "0"};

TEST_F(LifecycleTest, EachStopSignalStopsTheAgentGracefullyAndKeepsTheRun) {
  auto p = pack("trap", "  timeout: 60s\n  grace: 10s\n");
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string tag = std::to_string(sig);
    auto bg = start(p, tag, kTrap);
    ASSERT_TRUE(bg->wait_for("READY")) << bg->so_far().err;
    auto t0 = std::chrono::steady_clock::now();
    bg->signal(sig);
    auto r = bg->finish();
    auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
    EXPECT_LT(secs, 8.0) << "the agent ended at SIGTERM, well within its 10s grace";
    EXPECT_NE(r.out.find("RESULT stopped"), std::string::npos) << "signal " << sig << ": " << r.out << r.err;
    EXPECT_EQ(read_file(out(tag) / "stopped.txt"), "stopped") << "outputs are collected";
    EXPECT_NE(r.err.find("stopped by SIG"), std::string::npos) << r.err;
    auto f = finished(tag);
    EXPECT_EQ(f["exit_code"], 128 + sig);
    EXPECT_EQ(f["ending"], "interrupted");
    EXPECT_EQ(f["stop"]["how"], "graceful");
    EXPECT_EQ(f["stop"]["signal"], sig);
    EXPECT_EQ(f["stop"]["grace_ms"], 10000);
    EXPECT_EQ(f["agent_status"], 0);
    EXPECT_EQ(f["outputs"]["files"], 1);
  }
}

TEST_F(LifecycleTest, AnAgentIgnoringSigtermIsKilledAfterTheGracePeriod) {
  auto p = pack("ignore", "  timeout: 60s\n  grace: 2s\n");
  auto bg = start(p, "ignore", {"steps", "write:/workdir/out/early.txt", "wait_for_stop:ignore"});
  ASSERT_TRUE(bg->wait_for("READY")) << bg->so_far().err;
  auto t0 = std::chrono::steady_clock::now();
  bg->signal(SIGTERM);
  auto r = bg->finish();
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_GE(secs, 1.9) << "SIGKILL only after the grace period";
  EXPECT_LT(secs, 15.0);
  EXPECT_EQ(r.out.find("RESULT not stopped"), std::string::npos);
  EXPECT_EQ(read_file(out("ignore") / "early.txt"), "x");
  EXPECT_NE(r.err.find("killed (SIGKILL) after SIGTERM"), std::string::npos) << r.err;
  auto f = finished("ignore");
  EXPECT_EQ(f["exit_code"], 128 + SIGTERM);
  EXPECT_EQ(f["stop"]["how"], "killed");
  EXPECT_EQ(f["agent_signaled"], true);
  EXPECT_EQ(f["agent_status"], SIGKILL);
}

TEST_F(LifecycleTest, AnAgentWithoutASigtermHandlerIsStoppedAtOnce) {
  // PID 1 of its namespace: the kernel would drop a SIGTERM it does not handle; the
  // supervisor applies the default action (end it) instead of waiting out the grace.
  auto p = pack("default", "  timeout: 60s\n  grace: 30s\n");
  auto bg = start(p, "default", {"wait_for_stop", "default"});
  ASSERT_TRUE(bg->wait_for("READY")) << bg->so_far().err;
  auto t0 = std::chrono::steady_clock::now();
  bg->signal(SIGINT);
  auto r = bg->finish();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_EQ(finished("default")["stop"]["how"], "killed_at_once");
}

TEST_F(LifecycleTest, ASecondSignalKillsAtOnce) {
  auto p = pack("twice", "  timeout: 60s\n  grace: 30s\n");
  auto bg = start(p, "twice", {"wait_for_stop", "ignore"});
  ASSERT_TRUE(bg->wait_for("READY")) << bg->so_far().err;
  auto t0 = std::chrono::steady_clock::now();
  bg->signal(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  bg->signal(SIGINT);
  auto r = bg->finish();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  EXPECT_EQ(finished("twice")["stop"]["how"], "killed");
}

TEST_F(LifecycleTest, TheTimeoutTakesTheSamePath) {
  auto p = pack("timeout", "  timeout: 2s\n  grace: 10s\n");
  auto bg = start(p, "timeout", kTrap);
  auto r = bg->finish();
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.out.find("RESULT stopped"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(out("timeout") / "stopped.txt"), "stopped");
  EXPECT_NE(r.err.find("timed out (resources.timeout)"), std::string::npos) << r.err;
  auto f = finished("timeout");
  EXPECT_EQ(f["exit_code"], 124);
  EXPECT_EQ(f["ending"], "timed_out");
  EXPECT_EQ(f["stop"]["reason"], "timeout");
  EXPECT_EQ(f["stop"]["how"], "graceful");
}

TEST_F(LifecycleTest, TheTimeoutKillsAnAgentThatIgnoresSigtermAfterTheGrace) {
  auto p = pack("timeout-ignore", "  timeout: 1s\n  grace: 1s\n");
  auto bg = start(p, "timeout-ignore", {"wait_for_stop", "ignore"});
  auto r = bg->finish();
  EXPECT_EQ(r.exit_code, 124) << r.err;
  auto f = finished("timeout-ignore");
  EXPECT_EQ(f["stop"]["how"], "killed");
}

TEST_F(LifecycleTest, CtrlCOnARealTerminal) {
  auto p = pack("tty", "  timeout: 60s\n  grace: 10s\n");
  auto bg = start(p, "tty", kTrap, /*via_terminal=*/true);
  ASSERT_TRUE(bg->wait_for("READY")) << bg->so_far().out << bg->so_far().err;
  bg->write_stdin("\x03");  // Ctrl-C, typed on soyaos's terminal
  auto r = bg->finish();
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.out << r.err;
  EXPECT_EQ(read_file(out("tty") / "stopped.txt"), "stopped");
  auto f = finished("tty");
  EXPECT_EQ(f["exit_code"], 128 + SIGINT);
  EXPECT_EQ(f["stop"]["signal_name"], "SIGINT");
}

TEST_F(LifecycleTest, AReaderThatGoesAwayDoesNotLoseTheRun) {
  // `soyaos run … | head -1`: after the first line nobody reads stdout any more.
  auto p = pack("pipe", "  timeout: 60s\n");
  auto bg = start(p, "pipe", {"wait_for_stop", "default", "", "0", "1"});
  ASSERT_TRUE(bg->wait_for("READY")) << bg->so_far().err;
  bg->close_stdout();
  auto r = bg->finish();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto f = finished("pipe");
  EXPECT_EQ(f["exit_code"], 0);
  EXPECT_EQ(f["ending"], "exited");

  // The same with the events on that stdout (`--events -`): the Moon still has them all.
  std::vector<std::string> args = {"run", p.string(), "--out", out("pipe2").string(), "--events", "-",
                                   "--no-cache", "--", "wait_for_stop", "default", "", "0", "1"};
  Background bg2(args, env(), dir_.path());
  ASSERT_TRUE(bg2.wait_for("run_started")) << bg2.so_far().err;
  const auto first = nlohmann::json::parse(bg2.so_far().out.substr(0, bg2.so_far().out.find('\n')));
  bg2.close_stdout();
  auto r2 = bg2.finish();
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  auto q = run_soyaos({"scope", "query", "--run", first["data"]["run_id"], "--type", "run_finished", "--format", "json"},
                      env());
  EXPECT_NE(q.out.find("\"exit_code\":0"), std::string::npos) << q.out << q.err;
}

}  // namespace
}  // namespace soyaos::testing
