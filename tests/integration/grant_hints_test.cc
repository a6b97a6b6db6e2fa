// The violation summary's "to allow" hints (issue #13): the real soyaos binary runs the probe
// pack (tests/fixtures/probe) in a real Comet; each denial is tried from inside, and the test
// checks the errno the agent saw, the capability_violation event, exit 3, and the exact hint
// lines at the end of the summary. Where a hint is grantable, the manifest with the proposed
// lines added then runs the same attempts without a violation: the hints are right.
// ctest runs these twice: as root and (prefix `rootless.`) as nobody (the Comet* filter).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "harness.h"

namespace soyaos::testing {
namespace {

using nlohmann::json;

constexpr const char* kHead = R"(soyapack: v0
name: comet-probe
version: 0.1.0
agent: {runtime: python3, entrypoint: probe.py}
resources: {timeout: 20s, write_quota: 1Mi}
)";

struct HintRun {
  RunOutput output;
  std::vector<json> violations;
  std::vector<std::string> results;  // every "RESULT ..." line, in order
};

class CometHintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
  }

  void set_capabilities(const std::string& caps) { dir_.write("pack/soyapack.yaml", std::string(kHead) + caps); }

  HintRun probe(const std::vector<std::string>& action) {
    auto events = dir_.path() / "events.jsonl";
    auto out = dir_.path() / ("out" + std::to_string(runs_++));
    std::filesystem::remove(events);
    std::vector<std::string> args = {"run", pack_.string(), "--out", out.string(), "--events", events.string(), "--"};
    args.insert(args.end(), action.begin(), action.end());
    HintRun run;
    run.output = run_soyaos(args, {}, dir_.path());
    std::istringstream lines(read_file(events));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      auto e = json::parse(line);
      if (e.value("type", "") == "capability_violation") run.violations.push_back(e["data"]);
    }
    std::istringstream out_lines(run.output.out);
    for (std::string line; std::getline(out_lines, line);) {
      if (line.rfind("RESULT ", 0) == 0) run.results.push_back(line.substr(7));
    }
    return run;
  }

  // The summary's hint lines ("to allow: ..." and "not grantable: ..."), in order.
  static std::vector<std::string> hints(const HintRun& run) {
    std::vector<std::string> out;
    std::istringstream err(run.output.err);
    for (std::string line; std::getline(err, line);) {
      if (line.rfind("  to allow: ", 0) == 0 || line.rfind("  not grantable: ", 0) == 0) out.push_back(line.substr(2));
    }
    return out;
  }

  static bool has_violation(const HintRun& run, const std::string& surface, const std::string& resource,
                            const std::string& errno_name) {
    for (const auto& v : run.violations) {
      if (v["surface"] == surface && v["resource"] == resource && v["errno"] == errno_name) return true;
    }
    return false;
  }

  TempDir dir_;
  std::filesystem::path pack_;
  int runs_ = 0;
};

TEST_F(CometHintTest, FsDenialsSayWhichPathsToAddAndGroupWrites) {
  set_capabilities(R"(capabilities:
  egress: []
  fs: {read: [/workdir, /workdir/inputs], write: [/workdir/out]}
  determinism_tier: read-only
)");
  const std::vector<std::string> steps = {"steps",         "read:/data/config.json", "write:/scratch/a",
                                          "write:/scratch/b", "write:/scratch/c",    "read:/etc/shadow"};
  auto run = probe(steps);
  ASSERT_EQ(run.results.size(), 5U) << run.output.out << run.output.err;
  EXPECT_EQ(run.results[0], "errno=ENOENT");
  EXPECT_EQ(run.results[1], "errno=EACCES");
  EXPECT_EQ(run.results[4], "errno=ENOENT");
  EXPECT_EQ(run.output.exit_code, 3) << run.output.err;
  EXPECT_TRUE(has_violation(run, "fs", "/data/config.json", "ENOENT")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "fs", "/scratch/a", "EACCES")) << run.output.err;
  EXPECT_EQ(hints(run), (std::vector<std::string>{
                            "to allow: add  - /data/config.json  under capabilities.fs.read  (/data/config.json: 1 read)",
                            "to allow: add  - /scratch  under capabilities.fs.write  (/scratch/*: 3 writes)",
                            "not grantable: read /etc/shadow: 1 attempt  (/etc belongs to the Comet (its runtime layer "
                            "or kernel interfaces): a pack cannot add host files there; ship the file in the pack or "
                            "pass it with --input)"}))
      << run.output.err;

  // The proposed lines, added: the same reads and writes are no violation any more (the read
  // path is declared but holds nothing without an operator --mount: ENOENT, not a violation).
  set_capabilities(R"(capabilities:
  egress: []
  fs:
    read: [/workdir, /workdir/inputs, /data/config.json]
    write: [/workdir/out, /scratch]
  determinism_tier: read-only
)");
  auto fixed = probe({"steps", "read:/data/config.json", "write:/scratch/a", "write:/scratch/b", "write:/scratch/c"});
  ASSERT_EQ(fixed.results.size(), 4U) << fixed.output.out << fixed.output.err;
  EXPECT_EQ(fixed.results[0], "errno=ENOENT");
  EXPECT_EQ(fixed.results[1].rfind("ok", 0), 0U) << fixed.results[1];
  EXPECT_EQ(fixed.results[3].rfind("ok", 0), 0U) << fixed.results[3];
  EXPECT_TRUE(fixed.violations.empty()) << fixed.output.err;
  EXPECT_EQ(fixed.output.exit_code, 0) << fixed.output.err;
}

TEST_F(CometHintTest, NetworkDenialsSayTheTripleWhenTheGatewayKnowsIt) {
  set_capabilities(R"(capabilities:
  egress:
    - {host: web.test, port: 8443, protocol: http}
  fs: {read: [/workdir, /workdir/inputs], write: [/workdir/out]}
  determinism_tier: read-only
)");
  // A name no entry covers (refused at DNS, A and AAAA: its port and protocol cannot be
  // known), TLS to an http entry (the gateway read a ClientHello: https), a port no entry
  // allows (refused in the Comet's firewall: tcp).
  auto run = probe({"netsteps", "resolve api.example.com", "tls web.test 8443", "tcp_echo web.test 9000 hi"});
  ASSERT_EQ(run.results.size(), 3U) << run.output.out << run.output.err;
  EXPECT_EQ(run.output.exit_code, 3) << run.output.err;
  EXPECT_TRUE(has_violation(run, "network", "dns:api.example.com", "NXDOMAIN")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "network", "web.test:8443/https", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "network", "web.test:9000/tcp", "ECONNREFUSED")) << run.output.err;
  EXPECT_EQ(hints(run),
            (std::vector<std::string>{
                "to allow: add  - {host: api.example.com, port: PORT, protocol: PROTOCOL}  under capabilities.egress  "
                "(dns:api.example.com: 2 attempts; the name was refused before any connection, so its port and "
                "protocol are unknown (`soyaos pack learn` finds them))",
                "to allow: add  - {host: web.test, port: 8443, protocol: https}  under capabilities.egress  "
                "(web.test:8443/https: 1 attempt)",
                "to allow: add  - {host: web.test, port: 9000, protocol: tcp}  under capabilities.egress  "
                "(web.test:9000/tcp: 1 attempt)"}))
      << run.output.err;
}

TEST_F(CometHintTest, ExecAndForkAreNotGrantable) {
  set_capabilities(R"(capabilities:
  egress: []
  fs: {read: [/workdir, /workdir/inputs], write: [/workdir/out]}
  determinism_tier: read-only
)");
  auto run = probe({"steps", "fork", "exec:/usr/bin/true"});
  ASSERT_EQ(run.results.size(), 2U) << run.output.out << run.output.err;
  EXPECT_EQ(run.results[0], "errno=EPERM");
  EXPECT_EQ(run.results[1], "errno=EACCES");
  EXPECT_EQ(run.output.exit_code, 3) << run.output.err;
  EXPECT_TRUE(has_violation(run, "exec", "/usr/bin/true", "EACCES")) << run.output.err;
  EXPECT_EQ(hints(run),
            (std::vector<std::string>{
                "not grantable: fork or clone of a new process: 1 attempt  (a Comet runs one process (threads are "
                "fine): fork and clone of a process are never granted (C3); do the work in-process)",
                "not grantable: exec /usr/bin/true: 1 attempt  (a Comet executes its runtime's interpreter once: exec "
                "is never granted (C3); do the work in-process (a library instead of a program))"}))
      << run.output.err;
}

}  // namespace
}  // namespace soyaos::testing
