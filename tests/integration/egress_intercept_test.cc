// Intercepted egress connections at the gateway's bounds (issues #12 and #18, SPEC C6, C11):
// an entry with `http` rules is intercepted, and each of its connections is an exchange thread
// of the supervisor's holding the agent's socket and the upstream's. Past the thread cap (64)
// and past the descriptor budget's connection cap, a connection is reset and counted
// (limit_exceeded after the run, a stderr line), never hung nor refused in silence, and the
// gateway serves again once the held connections close. Real Comets, a real keep-alive HTTP
// server on the host's loopback; ctest runs these as root and (`rootless.`) as nobody.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "egress_fixture.h"

namespace soyaos::testing {
namespace {

using namespace egress;  // NOLINT(google-build-using-namespace): the shared fixture

class EgressInterceptTest : public EgressTest {
 protected:
  // web.test:PORT/http with rules: every connection to it is intercepted.
  void intercepted_pack(uint16_t port, const std::string& open_files) {
    dir_.write("pack/soyapack.yaml", "soyapack: v0\nname: egress-probe\nversion: 0.1.0\n"
                                     "agent: {runtime: python3, entrypoint: probe.py}\n"
                                     "capabilities:\n  egress:\n    - host: web.test\n      port: " +
                                         std::to_string(port) +
                                         "\n      protocol: http\n"
                                         "      http: [{method: GET, path: /held}, {method: GET, path: /}]\n"
                                         "  fs: {read: [/workdir], write: [/workdir/out]}\n"
                                         "  determinism_tier: read-only\n"
                                         "resources: {timeout: 30s, write_quota: 1Mi, open_files: " +
                                         open_files + "}\n");
  }

  static json limit_event(const ProbeRun& run, const std::string& limit) {
    for (const auto& e : run.of_type("limit_exceeded")) {
      if (e["data"].value("limit", "") == limit) return e["data"];
    }
    return nullptr;
  }

  // held_status's "ok open=N reset=N eof=N".
  static bool held(const std::string& result, unsigned* open, unsigned* refused) {
    unsigned reset = 0, eof = 0;
    if (std::sscanf(result.c_str(), "ok open=%u reset=%u eof=%u", open, &reset, &eof) != 3) return false;
    *refused = reset + eof;
    return true;
  }
};

TEST_F(EgressInterceptTest, ConnectionsBeyondTheExchangeCapAreResetAndCounted) {
  HttpKeepAliveServer web;
  set_moon({{"web.test", "127.0.0.1"}});
  intercepted_pack(web.port(), "256");
  const std::string p = std::to_string(web.port());
  // 70 kept-alive connections, each answered once: 64 exchange threads hold theirs, the
  // other 6 are reset when the gateway decides to intercept them (before any upstream).
  // (After the release, the exchange threads need a moment to see the agents' EOF and end.)
  auto run = probe({"netsteps", "hold_req 70 web.test " + p, "held_status 1.5", "release", "held_status 1",
                    "http_get web.test " + p});
  ASSERT_EQ(run.results.size(), 5u) << run.context();
  unsigned open = 0, refused = 0;
  ASSERT_TRUE(held(run.results[1], &open, &refused)) << run.context();
  EXPECT_EQ(open, 64u) << run.context();
  EXPECT_EQ(refused, 6u) << run.context();
  EXPECT_EQ(run.results[2], "ok released 70") << run.context();
  EXPECT_EQ(run.results[4], "ok 200 hello, kept alive") << run.context();  // the gateway recovered
  const json limit = limit_event(run, "intercepted_connections");
  ASSERT_FALSE(limit.is_null()) << run.context();
  EXPECT_EQ(limit.value("limit_connections", 0u), 64u) << limit.dump();
  EXPECT_EQ(limit.value("refused", 0u), 6u) << limit.dump();
  EXPECT_EQ(limit["action"], "refused") << limit.dump();
  EXPECT_EQ(limit["mechanism"], "egress gateway") << limit.dump();
  // A bound, not a capability: no violation, exit 0, and stderr says it.
  EXPECT_TRUE(run.violations().empty()) << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(contains(run.output.err, "6 intercepted connection(s) refused at the egress gateway's limit of 64"))
      << run.output.err;
  // No request of the refused ones reached the upstream; the held ones and the last one did.
  // (A connection refused at the handoff, when threads started meanwhile, was connected
  // upstream first: it is reset there before a byte is sent.)
  EXPECT_EQ(web.record().heads.size(), 65u) << web.describe();
  EXPECT_EQ(run.of_type("http_request").size(), 65u) << run.context();
}

TEST_F(EgressInterceptTest, InterceptedConnectionsCountAgainstTheDescriptorBudget) {
  HttpKeepAliveServer web;
  set_moon({{"web.test", "127.0.0.1"}});
  intercepted_pack(web.port(), "128");
  const std::string p = std::to_string(web.port());
  // As under `ulimit -n 256`: the descriptor budget leaves room for about 20 connections, and
  // intercepted ones (held by exchange threads, outside the loop's table) count as well.
  auto run = probe({"netsteps", "hold_req 40 web.test " + p, "held_status 1.5", "release", "held_status 1",
                    "http_get web.test " + p},
                   {{kNofileEnv, "256"}});
  ASSERT_EQ(run.results.size(), 5u) << run.context();
  const json limit = limit_event(run, "connections");
  ASSERT_FALSE(limit.is_null()) << run.context();
  const unsigned cap = limit.value("limit_connections", 0u);
  EXPECT_GE(cap, 8u) << limit.dump();
  EXPECT_LT(cap, 40u) << limit.dump();
  unsigned open = 0, refused = 0;
  ASSERT_TRUE(held(run.results[1], &open, &refused)) << run.context();
  EXPECT_EQ(open, cap) << run.context();
  EXPECT_EQ(refused, 40 - cap) << run.context();
  EXPECT_EQ(limit.value("refused", 0u), 40 - cap) << limit.dump();
  EXPECT_EQ(limit.value("open_files", 0u), 256u) << limit.dump();
  EXPECT_EQ(run.results[4], "ok 200 hello, kept alive") << run.context();
  EXPECT_TRUE(limit_event(run, "intercepted_connections").is_null()) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_EQ(web.record().heads.size(), cap + 1) << web.describe();
}

}  // namespace
}  // namespace soyaos::testing
