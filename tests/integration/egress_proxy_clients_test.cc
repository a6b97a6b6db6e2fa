// The Moon proxy with real clients no one here wrote (SPEC.md C7, issue #11): Python's
// urllib, requests and httpx read HTTP_PROXY / HTTPS_PROXY (urllib and requests tunnel with
// `CONNECT host:port HTTP/1.0` and no Host; httpx with HTTP/1.1 and Host); Node's fetch
// ignores them and reaches proxy.allow through the DNS stub and the gateway. Each against
// real HTTPS and HTTP servers on loopback, inside a real Comet, as root and as nobody; and the
// refusals: a host outside proxy.allow, HTTP/1.0 CONNECT to it — what the client saw, the
// violation, exit 3, and that no server saw anything.
//
// curl is not tested here: a Comet executes its runtime's interpreter once and nothing else
// (SPEC C3), so curl cannot run inside one, and curl on the host would not go through a
// Comet's proxy (it listens inside the agent's network namespace). Its request forms
// (CONNECT with Host, absolute-form GET with Proxy-Connection) are what httpx and the probe's
// raw requests send.
#include "egress_fixture.h"

namespace soyaos::testing::egress {
namespace {

class EgressProxyClientsTest : public EgressProxyTest {
 protected:
  // The servers every test uses, named in dns.hosts; proxy.allow lists `allow`.
  void set_moon_for(const std::vector<Allow>& allow) {
    set_proxy_moon({{"api.test", "127.0.0.1"}, {"web.test", "127.0.0.1"}, {"deny.test", "127.0.0.1"}}, allow);
    set_proxy_pack();
  }

  // The fetch fixture (tests/fixtures/fetch), with only the moon-proxy entry.
  std::filesystem::path fetch_pack() {
    auto pack = dir_.copy_from_source("tests/fixtures/fetch", "fetch");
    dir_.write("fetch/soyapack.yaml",
               "soyapack: v0\nname: egress-probe\nversion: 0.1.0\n"
               "agent: {runtime: node, entrypoint: fetch.mjs}\n"
               "capabilities:\n  egress:\n    - {host: moon, port: 3128, protocol: moon-proxy}\n"
               "  fs: {read: [/workdir], write: [/workdir/out]}\n  determinism_tier: read-only\n"
               "resources: {timeout: 20s, write_quota: 1Mi}\n");
    return pack;
  }

  static std::vector<json> network_violations(const ProbeRun& run) {
    std::vector<json> out;
    for (const auto& v : run.violations()) {
      if (v["data"].value("surface", "") == "network") out.push_back(v["data"]);
    }
    return out;
  }
};

TEST_F(EgressProxyClientsTest, UrllibRequestsAndHttpxGetHttpsAndHttpThroughTheProxy) {
  HttpsServer api;
  HttpServer web;
  set_moon_for({{"api.test", api.port(), "https"}, {"web.test", web.port(), "http"}});
  const std::string q = std::to_string(api.port()), p = std::to_string(web.port());
  std::vector<std::string> steps = {"netsteps"};
  for (const std::string client : {"urllib", "requests", "httpx"}) {
    steps.push_back("client_get " + client + " https://api.test:" + q + "/" + client);
    steps.push_back("client_get " + client + " http://web.test:" + p + "/" + client);
  }
  steps.push_back("connect10 api.test " + q);  // the HTTP/1.0 CONNECT without Host, byte for byte
  auto run = probe(steps);
  ASSERT_EQ(run.results.size(), 7u) << run.context();
  for (size_t i = 0; i < 6; i += 2) {
    EXPECT_EQ(run.results[i], "ok 200 hello from api.test:" + q) << i << "\n" << run.context();
    EXPECT_EQ(run.results[i + 1], "ok 200 hello from web.test:" + p) << i + 1 << "\n" << run.context();
  }
  EXPECT_EQ(run.results[6], "ok 200 hello from api.test:" + q) << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();

  // Every client's requests arrived, the https ones inside TLS with SNI api.test.
  ASSERT_TRUE(api.wait_served(4)) << api.describe();  // urllib, requests, httpx, connect10
  ASSERT_TRUE(web.wait_served(3)) << web.describe();
  const auto tls = api.record();
  ASSERT_EQ(tls.sni.size(), 4u) << api.describe();
  for (const auto& sni : tls.sni) EXPECT_EQ(sni, "api.test");
  for (const std::string client : {"urllib", "requests", "httpx"}) {
    bool seen = false;
    for (const auto& head : tls.heads) seen = seen || head.rfind("GET /" + client + " HTTP/1.1\r\n", 0) == 0;
    EXPECT_TRUE(seen) << client << "\n" << api.describe();
  }
  for (const auto& head : web.record().heads) {
    EXPECT_TRUE(contains(head, "\r\nHost: web.test:" + p + "\r\n")) << head;
    EXPECT_FALSE(contains(lower(head), "\r\nproxy-")) << head;
  }
  auto opened = run.of_type("egress_opened");
  ASSERT_EQ(opened.size(), 7u) << run.context();
  for (const auto& e : opened) {
    const auto& d = e["data"];
    EXPECT_EQ(d["via"], "moon-proxy") << d.dump();
    if (d["protocol"] == "https") {
      EXPECT_EQ(d["entry"], "proxy.allow[0]") << d.dump();
    } else {
      EXPECT_EQ(d["entry"], "proxy.allow[1]") << d.dump();
    }
  }
}

TEST_F(EgressProxyClientsTest, OutsideProxyAllowEveryClientGets403AndNothingIsReached) {
  HttpsServer api;
  HttpServer web;
  set_moon_for({{"api.test", api.port(), "https"}});
  const std::string q = std::to_string(api.port()), p = std::to_string(web.port());
  auto run = probe({"netsteps", "client_get urllib https://deny.test:" + q + "/",
                    "client_get requests https://deny.test:" + q + "/", "client_get httpx https://deny.test:" + q + "/",
                    "connect10 deny.test " + q, "client_get urllib http://web.test:" + p + "/",
                    "client_get requests http://web.test:" + p + "/", "client_get httpx http://web.test:" + p + "/"});
  ASSERT_EQ(run.results.size(), 7u) << run.context();
  for (const auto& r : run.results) EXPECT_EQ(r, "http=403") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  size_t connects = 0, plains = 0;
  for (const auto& v : network_violations(run)) {
    EXPECT_EQ(v["errno"], "EACCES") << v.dump();
    EXPECT_EQ(v.value("detail", "").rfind("Moon proxy:", 0), 0u) << v.dump();
    if (v["resource"] == "deny.test:" + q + "/https") ++connects;
    if (v["resource"] == "web.test:" + p + "/http") ++plains;
  }
  EXPECT_EQ(connects, 4u) << run.context();  // urllib, requests, httpx, the raw HTTP/1.0 CONNECT
  EXPECT_EQ(plains, 3u) << run.context();
  expect_untouched(api);
  expect_untouched(web);
}

// Node's fetch ignores HTTPS_PROXY: it resolves api.test itself, which the DNS stub answers
// because proxy.allow names it, and the gateway checks the connection against that entry
// (SNI api.test on its port). A name outside proxy.allow is NXDOMAIN, as for any pack.
TEST_F(EgressProxyClientsTest, NodeFetchIgnoresTheProxyVariablesAndReachesOnlyProxyAllow) {
  HttpsServer api;
  HttpServer web;
  set_moon_for({{"api.test", api.port(), "https"}, {"web.test", web.port(), "http"}});
  const std::string q = std::to_string(api.port()), p = std::to_string(web.port());
  auto run = run_pack(fetch_pack(), {"https://api.test:" + q + "/fetch", "http://web.test:" + p + "/fetch",
                                     "https://deny.test:" + q + "/", "http://web.test:" + q + "/"});
  ASSERT_EQ(run.results.size(), 4u) << run.context();
  EXPECT_EQ(run.results[0], "ok 200 hello from api.test:" + q) << run.context();
  EXPECT_EQ(run.results[1], "ok 200 hello from web.test:" + p) << run.context();
  EXPECT_EQ(run.results[2], "error=ENOTFOUND") << run.context();
  EXPECT_EQ(run.results[3], "error=ECONNREFUSED") << run.context();  // web.test on the https port
  // Node asks for A and AAAA: dns:deny.test may come twice; nothing else of the network.
  for (const auto& v : network_violations(run)) {
    EXPECT_TRUE(v["resource"] == "dns:deny.test" || v["resource"] == "web.test:" + q + "/tcp") << v.dump();
  }
  EXPECT_FALSE(run.violation("dns:deny.test").is_null()) << run.context();
  EXPECT_FALSE(run.violation("web.test:" + q + "/tcp").is_null()) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();

  ASSERT_TRUE(api.wait_served(1)) << api.describe();
  EXPECT_EQ(api.record().sni.at(0), "api.test");
  EXPECT_EQ(api.accepted(), 1) << api.describe();
  auto opened = run.of_type("egress_opened");
  ASSERT_EQ(opened.size(), 2u) << run.context();
  EXPECT_EQ(opened[0]["data"]["entry"], "proxy.allow[0]") << opened[0].dump();
  EXPECT_EQ(opened[0]["data"]["sni"], "api.test") << opened[0].dump();
  EXPECT_EQ(opened[0]["data"]["via"], "moon-proxy") << opened[0].dump();
  EXPECT_EQ(opened[1]["data"]["entry"], "proxy.allow[1]") << opened[1].dump();
}

}  // namespace
}  // namespace soyaos::testing::egress
