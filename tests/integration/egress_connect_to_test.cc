// egress.connect_to (SPEC.md C6a, issue #11 "Local development against mock servers"): the
// operator maps "HOST:PORT" to "ADDR:PORT", as curl's --connect-to; the pack still declares
// the real destination (api.test:443) and every check on the agent's side is unchanged (DNS
// stub, SNI, Host); only where the gateway connects changes — to a loopback server on an
// ephemeral port, so rootless developers need no port 443. And an unreachable upstream says
// why: in egress_closed and on stderr. ctest runs every test as root and as nobody.
#include <netinet/in.h>
#include <sys/socket.h>

#include "egress_fixture.h"

namespace soyaos::testing::egress {
namespace {

class EgressConnectToTest : public EgressTest {
 protected:
  // moon.yaml with egress.connect_to (and optionally dns.hosts / proxy.allow lines).
  void set_connect_to(const std::map<std::string, std::string>& connect_to,
                      const std::map<std::string, std::string>& hosts = {}, const std::string& extra = "") {
    std::string y = moon_yaml(hosts, {});
    y += "  connect_to:";
    for (const auto& [from, to] : connect_to) y += "\n    \"" + from + "\": \"" + to + "\"";
    y += "\n" + extra;
    dir_.write("home/moon.yaml", y);
  }

  static std::string to(const NetServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

  // The one egress_opened of the run.
  static json opened(const ProbeRun& run) {
    auto all = run.of_type("egress_opened");
    EXPECT_EQ(all.size(), 1u) << run.context();
    return all.empty() ? json() : all[0]["data"];
  }
};

// A port nothing listens on: bound, then closed (the kernel does not hand it out again
// at once).
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

TEST_F(EgressConnectToTest, TcpEntryOnPort443ReachesALocalServerOnItsOwnPort) {
  TcpEchoServer echo;
  set_connect_to({{"api.test:443", to(echo)}});  // no dns.hosts: connect_to alone, trusted as given
  set_egress({{"api.test", 443, "tcp"}});
  auto run = probe({"tcp_echo", "api.test", "443", "hello-mock"});
  expect_allowed(run, "ok hello-mock");
  ASSERT_TRUE(echo.wait_served(1)) << echo.describe();
  EXPECT_EQ(echo.record().data.at(0), "hello-mock");
  const json o = opened(run);
  EXPECT_EQ(o["host"], "api.test") << o.dump();
  EXPECT_TRUE(same_port(o["port"], 443)) << o.dump();  // what the agent asked for
  EXPECT_EQ(o["address"], "127.0.0.1") << o.dump();
  EXPECT_EQ(o["connect_to"], to(echo)) << o.dump();    // where the gateway went
  auto closed = run.of_type("egress_closed");
  ASSERT_EQ(closed.size(), 1u) << run.context();
  EXPECT_EQ(closed[0]["data"]["connect_to"], to(echo));
}

TEST_F(EgressConnectToTest, HttpsKeepsTheSniCheck) {
  TlsEchoServer tls;
  set_connect_to({{"api.test:443", to(tls)}});
  set_egress({{"api.test", 443, "https"}});
  auto run = probe({"netsteps", "tls api.test 443", "tls api.test 443 other.test"});
  ASSERT_EQ(run.results.size(), 2u) << run.context();
  EXPECT_EQ(run.results[0], "ok ping") << run.context();
  expect_reset_violation(run, run.results[1], 443, "https");
  ASSERT_TRUE(tls.wait_served(1)) << tls.describe();
  auto rec = tls.record();
  ASSERT_EQ(rec.sni.size(), 1u) << tls.describe();  // the refused ClientHello never left
  EXPECT_EQ(rec.sni[0], "api.test");
  EXPECT_EQ(opened(run)["sni"], "api.test");
}

TEST_F(EgressConnectToTest, HttpKeepsTheHostCheckAndForwardsTheHostAsSent) {
  HttpServer web;
  set_connect_to({{"web.test:80", to(web)}});
  set_egress({{"web.test", 80, "http"}});
  auto run = probe({"http_get", "web.test", "80"});
  expect_allowed(run, "ok 200 hello from web.test:80");
  ASSERT_TRUE(web.wait_served(1)) << web.describe();
  EXPECT_TRUE(contains(web.record().heads.at(0), "\r\nHost: web.test:80\r\n")) << web.describe();
}

TEST_F(EgressConnectToTest, UdpAndIpLiteralEntriesToo) {
  UdpEchoServer udp;
  TcpEchoServer echo;
  set_connect_to({{"udp.test:5300", to(udp)}, {"192.0.2.7:7", to(echo)}});
  set_egress({{"udp.test", 5300, "udp"}, {"192.0.2.7", 7, "tcp"}});
  auto run = probe({"netsteps", "udp_echo udp.test 5300 dgram-1", "tcp_echo 192.0.2.7 7 literal"});
  ASSERT_EQ(run.results.size(), 2u) << run.context();
  EXPECT_EQ(run.results[0], "ok dgram-1") << run.context();
  EXPECT_EQ(run.results[1], "ok literal") << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  EXPECT_EQ(udp.record().data.at(0), "dgram-1");
  for (const auto& e : run.of_type("egress_opened")) {
    const auto& d = e["data"];
    EXPECT_EQ(d["connect_to"], d["protocol"] == "udp" ? to(udp) : to(echo)) << d.dump();
  }
}

// connect_to says where to connect, never what is allowed: an undeclared name is still
// NXDOMAIN, a declared name on another port is still refused.
TEST_F(EgressConnectToTest, GrantsNothingThePackDidNotDeclare) {
  TcpEchoServer echo;
  set_connect_to({{"api.test:443", to(echo)}, {"other.test:443", to(echo)}});
  set_egress({{"api.test", 8443, "tcp"}});
  auto run = probe({"netsteps", "tcp_echo other.test 443 x", "tcp_echo api.test 443 x"});
  ASSERT_EQ(run.results.size(), 2u) << run.context();
  EXPECT_EQ(run.results[0], "gai=EAI_NONAME") << run.context();
  EXPECT_EQ(run.results[1], "errno=ECONNREFUSED") << run.context();
  expect_network_violation(run, "dns:other.test", "NXDOMAIN");
  expect_network_violation(run, "api.test:443/tcp", "ECONNREFUSED", "connect");
  expect_untouched(echo);
}

// An unreachable upstream is not the agent's violation, but it must say why: the agent sees
// a reset; egress_closed and stderr name the address, the port and the error.
TEST_F(EgressConnectToTest, UnreachableUpstreamSaysWhyInTheEventAndOnStderr) {
  const int port = closed_port();
  ASSERT_NE(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  set_connect_to({{"api.test:443", target}});
  set_egress({{"api.test", 443, "tcp"}});
  auto run = probe({"tcp_echo", "api.test", "443", "x"});
  EXPECT_TRUE(looks_reset(run.result) || run.result == "eof") << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();  // the probe handled the error itself
  EXPECT_TRUE(run.violations().empty()) << run.context();
  auto closed = run.of_type("egress_closed");
  ASSERT_EQ(closed.size(), 1u) << run.context();
  const auto& d = closed[0]["data"];
  EXPECT_EQ(d["reason"], "upstream unreachable") << d.dump();
  EXPECT_EQ(d["error"], "connect " + target + ": Connection refused") << d.dump();
  EXPECT_EQ(d["connect_to"], target) << d.dump();
  EXPECT_TRUE(contains(run.output.err, "soyaos: egress: upstream unreachable: api.test:443/tcp: connect " + target +
                                           ": Connection refused\n"))
      << run.output.err;
}

// Through the Moon proxy the same map applies (a CONNECT to api.test:443 reaches the mock).
TEST_F(EgressConnectToTest, TheMoonProxyConnectsThereToo) {
  TlsEchoServer tls;
  set_connect_to({{"api.test:443", to(tls)}}, {},
                 "proxy:\n  allow:\n    - {host: api.test, port: 443, protocol: https}\n");
  set_egress({{"moon", 3128, "moon-proxy"}});
  auto run = probe({"proxy_connect", "api.test", "443"});
  expect_allowed(run, "ok ping");
  ASSERT_TRUE(tls.wait_served(1)) << tls.describe();
  EXPECT_EQ(tls.record().sni.at(0), "api.test");
  const json o = opened(run);
  EXPECT_EQ(o["via"], "moon-proxy") << o.dump();
  EXPECT_EQ(o["connect_to"], to(tls)) << o.dump();
}

}  // namespace
}  // namespace soyaos::testing::egress
