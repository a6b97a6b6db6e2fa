// The Moon proxy end to end (SPEC.md C7, issues #5 and #11): the pack declares only
// {host: moon, port: 3128, protocol: moon-proxy}; the operator's proxy.allow (moon.yaml) says
// what it may reach. Real requests from the probe inside a Comet through the proxy to real
// servers on loopback; every refusal checked for what the agent saw, the violation, exit 3.
// ctest runs every test twice: as root and (prefix `rootless.`) as nobody.
#include "egress_fixture.h"

namespace soyaos::testing::egress {
namespace {

TEST_F(EgressProxyTest, PlainGetThroughTheProxyReachesTheHttpServerInOriginForm) {
  HttpServer web;
  TlsEchoServer tls;
  set_proxy_moon({{"web.test", "127.0.0.1"}, {"tls.test", "127.0.0.1"}},
                 {{"web.test", web.port(), "http"}, {"tls.test", tls.port(), "https"}});
  set_proxy_pack();
  const std::string p = std::to_string(web.port());
  auto run = probe({"netsteps", "env_get HTTP_PROXY HTTPS_PROXY http_proxy https_proxy",
                    "proxy_get http://web.test:" + p + "/", "proxy_raw http://web.test:" + p + "/raw?x=1"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  EXPECT_EQ(run.results[0], "ok http://moon:3128,http://moon:3128,http://moon:3128,http://moon:3128")
      << run.context();
  EXPECT_EQ(run.results[1], "ok 200 hello from web.test:" + p) << run.context();
  EXPECT_EQ(run.results[2], "ok 200 hello from web.test:" + p) << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();

  // The server saw origin form, Connection: close, no Proxy-* field.
  ASSERT_TRUE(web.wait_served(2)) << web.describe();
  auto rec = web.record();
  ASSERT_EQ(rec.heads.size(), 2u) << web.describe();
  EXPECT_EQ(rec.heads[0].rfind("GET / HTTP/1.1\r\n", 0), 0u) << rec.heads[0];
  EXPECT_EQ(rec.heads[1].rfind("GET /raw?x=1 HTTP/1.1\r\n", 0), 0u) << rec.heads[1];
  for (const auto& head : rec.heads) {
    EXPECT_TRUE(contains(head, "\r\nConnection: close\r\n")) << head;
    EXPECT_FALSE(contains(lower(head), "\r\nproxy-")) << head;
    EXPECT_FALSE(contains(head, "c2VjcmV0")) << "the proxy credentials went upstream:\n" << head;
    EXPECT_FALSE(contains(head, "http://")) << head;
    EXPECT_TRUE(contains(head, "\r\nHost: web.test:" + p + "\r\n")) << head;
  }
  EXPECT_TRUE(contains(rec.heads[1], "\r\nX-Probe: raw\r\n")) << rec.heads[1];
  EXPECT_EQ(tls.accepted(), 0) << tls.describe();

  // egress_opened / egress_closed through the proxy: proxy.allow[0], via moon-proxy.
  auto opened = run.of_type("egress_opened");
  auto closed = run.of_type("egress_closed");
  ASSERT_EQ(opened.size(), 2u) << run.context();
  ASSERT_EQ(closed.size(), 2u) << run.context();
  for (const auto& e : opened) {
    const auto& d = e["data"];
    EXPECT_EQ(d["via"], "moon-proxy") << d.dump();
    EXPECT_EQ(d["entry"], "proxy.allow[0]") << d.dump();
    EXPECT_EQ(d["host"], "web.test") << d.dump();
    EXPECT_TRUE(same_port(d["port"], web.port())) << d.dump();
    EXPECT_EQ(d["protocol"], "http") << d.dump();
    EXPECT_TRUE(contains(d.value("address", ""), "127.0.0.1")) << d.dump();
  }
  for (const auto& e : closed) {
    const auto& d = e["data"];
    EXPECT_EQ(d["via"], "moon-proxy") << d.dump();
    EXPECT_EQ(d["entry"], "proxy.allow[0]") << d.dump();
    EXPECT_GT(d.value("bytes_out", 0), 20) << d.dump();
    EXPECT_GT(d.value("bytes_in", 0), 20) << d.dump();
  }
  // The agent resolved only `moon` (via /etc/hosts): web.test never went to the stub.
  for (const auto& e : run.of_type("dns_query")) EXPECT_NE(e["data"].value("name", ""), "web.test") << e.dump();
}

TEST_F(EgressProxyTest, ConnectTunnelsTlsWithTheEntrysSni) {
  HttpServer web;
  TlsEchoServer tls;
  set_proxy_moon({{"web.test", "127.0.0.1"}, {"tls.test", "127.0.0.1"}},
                 {{"web.test", web.port(), "http"}, {"tls.test", tls.port(), "https"}});
  set_proxy_pack();
  auto run = probe({"proxy_connect", "tls.test", std::to_string(tls.port()), "tls.test"});
  expect_allowed(run, "ok ping");
  ASSERT_TRUE(tls.wait_served(1)) << tls.describe();
  auto rec = tls.record();
  EXPECT_EQ(rec.accepted, 1);
  ASSERT_EQ(rec.sni.size(), 1u);
  EXPECT_EQ(rec.sni[0], "tls.test");
  ASSERT_EQ(rec.data.size(), 1u);
  EXPECT_EQ(rec.data[0], "ping");
  EXPECT_EQ(web.accepted(), 0) << web.describe();
  auto opened = run.of_type("egress_opened");
  ASSERT_EQ(opened.size(), 1u) << run.context();
  const auto& o = opened[0]["data"];
  EXPECT_EQ(o["via"], "moon-proxy") << o.dump();
  EXPECT_EQ(o["entry"], "proxy.allow[1]") << o.dump();
  EXPECT_EQ(o["host"], "tls.test") << o.dump();
  EXPECT_EQ(o["protocol"], "https") << o.dump();
  EXPECT_TRUE(same_port(o["port"], tls.port())) << o.dump();
  auto closed = run.of_type("egress_closed");
  ASSERT_EQ(closed.size(), 1u) << run.context();
  EXPECT_EQ(closed[0]["data"]["via"], "moon-proxy");
  EXPECT_GT(closed[0]["data"].value("bytes_out", 0), 4) << closed[0].dump();
  EXPECT_GT(closed[0]["data"].value("bytes_in", 0), 4) << closed[0].dump();
}

// docs/network.md, Events: egress_opened carries `sni` for https, as at the gateway. Through
// the proxy the tunnel's ClientHello is checked after egress_opened was emitted, so the SNI
// that was checked should appear on the connection's events (egress_opened or egress_closed).
TEST_F(EgressProxyTest, ConnectTunnelEventsNameTheCheckedSni) {
  TlsEchoServer tls;
  set_proxy_moon({{"tls.test", "127.0.0.1"}}, {{"tls.test", tls.port(), "https"}});
  set_proxy_pack();
  auto run = probe({"proxy_connect", "tls.test", std::to_string(tls.port()), "tls.test"});
  expect_allowed(run, "ok ping");
  auto opened = run.of_type("egress_opened");
  auto closed = run.of_type("egress_closed");
  ASSERT_EQ(opened.size(), 1u) << run.context();
  ASSERT_EQ(closed.size(), 1u) << run.context();
  const std::string sni = opened[0]["data"].value("sni", closed[0]["data"].value("sni", ""));
  EXPECT_EQ(sni, "tls.test") << opened[0].dump() << "\n" << closed[0].dump();
}

// A plain proxy request whose Host field names another site than its absolute URI
// (virtual-host fronting: the allowed upstream's address, another site's name). RFC 9112
// §3.2.2: a proxy MUST replace Host with the target's authority; the gateway's http check
// requires Host == the entry's name for the same reason. Safe outcomes: refused (403/400),
// or forwarded with Host rewritten to web.test:P. The server must never see Host: evil.test.
TEST_F(EgressProxyTest, PlainRequestCannotNameAnotherHostInItsHostField) {
  HttpServer web;
  set_proxy_moon({{"web.test", "127.0.0.1"}, {"evil.test", "127.0.0.1"}}, {{"web.test", web.port(), "http"}});
  set_proxy_pack();
  const std::string p = std::to_string(web.port());
  auto run = probe({"proxy_raw", "http://web.test:" + p + "/", "evil.test:" + p});
  EXPECT_TRUE(run.result == "http=403" || run.result == "http=400" ||
              run.result == "ok 200 hello from web.test:" + p)
      << run.context();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const auto& head : web.record().heads) {
    EXPECT_FALSE(contains(lower(head), "\r\nhost: evil.test")) << "the upstream got another site's Host:\n" << head;
  }
}

// The upstream rules are the gateway's (docs/network.md, C7): a proxy.allow entry whose
// name the system resolver maps to loopback (`localhost`, not in dns.hosts) is refused at
// connect time (rebinding), the server sees nothing, and the run reports it.
TEST_F(EgressProxyTest, ALoopbackUpstreamAnswerIsRefusedThroughTheProxy) {
  HttpServer web;
  set_proxy_moon({}, {{"localhost", web.port(), "http"}});
  set_proxy_pack();
  const std::string p = std::to_string(web.port());
  auto run = probe({"proxy_get", "http://localhost:" + p + "/"});
  EXPECT_TRUE(run.result == "http=403" || run.result == "http=502" || looks_reset(run.result) || run.result == "eof")
      << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  json v = run.violation_where([](const std::string& r) { return contains(r, "localhost") && contains(r, "127.0.0.1"); });
  ASSERT_FALSE(v.is_null()) << run.context();
  EXPECT_EQ(v["surface"], "network") << v.dump();
  EXPECT_EQ(v["manifest_entry"], "proxy.allow[0]") << v.dump();
  expect_untouched(web);
}

TEST_F(EgressProxyTest, RequestsOutsideProxyAllowAre403AndReachNothing) {
  HttpServer web;
  TlsEchoServer tls;
  HttpServer denied;
  SentinelListener sentinel("127.0.0.1");
  set_proxy_moon({{"web.test", "127.0.0.1"}, {"tls.test", "127.0.0.1"}, {"other.test", "127.0.0.1"},
                  {"deny.test", "127.0.0.1"}},
                 {{"web.test", web.port(), "http"}, {"tls.test", tls.port(), "https"},
                  {"deny.test", denied.port(), "http"}},
                 {"deny.test"});
  set_proxy_pack();
  const std::string p = std::to_string(web.port()), q = std::to_string(tls.port());
  const std::string s = std::to_string(sentinel.port()), d = std::to_string(denied.port());
  auto run = probe({"netsteps",
                    "proxy_get http://other.test:" + p + "/",   // host not in proxy.allow
                    "proxy_get http://web.test:" + s + "/",     // allowed host, wrong port
                    "proxy_connect web.test " + p,              // CONNECT to an http-only entry
                    "proxy_get http://tls.test:" + q + "/",     // plain request to an https entry
                    "proxy_get http://deny.test:" + d + "/",    // egress.deny beats proxy.allow
                    "proxy_get http://127.0.0.1:" + p + "/",    // a literal for an allowed name's address
                    "proxy_connect 169.254.169.254 443 -",      // the metadata service
                    "proxy_get http://web.test:" + p + "/"});   // and the proxy still serves
  ASSERT_EQ(run.results.size(), 8u) << run.context();
  expect_proxy_refusal(run, run.results[0], "other.test:" + p + "/http", "not in the operator's proxy.allow");
  expect_proxy_refusal(run, run.results[1], "web.test:" + s + "/http", "another port or protocol");
  expect_proxy_refusal(run, run.results[2], "web.test:" + p + "/https", "another port or protocol");
  expect_proxy_refusal(run, run.results[3], "tls.test:" + q + "/http", "another port or protocol");
  expect_proxy_refusal(run, run.results[4], "deny.test:" + d + "/http", "egress.deny");
  expect_proxy_refusal(run, run.results[5], "127.0.0.1:" + p + "/http");
  expect_proxy_refusal(run, run.results[6], "169.254.169.254:443/https");
  EXPECT_EQ(run.results[7], "ok 200 hello from web.test:" + p) << run.context();
  EXPECT_EQ(run.violations().size(), 7u) << run.context();
  // Only the last, allowed request reached a server.
  ASSERT_TRUE(web.wait_served(1)) << web.describe();
  EXPECT_EQ(web.accepted(), 1) << web.describe();
  expect_untouched(tls);
  expect_untouched(denied);
  expect_untouched(sentinel);
}

TEST_F(EgressProxyTest, ConnectWithAnotherSniIsResetBeforeAnyHandshakeUpstream) {
  HttpServer web;
  TlsEchoServer tls;
  set_proxy_moon({{"web.test", "127.0.0.1"}, {"tls.test", "127.0.0.1"}, {"other.test", "127.0.0.1"}},
                 {{"web.test", web.port(), "http"}, {"tls.test", tls.port(), "https"}});
  set_proxy_pack();
  const std::string q = std::to_string(tls.port());
  auto run = probe({"netsteps", "proxy_connect tls.test " + q + " other.test", "proxy_connect tls.test " + q + " -",
                    "proxy_connect tls.test " + q + " tls.test plain"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  for (const auto& r : run.results) EXPECT_TRUE(looks_reset(r) || r == "eof") << r << "\n" << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  json v = run.violation("tls.test:" + q + "/https");
  ASSERT_FALSE(v.is_null()) << run.context();
  EXPECT_EQ(v["surface"], "network") << v.dump();
  EXPECT_EQ(v["errno"], "ECONNRESET") << v.dump();
  EXPECT_EQ(v["manifest_entry"], "proxy.allow[1]") << v.dump();
  EXPECT_EQ(v.value("detail", "").rfind("Moon proxy:", 0), 0u) << v.dump();
  EXPECT_TRUE(contains(v.value("detail", ""), "other.test")) << v.dump();
  size_t resets = 0;
  for (const auto& e : run.violations()) {
    if (e["data"].value("resource", "") == "tls.test:" + q + "/https" && e["data"]["errno"] == "ECONNRESET") ++resets;
  }
  EXPECT_EQ(resets, 3u) << run.context();
  // The proxy connects upstream before the tunnel's first bytes, but no byte of the
  // refused ClientHello (nor the plaintext) may reach the server: no SNI, no data.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto rec = tls.record();
  for (const auto& sni : rec.sni) EXPECT_TRUE(sni.empty()) << "a refused ClientHello reached the server: " << sni;
  for (const auto& data : rec.data) EXPECT_TRUE(data.empty()) << "tunnel bytes reached the server: " << data;
  expect_untouched(web);
}

// A client that ignores the proxy variables (Node's fetch, SPEC C7) still gets through, but
// only to proxy.allow and only with its checks: proxy.allow's names resolve (to fake
// addresses) and the gateway checks the connection against the proxy.allow entry (Host here,
// SNI for https). Other names stay NXDOMAIN; literals and other ports stay refused.
TEST_F(EgressProxyTest, WithoutTheProxyVariablesOnlyProxyAllowIsReachable) {
  HttpServer web;
  set_proxy_moon({{"web.test", "127.0.0.1"}, {"other.test", "127.0.0.1"}}, {{"web.test", web.port(), "http"}});
  set_proxy_pack();
  const std::string p = std::to_string(web.port());
  auto run = probe({"netsteps", "http_get web.test " + p, "resolve other.test", "http_get web.test " + p + " evil.test:" + p,
                    "http_get 127.0.0.1 " + p, "http_get " + leak_ip_ + " " + p, "resolve moon"});
  ASSERT_EQ(run.results.size(), 6u) << run.context();
  EXPECT_EQ(run.results[0], "ok 200 hello from web.test:" + p) << run.context();
  EXPECT_EQ(run.results[1], "gai=EAI_NONAME") << run.context();
  EXPECT_TRUE(looks_reset(run.results[2]) || run.results[2] == "eof") << run.context();
  EXPECT_EQ(run.results[3], "errno=ECONNREFUSED") << run.context();
  EXPECT_EQ(run.results[4], "errno=ECONNREFUSED") << run.context();
  EXPECT_EQ(run.results[5], "ok 127.0.0.1") << run.context();
  expect_network_violation(run, "dns:other.test", "NXDOMAIN");
  expect_network_violation(run, "web.test:" + p + "/http", "ECONNRESET");
  EXPECT_EQ(run.violation("web.test:" + p + "/http")["manifest_entry"], "proxy.allow[0]");
  expect_network_violation(run, "127.0.0.1:" + p + "/tcp", "ECONNREFUSED", "connect");
  expect_network_violation(run, leak_ip_ + ":" + p + "/tcp", "ECONNREFUSED", "connect");
  auto opened = run.of_type("egress_opened");
  ASSERT_EQ(opened.size(), 1u) << run.context();
  EXPECT_EQ(opened[0]["data"]["entry"], "proxy.allow[0]") << opened[0].dump();
  EXPECT_EQ(opened[0]["data"]["via"], "moon-proxy") << opened[0].dump();
  ASSERT_TRUE(web.wait_served(1)) << web.describe();
  EXPECT_EQ(web.accepted(), 1) << web.describe();  // the wrong Host never reached it
}

// Every refusal is a violation, malformed requests included (SPEC C7): 400, errno EPROTO,
// the resource names the request ("moon-proxy:" and its first line, escaped).
TEST_F(EgressProxyTest, MalformedProxyRequestsAre400ViolationsAndTheProxyStaysUp) {
  HttpServer web;
  set_proxy_moon({{"web.test", "127.0.0.1"}}, {{"web.test", web.port(), "http"}});
  set_proxy_pack();
  const std::string p = std::to_string(web.port());
  // Straight to moon:3128 with raw payloads: garbage, a PROXY header, a 20 KiB head, an
  // origin-form request (not a proxy request); then a normal request.
  auto run = probe({"netsteps", "raw_send moon 3128 garbage", "raw_send moon 3128 proxy_v1", "big_head moon 3128 20",
                    "http_get moon 3128", "proxy_get http://web.test:" + p + "/"});
  ASSERT_EQ(run.results.size(), 5u) << run.context();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(run.results[i].rfind("ok HTTP/1.1 400", 0) == 0 || looks_reset(run.results[i]) ||
                run.results[i] == "eof")
        << i << ": " << run.results[i] << "\n" << run.context();
  }
  EXPECT_EQ(run.results[3].rfind("ok 400 ", 0), 0u) << run.context();
  EXPECT_EQ(run.results[4], "ok 200 hello from web.test:" + p) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  ASSERT_EQ(run.violations().size(), 4u) << run.context();
  for (const auto& e : run.violations()) {
    const auto& v = e["data"];
    EXPECT_EQ(v["surface"], "network") << v.dump();
    EXPECT_EQ(v["errno"], "EPROTO") << v.dump();
    EXPECT_EQ(v.value("resource", "").rfind("moon-proxy:", 0), 0u) << v.dump();
    EXPECT_EQ(v.value("detail", "").rfind("Moon proxy:", 0), 0u) << v.dump();
    EXPECT_EQ(v["manifest_entry"], "capabilities.egress[0]") << v.dump();
  }
  EXPECT_FALSE(run.violation("moon-proxy:\\x00\\x01\\x02\\xff garbage \\xfe").is_null()) << run.context();
  EXPECT_FALSE(run.violation("moon-proxy:PROXY TCP4 10.254.254.1 127.0.0.1 40000 22").is_null()) << run.context();
  EXPECT_FALSE(run.violation("moon-proxy:GET / HTTP/1.1").is_null()) << run.context();
  ASSERT_TRUE(web.wait_served(1));
  EXPECT_EQ(web.accepted(), 1) << web.describe();
}

}  // namespace
}  // namespace soyaos::testing::egress
