// SOYAOS_TRACE_PHASES=1 (src/common/phase_trace.h), which bench/startup.sh and the CI guard's
// driver (bench/startup_phases.py) parse: every phase of a real run is named, in order, and
// the Comet's child steps carry the child's own CPU time (issue #16: every millisecond
// named, the child's layers included).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace soyaos::testing {
namespace {

struct Phase {
  std::string name;
  uint64_t monotonic_ns = 0;
  std::string cpu;           // the supervisor's CPU ns, "-" for a child step
  int64_t child_cpu_ns = -1;  // the child's CPU ns (child steps only)
};

std::vector<Phase> parse(const std::string& err) {
  std::vector<Phase> out;
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string tag;
    Phase p;
    if (!(words >> tag) || tag != "soyaos-phase") continue;
    words >> p.name >> p.monotonic_ns >> p.cpu;
    if (int64_t child = 0; words >> child) p.child_cpu_ns = child;
    out.push_back(p);
  }
  return out;
}

TEST(PhaseTrace, NamesEveryPhaseAndTheChildsCpu) {
  if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
  TempDir dir;
  dir.write("pack/main.py", "pass\n");
  dir.write("pack/soyapack.yaml", R"(soyapack: v0
name: noop
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress: []
  fs: {read: [/workdir]}
  determinism_tier: read-only
)");
  const auto out = (dir.path() / "out").string();
  auto plain = run_soyaos({"run", "--no-cache", (dir.path() / "pack").string(), "--out", out + "1"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err.find("soyaos-phase"), std::string::npos) << "traced without SOYAOS_TRACE_PHASES";

  auto run = run_soyaos({"run", "--no-cache", (dir.path() / "pack").string(), "--out", out + "2"},
                        {{"SOYAOS_TRACE_PHASES", "1"}});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto phases = parse(run.err);
  // "mark:NAME" lines are points in time of another thread that end no phase (the launcher
  // thread in the run's cgroup, src/comet/launch_thread.h): out of the sequence.
  std::vector<decltype(phases)::value_type> marks;
  for (auto it = phases.begin(); it != phases.end();) {
    if (it->name.rfind("mark:", 0) == 0) {
      marks.push_back(*it);
      it = phases.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::string> names;
  for (const auto& p : phases) names.push_back(p.name);
  const std::vector<std::string> child = {"namespaces", "mounts",      "network",  "session",
                                          "rlimits",    "credentials", "landlock", "seccomp"};
  std::vector<std::string> expected = {"main",        "cli_parsed",  "operator_config",     "usage_checks",
                                       "cache_lookup", "moon_open",  "manifest",            "pack_digest",
                                       "policy",      "plan",        "run_started_emitted", "manifest_kept",
                                       "flag_check",  "run_started_durable", "clone3"};
  expected.insert(expected.end(), child.begin(), child.end());
  for (const char* n : {"comet_ready", "gateway_started", "agent_exited", "network_stopped", "collected",
                        "outputs_digested", "durable", "cache_store", "reported"}) {
    expected.emplace_back(n);
  }
  ASSERT_EQ(names, expected) << run.err;

  // The child's steps: its own CPU time, from clone3 on, never decreasing; the supervisor's
  // lines carry the supervisor's CPU time. Timestamps in order.
  int64_t prev_child = 0;
  uint64_t prev_ns = 0;
  for (const auto& p : phases) {
    EXPECT_GE(p.monotonic_ns, prev_ns) << p.name;
    prev_ns = p.monotonic_ns;
    const bool is_child = std::find(child.begin(), child.end(), p.name) != child.end();
    if (is_child) {
      EXPECT_EQ(p.cpu, "-") << p.name;
      ASSERT_GE(p.child_cpu_ns, prev_child) << p.name;
      prev_child = p.child_cpu_ns;
    } else {
      EXPECT_EQ(p.child_cpu_ns, -1) << p.name;
      if (p.name != "clone3") {
        EXPECT_NE(p.cpu, "-") << p.name;
      }
    }
  }
  EXPECT_GT(prev_child, 0) << "the child's set-up took no CPU at all?";
  // As root here the run has cgroups: the launcher thread's entry is marked, after the cache
  // lookup (where `soyaos run` starts it) and before the Comet was ready; rootless (rlimits
  // only) there is no launcher thread.
  if (rootless_mode()) {
    EXPECT_TRUE(marks.empty()) << run.err;
  } else {
    ASSERT_EQ(marks.size(), 1u) << run.err;
    EXPECT_EQ(marks[0].name, "mark:cgroup_entered");
    EXPECT_EQ(marks[0].cpu, "-");
    auto at = [&](const std::string& name) {
      for (const auto& p : phases) {
        if (p.name == name) return p.monotonic_ns;
      }
      return uint64_t{0};
    };
    EXPECT_GT(marks[0].monotonic_ns, at("cache_lookup")) << run.err;
    EXPECT_LT(marks[0].monotonic_ns, at("comet_ready")) << run.err;
  }
}

}  // namespace
}  // namespace soyaos::testing
