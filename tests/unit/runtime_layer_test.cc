// The runtime layer's table and its /proc renderings (src/policy/runtime_layer.cc): pure
// functions of the host's text, the agent's CPUs and its memory limit. End to end, with real
// interpreters in real Comets: tests/integration/runtime_layer_test.cc.
#include "policy/runtime_layer.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "manifest/manifest.h"
#include "policy/policy.h"

namespace soyaos::policy {
namespace {

constexpr const char* kHostStat =
    "cpu  100 0 50 1000 5 0 3 0 0 0\n"
    "cpu0 10 0 5 100 1 0 1 0 0 0\n"
    "cpu1 20 0 10 200 2 0 1 0 0 0\n"
    "cpu2 70 0 35 700 2 0 1 0 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n"
    "btime 1700000000\n"
    "processes 4242\n"
    "procs_running 3\n";

TEST(RuntimeLayer, StatKeepsOnlyTheAgentsCpusAndSumsThem) {
  EXPECT_EQ(render_proc_file("/proc/stat", kHostStat, {0, 2}, 0),
            "cpu  80 0 40 800 3 0 2 0 0 0\n"
            "cpu0 10 0 5 100 1 0 1 0 0 0\n"
            "cpu2 70 0 35 700 2 0 1 0 0 0\n");
  // Nothing of the host's process counters; no CPUs, no lines.
  EXPECT_EQ(render_proc_file("/proc/stat", kHostStat, {}, 0), "cpu \n");
  EXPECT_EQ(render_proc_file("/proc/stat", "garbage\ncpuX 1\ncpu 1 2\n", {0}, 0), "cpu \n");
}

TEST(RuntimeLayer, CpuinfoKeepsTheAgentsProcessors) {
  const std::string host =
      "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse\n\n"
      "processor\t: 1\nmodel name\t: Test CPU\nflags\t\t: fpu sse\n\n"
      "processor\t: 2\nmodel name\t: Test CPU\nflags\t\t: fpu sse\n\n";
  EXPECT_EQ(render_proc_file("/proc/cpuinfo", host, {1}, 0),
            "processor\t: 1\nmodel name\t: Test CPU\nflags\t\t: fpu sse\n\n");
  EXPECT_EQ(render_proc_file("/proc/cpuinfo", host, {}, 0), "");
}

TEST(RuntimeLayer, MeminfoIsBoundedByTheMemoryLimit) {
  const std::string host =
      "MemTotal:       16000000 kB\nMemFree:         9000000 kB\nMemAvailable:   12000000 kB\n"
      "Buffers:          100000 kB\nCached:          2000000 kB\nSwapTotal:       4000000 kB\n";
  const std::string limited = render_proc_file("/proc/meminfo", host, {0}, uint64_t{512} << 20);
  EXPECT_EQ(limited,
            "MemTotal:         524288 kB\nMemFree:          524288 kB\nMemAvailable:     524288 kB\n"
            "Buffers:               0 kB\nCached:                0 kB\nSwapTotal:             0 kB\n"
            "SwapFree:              0 kB\n");
  const std::string unlimited = render_proc_file("/proc/meminfo", host, {0}, 0);
  EXPECT_EQ(unlimited.substr(0, 84),
            "MemTotal:       16000000 kB\nMemFree:         9000000 kB\nMemAvailable:   12000000 kB\n");
}

TEST(RuntimeLayer, SysinfoIsTheAgentsViewLikeTheServedFiles) {
  struct sysinfo host {};
  host.uptime = 18094;
  host.loads[0] = 995936;
  host.loads[1] = 1028416;
  host.loads[2] = 962976;
  host.totalram = 6000000;  // pages of 4 KiB: ~23 GiB
  host.freeram = 2500000;
  host.sharedram = 2347;
  host.bufferram = 12740;
  host.totalswap = 1000;
  host.freeswap = 900;
  host.procs = 197;
  host.totalhigh = 7;
  host.mem_unit = 4096;
  const struct sysinfo limited = agent_sysinfo(host, uint64_t{512} << 20);
  EXPECT_EQ(limited.uptime, 18094);
  EXPECT_EQ(limited.loads[0], 995936u);
  EXPECT_EQ(limited.loads[2], 962976u);
  EXPECT_EQ(limited.mem_unit, 1u);
  EXPECT_EQ(limited.totalram, uint64_t{512} << 20);
  EXPECT_EQ(limited.freeram, uint64_t{512} << 20);
  EXPECT_EQ(limited.sharedram + limited.bufferram + limited.totalswap + limited.freeswap, 0u);
  EXPECT_EQ(limited.totalhigh + limited.freehigh, 0u);
  EXPECT_EQ(limited.procs, 1);
  // Without a limit (or above the host's RAM) the host's RAM in bytes; free never above total.
  const struct sysinfo unlimited = agent_sysinfo(host, 0);
  EXPECT_EQ(unlimited.totalram, uint64_t{6000000} * 4096);
  EXPECT_EQ(unlimited.freeram, uint64_t{2500000} * 4096);
  EXPECT_EQ(agent_sysinfo(host, uint64_t{1} << 50).totalram, uint64_t{6000000} * 4096);
  host.mem_unit = 0;  // old kernels: bytes
  EXPECT_EQ(agent_sysinfo(host, 0).totalram, 6000000u);
}

TEST(RuntimeLayer, LoadavgKeepsTheAveragesOnly) {
  EXPECT_EQ(render_proc_file("/proc/loadavg", "0.52 0.58 0.59 3/791 123456\n", {0}, 0), "0.52 0.58 0.59 1/1 1\n");
  EXPECT_EQ(render_proc_file("/proc/loadavg", "", {0}, 0), "1/1 1\n");
}

TEST(RuntimeLayer, TheTableIsWellFormed) {
  std::set<std::string> seen;
  for (const auto& row : runtime_probes()) {
    const std::string path = row.path;
    EXPECT_TRUE(manifest::is_normalised_absolute(path)) << path;
    EXPECT_TRUE(seen.insert(path).second) << "duplicate row " << path;
    EXPECT_NE(std::string(row.prober), "") << path;
    EXPECT_NE(std::string(row.answer), "") << path;
    EXPECT_NE(row.runtimes, 0U) << path;
    switch (row.kind) {
      case ProbeKind::served:
        EXPECT_TRUE(manifest::path_covers("/proc", path)) << path;
        EXPECT_TRUE(is_served_proc_file(path)) << path;
        break;
      case ProbeKind::generated:
        EXPECT_NE(generated_probe_content(row), "") << path;
        break;
      case ProbeKind::link:
        EXPECT_TRUE(manifest::is_normalised_absolute(row.answer)) << path;
        break;
      case ProbeKind::host:
      case ProbeKind::absent:
        EXPECT_FALSE(is_served_proc_file(path)) << path;
        break;
    }
  }
  // Host identity stays out.
  for (const char* p : {"/etc/machine-id", "/etc/hostname", "/etc/shadow", "/proc/version", "/proc/kallsyms"}) {
    EXPECT_EQ(seen.count(p), 0U) << p;
  }
}

TEST(RuntimeLayer, PythonGetsTheSitecustomizeAndNodeDoesNot) {
  bool python = false, node = false;
  for (const auto& row : runtime_probes()) {
    if (std::string(row.path) != "/etc/python3.11/sitecustomize.py") continue;
    python = probe_applies(row, manifest::Runtime::python3);
    node = probe_applies(row, manifest::Runtime::node);
    EXPECT_NE(generated_probe_content(row).find("_Processor"), std::string::npos);
  }
  EXPECT_TRUE(python);
  EXPECT_FALSE(node);
}

}  // namespace
}  // namespace soyaos::policy
