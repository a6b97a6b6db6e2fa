// The Comet's run cgroup end to end (SPEC C9, issue #16): the real soyaos runs the probe pack
// (tests/fixtures/probe). The Comet is cloned by a launcher thread already in the run's
// cgroup (src/comet/launch_thread.h), so these check what the agent and the host see:
// the agent's own cgroup namespace root, exactly `resources.pids` tasks for the agent, and
// (as root, where the host gives cgroups) a run cgroup that holds the agent and nothing of
// the supervisor's. ctest runs them as root and (prefix `rootless.`) as nobody, where this
// host offers no cgroup and the rlimits must give the same counts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <cstdio>
#include <set>
#include <sstream>
#include <thread>

#include "cgroup_files.h"
#include "comet_fixture.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

// Every run with --no-cache: what these tests check happens in a real run, never a replay
// of a cached result. No operator secret in the environment: these manifests use none.
class CometCgroupTest : public CometFixture {
 protected:
  ProbeRun probe_run(const std::vector<std::string>& action) { return probe(action, {"--no-cache"}, {}); }
};

// soyaos as PID 1 (a container's entrypoint): the Comet is a clone3 copy of the launcher
// thread, and glibc's set*id wrappers in it would signal the threads glibc believes it has
// — in the new PID namespace the supervisor's TID 1 is the child itself — and spin forever
// (review). The child's set*id calls are raw system calls; the run ends, exit 0.
TEST_F(CometCgroupTest, ARunWhoseSupervisorIsPid1Ends) {
  if (::geteuid() != 0 || rootless_mode()) GTEST_SKIP() << "needs root for a PID namespace of its own";
  const std::string out = run_wrapped("timeout -s KILL 60 unshare --pid --fork --mount-proc");
  EXPECT_NE(out.find("exit=0"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_.path() / "out" / "ran")) << out;
}

// The same in a pid namespace whose /proc is still the host's: every /proc/PID the
// supervisor would use names another process, so the run refuses (125) and says why.
TEST_F(CometCgroupTest, ARunWhoseProcIsNotItsPidNamespacesRefusesAndSaysWhy) {
  if (::geteuid() != 0 || rootless_mode()) GTEST_SKIP() << "needs root for a PID namespace of its own";
  const std::string out = run_wrapped("timeout -s KILL 60 unshare --pid --fork");
  EXPECT_NE(out.find("exit=125"), std::string::npos) << out;
  EXPECT_NE(out.find("/proc is not of this process's pid namespace"), std::string::npos) << out;
  EXPECT_NE(out.find("unshare --mount-proc"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_.path() / "out" / "ran")) << out;
}

// The agent's /proc/self/cgroup: a cgroup namespace rooted at its own cgroup, so every
// hierarchy reads "/" and nothing of the host's tree shows.
TEST_F(CometCgroupTest, TheAgentSeesOnlyTheRootOfItsCgroupNamespace) {
  auto run = probe_run({"cgroup"});
  ASSERT_EQ(run.output.exit_code, 0) << run.output.out << run.output.err;
  const auto& res = run.results;
  ASSERT_EQ(res.size(), 1u) << run.output.out;
  ASSERT_EQ(res[0].rfind("ok ", 0), 0u) << res[0];
  std::istringstream in(res[0].substr(3));
  int lines = 0;
  for (std::string line; std::getline(in, line, ';'); ++lines) {
    EXPECT_EQ(line.substr(line.size() - 2), ":/") << line << " in " << res[0];
  }
  EXPECT_GE(lines, 1);
}

// With `pids: 8` the agent (one task) can start exactly 7 threads: the launcher thread
// that cloned it into the run's cgroup counts there no more (root: the cgroup refuses the
// eighth and reports it; rootless: RLIMIT_NPROC does).
TEST_F(CometCgroupTest, TheAgentCreatesExactlyItsPidsLimit) {
  set_resources("{pids: 8}");
  auto run = probe_run({"thread_count", "50"});
  ASSERT_EQ(run.output.exit_code, 0) << run.output.out << run.output.err;
  EXPECT_EQ(run.results, std::vector<std::string>{"ok 7"}) << run.output.out << run.output.err;
  auto started = run.of_type("run_started");
  ASSERT_EQ(started.size(), 1u);
  const std::string mechanism = started[0]["data"]["limit_mechanisms"].value("pids", "");
  auto exceeded = run.of_type("limit_exceeded");
  if (mechanism == "rlimit") {
    EXPECT_TRUE(exceeded.empty()) << run.output.err;
    return;
  }
  ASSERT_EQ(exceeded.size(), 1u) << run.output.err;
  EXPECT_EQ(exceeded[0]["data"]["limit_pids"], 8);
  EXPECT_EQ(exceeded[0]["data"]["refused"], 1) << "the launcher's own clone was counted as refused";
}

// The cgroup of a hierarchy's mount ("/sys/fs/cgroup/pids") with `path` inside it.
std::string v1_dir(const std::string& controller, const std::string& path) {
  std::istringstream in(read_file("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::vector<std::string> f;
    for (std::string x; w >> x;) f.push_back(x);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (dash == f.end() || std::distance(dash, f.end()) < 4 || *(dash + 1) != "cgroup") continue;
    std::istringstream opts(*(dash + 3));
    for (std::string o; std::getline(opts, o, ',');) {
      if (o == controller && f[3] == "/") return f[4] + path;
    }
  }
  return "";
}

// While the agent runs, its run cgroup (memory, pids, cpu) holds the agent and nothing of
// the supervisor's: not the launcher thread that cloned it, nor any other thread.
TEST_F(CometCgroupTest, TheRunCgroupHoldsTheAgentAndNoThreadOfTheSupervisor) {
  const std::string marker = "1." + std::to_string(::getpid());  // how long it sleeps, and how we find it
  Background bg(run_args({"steps", "cgroup", "sleep:" + marker}, {"--no-cache"}), {}, dir_.path());
  pid_t agent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (agent == 0 && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string cmdline = read_file(e.path() / "cmdline");
      if (cmdline.find("sleep:" + marker) != std::string::npos && cmdline.find("probe.py") != std::string::npos &&
          read_file(e.path() / "comm") == "python3\n") {
        agent = static_cast<pid_t>(std::stol(e.path().filename().string()));
      }
    }
    if (agent == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(agent, 0) << "the agent was not seen\n" << bg.finish().err;
  const std::string proc = "/proc/" + std::to_string(agent);
  const std::string host_view = read_file(proc + "/cgroup");
  std::istringstream stat(read_file(proc + "/stat").substr(read_file(proc + "/stat").rfind(')') + 2));
  std::string state;
  long supervisor = 0;
  stat >> state >> supervisor;
  std::set<std::string> supervisor_threads;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(supervisor) + "/task")) {
    supervisor_threads.insert(t.path().filename().string());
  }
  std::set<std::string> agent_threads;
  for (const auto& t : fs::directory_iterator(proc + "/task")) agent_threads.insert(t.path().filename().string());
  // "ID:CONTROLLERS:PATH": the run's cgroup of each controller, as the host sees it.
  std::map<std::string, std::string> run_dirs;
  std::istringstream lines(host_view);
  for (std::string line; std::getline(lines, line);) {
    const auto c1 = line.find(':');
    const auto c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    const std::string path = line.substr(c2 + 1);
    if (path.find("/soyaos-") == std::string::npos) continue;
    std::istringstream controllers(line.substr(c1 + 1, c2 - c1 - 1));
    for (std::string c; std::getline(controllers, c, ',');) {
      if (c == "memory" || c == "pids" || c == "cpu") run_dirs[c] = v1_dir(c, path);
    }
  }
  // Read while the agent sleeps, then let it finish.
  std::map<std::string, std::pair<std::string, std::string>> held;
  for (const auto& [controller, dir] : run_dirs) held[controller] = {read_file(dir + "/tasks"), read_file(dir + "/cgroup.procs")};
  const ProbeRun run = collect(bg.finish());
  ASSERT_EQ(run.output.exit_code, 0) << run.output.out << run.output.err;
  if (run_dirs.empty()) {
    // No cgroup for this user here (rootless on cgroup v1): the rlimits bound the run.
    ASSERT_TRUE(rootless_mode()) << "as root the agent must be in a run cgroup:\n" << host_view;
    GTEST_SKIP() << "no run cgroup as uid " << ::geteuid() << " (rlimits only)";
  }
  for (const char* controller : {"memory", "pids"}) {
    EXPECT_EQ(run_dirs.count(controller), 1u) << controller << " is not a run cgroup:\n" << host_view;
  }
  for (const auto& [controller, got] : held) {
    const auto tasks = lines_of(got.first);
    EXPECT_EQ(lines_of(got.second), std::set<std::string>{std::to_string(agent)}) << controller;
    EXPECT_EQ(tasks, agent_threads) << controller << ": " << got.first;
    for (const auto& t : tasks) EXPECT_EQ(supervisor_threads.count(t), 0u) << controller << ": supervisor thread " << t;
  }
  EXPECT_EQ(run.results.size(), 2u) << run.output.out;
}

}  // namespace
}  // namespace soyaos::testing
