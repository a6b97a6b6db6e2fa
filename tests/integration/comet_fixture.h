// The Comet's end-to-end fixture (comet_test.cc, comet_cgroup_test.cc): the real soyaos binary
// runs the probe pack (tests/fixtures/probe), copied into a fresh directory per test, in a
// real sandbox. ctest runs every Comet* test twice: as root and (prefix `rootless.`) as nobody.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace soyaos::testing {

// One `soyaos run` of the probe: what it printed, the events it wrote, what the probe said.
struct ProbeRun {
  RunOutput output;
  std::vector<nlohmann::json> events;
  std::string result;                // the probe's "RESULT ..." line, without the prefix
  std::vector<std::string> results;  // every line that starts with "RESULT " (a `steps` run prints several), in order

  std::vector<nlohmann::json> of_type(const std::string& type) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == type) out.push_back(e);
    }
    return out;
  }
};

class CometFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
  }

  // Writes a manifest variant of the probe pack (same probe.py).
  void set_manifest(const std::string& yaml) { dir_.write("pack/soyapack.yaml", yaml); }

  // The probe pack's manifest with other resource limits ("{pids: 16}").
  void set_resources(const std::string& resources) {
    set_manifest(R"(soyapack: v0
name: comet-probe
version: 0.1.0
agent: {runtime: python3, entrypoint: probe.py}
capabilities:
  egress: []
  fs: {read: [/workdir], write: [/workdir/out]}
  determinism_tier: read-only
resources: )" + resources + "\n");
  }

  [[nodiscard]] std::filesystem::path events_path() const { return dir_.path() / "events.jsonl"; }

  // `soyaos run` of the probe pack under a shell command `wrap` (unshare …), the probe told to
  // write /workdir/out/ran: stdout and stderr together, then "exit=STATUS".
  std::string run_wrapped(const std::string& wrap, bool no_cache = true) {
    std::string cmd = wrap + " " + soyaos_binary() + " run " + pack_.string() + (no_cache ? " --no-cache" : "") +
                      " --out " + (dir_.path() / "out").string() + " -- write /workdir/out/ran 2>&1; echo \"exit=$?\"";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return "popen failed";
    std::string out;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
    return out;
  }

  // `soyaos run` of the probe pack with `action` for the probe; `extra` are run flags
  // ("--no-cache", "--input DIR", ...), before the `--`.
  [[nodiscard]] std::vector<std::string> run_args(const std::vector<std::string>& action,
                                                  const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"run",      pack_.string(), "--out", (dir_.path() / "out").string(),
                                     "--events", events_path().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.emplace_back("--");
    args.insert(args.end(), action.begin(), action.end());
    return args;
  }

  // What a finished run (run_args) left: its output, its events, the probe's RESULT lines.
  [[nodiscard]] ProbeRun collect(RunOutput output) const {
    ProbeRun run;
    run.output = std::move(output);
    std::istringstream lines(read_file(events_path()));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) run.events.push_back(nlohmann::json::parse(line));
    }
    auto pos = run.output.out.find("RESULT ");
    if (pos != std::string::npos) {
      auto end = run.output.out.find('\n', pos);
      run.result = run.output.out.substr(pos + 7, end - pos - 7);
    }
    std::istringstream out(run.output.out);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("RESULT ", 0) == 0) run.results.push_back(line.substr(7));
    }
    return run;
  }

  // Runs the probe to its end. The events file is removed first: a test may run several.
  ProbeRun probe(const std::vector<std::string>& action, const std::vector<std::string>& extra = {},
                 const std::map<std::string, std::string>& env = {{"SOYAOS_TEST_SECRET", "operator-secret"}}) {
    std::filesystem::remove(events_path());
    return collect(run_soyaos(run_args(action, extra), env, dir_.path()));
  }

  TempDir dir_;
  std::filesystem::path pack_;
};

}  // namespace soyaos::testing
