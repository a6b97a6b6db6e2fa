// The egress path's second adversarial round (issue #18, and #15's operator-policy finding),
// end to end: each finding's variants tried from inside a real Comet against real servers on
// the host's loopback, with the errno or reset the agent saw, the capability_violation, exit
// 3 and an untouched server; and the allowed counterpart of each. ctest runs these as root
// and (prefix `rootless.`) as nobody.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "egress_fixture.h"

namespace soyaos::testing {
namespace {

// Suites of their own (a fixture class from another translation unit is another class).
using namespace egress;  // NOLINT(google-build-using-namespace): the shared fixture

class EgressHostileTest : public EgressTest {};
class EgressHostileProxyTest : public EgressProxyTest {};

// A reset refusal on an https entry whose detail says `why`.
void expect_https_reset(const ProbeRun& run, const std::string& result, int port, const std::string& why) {
  EXPECT_TRUE(looks_reset(result) || result == "eof") << "not a reset: " << result << "\n" << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  json v = run.violation_where([&](const std::string& r) { return ends_with(r, ":" + std::to_string(port) + "/https"); });
  ASSERT_FALSE(v.is_null()) << run.context();
  EXPECT_EQ(v["surface"], "network") << v.dump();
  EXPECT_EQ(v["errno"], "ECONNRESET") << v.dump();
  EXPECT_TRUE(contains(v.value("detail", ""), why)) << v.dump();
}

// ---- a second ClientHello after a HelloRetryRequest ---------------------------------------

TEST_F(EgressHostileTest, HelloRetryRequestWithTheSameSniCompletesThroughTheGateway) {
  TlsHrrServer tls;
  set_moon({{"tls.test", "127.0.0.1"}});
  set_egress({{"tls.test", tls.port(), "https"}});
  // Python's ssl offers an x25519 share only; the P-256-only server asks again.
  auto run = probe({"tls", "tls.test", std::to_string(tls.port())});
  expect_allowed(run, "ok ping");
  ASSERT_TRUE(tls.wait_served(1)) << tls.describe();
  const auto rec = tls.record();
  EXPECT_EQ(rec.hello_sni, (std::vector<std::string>{"tls.test", "tls.test"})) << "no HelloRetryRequest happened";
  ASSERT_EQ(rec.data.size(), 1u);
  EXPECT_EQ(rec.data[0], "ping");
}

TEST_F(EgressHostileTest, SecondClientHelloNamingAnotherHostIsReset) {
  TlsHrrServer tls;
  set_moon({{"tls.test", "127.0.0.1"}, {"other.test", "127.0.0.1"}});
  set_egress({{"tls.test", tls.port(), "https"}});
  const std::string p = std::to_string(tls.port());
  auto run = probe({"netsteps", "tls_hrr tls.test " + p + " other.test", "tls_hrr tls.test " + p + " -",
                    "tls_hrr tls.test " + p + " tls.test fe0d", "tls_hrr tls.test " + p + " OTHER.test"});
  ASSERT_EQ(run.results.size(), 4u) << run.context();
  for (const auto& r : run.results) expect_https_reset(run, r, tls.port(), "second ClientHello");
  size_t resets = 0;
  for (const auto& v : run.violations()) {
    if (contains(v["data"].value("detail", ""), "second ClientHello")) ++resets;
  }
  EXPECT_EQ(resets, 4u) << run.context();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Only first hellos (naming the entry's host) reached the server, never a second one.
  for (const auto& sni : tls.record().hello_sni) EXPECT_EQ(sni, "tls.test") << tls.describe();
}

TEST_F(EgressHostileTest, SecondClientHelloWithTheSameSniPassesTheCheck) {
  TlsHrrServer tls;
  set_moon({{"tls.test", "127.0.0.1"}});
  set_egress({{"tls.test", tls.port(), "https"}});
  auto run = probe({"tls_hrr", "tls.test", std::to_string(tls.port()), "tls.test"});
  expect_allowed(run, "ok hrr then serverhello");
}

TEST_F(EgressHostileProxyTest, SecondClientHelloInAConnectTunnelIsChecked) {
  TlsHrrServer tls;
  set_proxy_moon({{"tls.test", "127.0.0.1"}, {"other.test", "127.0.0.1"}}, {{"tls.test", tls.port(), "https"}});
  set_proxy_pack();
  const std::string p = std::to_string(tls.port());
  auto run = probe({"netsteps", "proxy_tls_hrr tls.test " + p + " tls.test", "proxy_tls_hrr tls.test " + p + " other.test",
                    "proxy_connect tls.test " + p});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  EXPECT_EQ(run.results[0], "ok hrr then serverhello") << run.context();
  EXPECT_TRUE(looks_reset(run.results[1]) || run.results[1] == "eof") << run.context();
  EXPECT_EQ(run.results[2], "ok ping") << run.context();  // a real client through the HRR
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  json v = run.violation("tls.test:" + p + "/https");
  ASSERT_FALSE(v.is_null()) << run.context();
  EXPECT_EQ(v["errno"], "ECONNRESET") << v.dump();
  EXPECT_EQ(v.value("detail", "").rfind("Moon proxy:", 0), 0u) << v.dump();
  EXPECT_TRUE(contains(v.value("detail", ""), "other.test")) << v.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const auto& sni : tls.record().hello_sni) EXPECT_EQ(sni, "tls.test") << tls.describe();
}

// ---- ECH, its drafts, legacy ESNI, and Chromium's ECH GREASE --------------------------------

TEST_F(EgressHostileTest, EchDraftEchAndEsniCodePointsAreRefusedAndGreaseIsNamed) {
  TlsEchoServer tls;
  set_moon({{"tls.test", "127.0.0.1"}});
  set_egress({{"tls.test", tls.port(), "https"}});
  const std::string p = std::to_string(tls.port());
  auto run = probe({"netsteps", "tls_ech tls.test " + p + " fe0d", "tls_ech tls.test " + p + " ffce",
                    "tls_ech tls.test " + p + " fe0a", "tls_ech tls.test " + p + " fd00"});
  ASSERT_EQ(run.results.size(), 4u) << run.context();
  for (const auto& r : run.results) expect_https_reset(run, r, tls.port(), "GREASE");
  std::string details;
  for (const auto& v : run.violations()) details += v["data"].value("detail", "") + "\n";
  for (const char* code : {"0xfe0d", "0xffce", "0xfe0a", "0xfd00"}) EXPECT_TRUE(contains(details, code)) << details;
  EXPECT_TRUE(contains(details, "ESNI")) << details;
  expect_untouched(tls);
}

// ---- names: canonical once, operator policy on the concrete name ---------------------------

TEST_F(EgressHostileTest, OperatorDenyCoversConcreteNamesUnderADeclaredWildcard) {
  TcpEchoServer echo;
  set_moon({{"secret.pw.test", "127.0.0.1"}, {"open.pw.test", "127.0.0.1"}, {"a.vault.pw.test", "127.0.0.1"}},
           {"secret.pw.test", "\"*.vault.pw.test\""});
  set_egress({{"*.pw.test", echo.port(), "tcp"}});
  const std::string p = std::to_string(echo.port());
  auto run = probe({"netsteps", "tcp_echo secret.pw.test " + p + " x", "dns_raw SECRET.pw.test A",
                    "tcp_echo a.vault.pw.test " + p + " x", "dns_raw Secret.PW.test A", "tcp_echo open.pw.test " + p + " hi"});
  ASSERT_EQ(run.results.size(), 5u) << run.context();
  EXPECT_EQ(run.results[0].rfind("gai=", 0), 0u) << run.context();
  EXPECT_EQ(run.results[2].rfind("gai=", 0), 0u) << run.context();
  EXPECT_TRUE(contains(run.results[1], "NXDOMAIN")) << run.context();
  EXPECT_TRUE(contains(run.results[3], "NXDOMAIN")) << run.context();
  EXPECT_EQ(run.results[4], "ok hi") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  for (const char* name : {"dns:secret.pw.test", "dns:a.vault.pw.test"}) {
    json v = run.violation(name);
    ASSERT_FALSE(v.is_null()) << name << "\n" << run.context();
    EXPECT_EQ(v["errno"], "NXDOMAIN") << v.dump();
    EXPECT_EQ(v["manifest_entry"], "capabilities.egress[0]") << v.dump();
    EXPECT_TRUE(contains(v.value("detail", ""), "egress.deny")) << v.dump();
  }
  ASSERT_TRUE(echo.wait_served(1)) << echo.describe();
  EXPECT_EQ(echo.accepted(), 1) << "a denied name reached the server: " << echo.describe();
}

TEST_F(EgressHostileProxyTest, ConnectTargetsAreCanonicalBeforeEgressDeny) {
  TlsEchoServer tls;
  set_proxy_moon({{"secret.pw.test", "127.0.0.1"}, {"open.pw.test", "127.0.0.1"}},
                 {{"*.pw.test", tls.port(), "https"}}, {"secret.pw.test"});
  set_proxy_pack();
  const std::string p = std::to_string(tls.port());
  // Zone-file escapes the system resolver would decode into secret.pw.test, other
  // spellings of it, and a percent-escape; then an allowed name.
  const std::string h10 = " " + p + " open.pw.test hostas";
  auto run = probe({"netsteps", "proxy_connect secre\\t.pw.test" + h10, "proxy_connect \\115ecret.pw.test" + h10,
                    "proxy_connect SECRET.pw.test." + h10, "proxy_connect secre%74.pw.test" + h10,
                    "proxy_connect 0x7f.1" + h10, "proxy_connect open.pw.test " + p});
  ASSERT_EQ(run.results.size(), 6u) << run.context();
  std::string details;
  for (const auto& v : run.violations()) {
    EXPECT_EQ(v["data"]["errno"], "EACCES") << v.dump();
    details += v["data"].value("detail", "") + "\n";
  }
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(run.results[i], "http=403") << i << "\n" << details << run.context();
  EXPECT_EQ(run.results[5], "ok ping") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  EXPECT_TRUE(contains(details, "backslash")) << details;
  EXPECT_TRUE(contains(details, "egress.deny")) << details;
  EXPECT_TRUE(contains(details, "percent")) << details;
  EXPECT_TRUE(contains(details, "numeric")) << details;
  ASSERT_TRUE(tls.wait_served(1)) << tls.describe();
  EXPECT_EQ(tls.record().sni, (std::vector<std::string>{"open.pw.test"})) << tls.describe();
}

// ---- nested wildcards on different ports: no false violation --------------------------------

TEST_F(EgressHostileTest, NestedWildcardsOnDifferentPortsBothWork) {
  TcpEchoServer wide, narrow;
  set_moon({{"x.a.wild.test", "127.0.0.1"}, {"y.wild.test", "127.0.0.1"}});
  set_egress({{"*.wild.test", wide.port(), "tcp"}, {"*.a.wild.test", narrow.port(), "tcp"}});
  const std::string w = std::to_string(wide.port()), n = std::to_string(narrow.port());
  auto run = probe({"netsteps", "tcp_echo x.a.wild.test " + n + " one", "tcp_echo x.a.wild.test " + w + " two",
                    "tcp_echo y.wild.test " + w + " three"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  EXPECT_EQ(run.results[0], "ok one") << run.context();
  EXPECT_EQ(run.results[1], "ok two") << run.context();
  EXPECT_EQ(run.results[2], "ok three") << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  // The narrow entry's port is still refused for a name only below the wide one.
  auto refused = probe({"tcp_echo", "y.wild.test", n, "four"});
  expect_network_violation(refused, "y.wild.test:" + n + "/tcp", "ECONNREFUSED");
}

// ---- IP-literal https entries: an SNI naming a host is refused ------------------------------

TEST_F(EgressHostileTest, HttpsLiteralEntryRefusesAnSniNamingAHost) {
  TlsEchoServer tls;
  set_moon({}, {}, {"127.0.0.0/8"});
  set_egress({{"127.0.0.1", tls.port(), "https"}});
  const std::string p = std::to_string(tls.port());
  auto run = probe({"netsteps", "tls 127.0.0.1 " + p + " -", "tls 127.0.0.1 " + p + " secret.pw.test"});
  ASSERT_EQ(run.results.size(), 2u) << run.context();
  EXPECT_EQ(run.results[0], "ok ping") << run.context();
  expect_https_reset(run, run.results[1], tls.port(), "names a host");
  std::string details;
  for (const auto& e : run.violations()) details += e["data"].value("detail", "") + "\n";
  EXPECT_TRUE(contains(details, "names a host")) << details;
  for (const auto& sni : tls.record().sni) EXPECT_NE(sni, "secret.pw.test") << tls.describe();
}

// ---- http entries: another host in the head, h2c --------------------------------------------

TEST_F(EgressHostileTest, HttpHeadsNamingAnotherHostOrH2cAreReset) {
  HttpServer web;
  set_moon({{"web.test", "127.0.0.1"}});
  set_egress({{"web.test", web.port(), "http"}});
  const std::string p = std::to_string(web.port());
  auto run = probe({"netsteps", "raw_send web.test " + p + " xfh", "raw_send web.test " + p + " fwd_host",
                    "raw_send web.test " + p + " slashslash", "raw_send web.test " + p + " h2c",
                    "http_get web.test " + p + " web.test"});
  ASSERT_EQ(run.results.size(), 5u) << run.context();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(looks_reset(run.results[i]) || run.results[i] == "eof") << run.context();
  EXPECT_EQ(run.results[4], "ok 200 hello from web.test") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  std::string details;
  for (const auto& v : run.violations()) {
    EXPECT_EQ(v["data"]["errno"], "ECONNRESET") << v.dump();
    EXPECT_EQ(v["data"]["resource"], "web.test:" + p + "/http") << v.dump();
    details += v["data"].value("detail", "") + "\n";
  }
  for (const char* why : {"X-Forwarded-Host", "Forwarded", "//", "h2c"}) EXPECT_TRUE(contains(details, why)) << details;
  ASSERT_TRUE(web.wait_served(1)) << web.describe();
  EXPECT_EQ(web.accepted(), 1) << web.describe();
}

// ---- refusals from a socket bound to a port the supervisor serves ---------------------------

TEST_F(EgressHostileTest, RefusalsFromAServicePortAreReported) {
  SentinelListener sentinel("0.0.0.0");
  set_moon({});
  set_egress({});
  const std::string s = std::to_string(sentinel.port());
  // 15001 is the gateway's port (on 127.0.0.1); the agent binds it on its netns's own
  // address (a loopback source cannot leave lo), twice.
  auto run = probe({"netsteps", "connect_from 10.254.254.1 15001 " + leak_ip_ + " " + s,
                    "connect_from 10.254.254.1 15001 " + leak_ip_ + " " + s});
  ASSERT_EQ(run.results.size(), 2u) << run.context();
  for (const auto& r : run.results) EXPECT_EQ(r, "errno=ECONNREFUSED") << run.context();
  expect_network_violation(run, leak_ip_ + ":" + s + "/tcp", "ECONNREFUSED", "connect");
  size_t n = 0;
  for (const auto& v : run.violations()) n += v["data"].value("resource", "") == leak_ip_ + ":" + s + "/tcp";
  EXPECT_GE(n, 2u) << run.context();
  expect_untouched(sentinel);
}

}  // namespace
}  // namespace soyaos::testing
