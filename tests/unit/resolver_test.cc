// Upstream resolution for the egress gateway (src/supervisor/resolver.h) against a real
// DNS server on 127.0.0.1 (UDP and TCP on one random port, in a thread), answering with
// the project's own reply builders (network/dns_message.h): answers, NXDOMAIN, silence,
// truncation (then TCP), garbage, a reply with the wrong id; dns.hosts; the system resolver.
#include "supervisor/resolver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "network/dns_message.h"

namespace soyaos::supervisor {
namespace {

using Bytes = std::vector<uint8_t>;
using network::DnsQuery;

class FakeDns {
 public:
  enum class Mode { answer, nxdomain, silent, truncate, garbage, wrong_id_first, servfail };

  explicit FakeDns(Mode mode) : mode_(mode) {
    for (int attempt = 0; attempt < 50 && !tcp_; ++attempt) {
      udp_ = UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(udp_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) continue;
      socklen_t len = sizeof sa;
      if (::getsockname(udp_.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) continue;
      port_ = ntohs(sa.sin_port);
      // TCP on the same port number (DNS servers listen on both); retry when taken.
      UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::bind(tcp.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) continue;
      if (::listen(tcp.get(), 8) != 0) continue;
      tcp_ = std::move(tcp);
    }
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      stop_r_ = UniqueFd(p[0]);
      stop_w_ = UniqueFd(p[1]);
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeDns() {
    (void)::write(stop_w_.get(), "x", 1);
    thread_.join();
  }
  FakeDns(const FakeDns&) = delete;
  FakeDns& operator=(const FakeDns&) = delete;

  [[nodiscard]] bool ok() const { return tcp_.valid() && stop_w_.valid(); }
  [[nodiscard]] policy::OperatorNetwork network() const {
    policy::OperatorNetwork n;
    n.dns_upstream = policy::DnsUpstream{*policy::parse_ip("127.0.0.1"), port_};
    return n;
  }

  std::vector<std::array<uint8_t, 4>> a{{192, 0, 2, 1}, {192, 0, 2, 2}};
  std::vector<std::array<uint8_t, 16>> aaaa{{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  std::atomic<int> udp_queries{0}, tcp_queries{0};

 private:
  Mode mode_;
  UniqueFd udp_, tcp_, stop_r_, stop_w_;
  uint16_t port_ = 0;
  std::thread thread_;

  Bytes reply(const DnsQuery& q, bool over_tcp) {
    switch (mode_) {
      case Mode::nxdomain: return network::dns_error(q, network::Rcode::nxdomain);
      case Mode::servfail: return network::dns_error(q, network::Rcode::servfail);
      case Mode::truncate:
        // Over UDP: room for the question only, so the builder sets TC and drops answers.
        return network::dns_answer(q, a, aaaa, 60, over_tcp ? network::kDnsMaxMessage : 12 + q.qname_wire.size() + 4 + 11);
      case Mode::garbage: {
        Bytes b = network::dns_answer(q, a, aaaa, 60);
        b.resize(12 + q.qname_wire.size() + 4 + 3);  // an answer record cut after 3 bytes
        b[6] = 0;
        b[7] = 1;
        return b;
      }
      default: return network::dns_answer(q, a, aaaa, 60);
    }
  }

  void serve() {
    for (;;) {
      pollfd fds[3] = {{stop_r_.get(), POLLIN, 0}, {udp_.get(), POLLIN, 0}, {tcp_.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      if ((fds[1].revents & POLLIN) != 0) serve_udp();
      if ((fds[2].revents & POLLIN) != 0) serve_tcp();
    }
  }

  void serve_udp() {
    std::array<uint8_t, 4096> buf{};
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const ssize_t n = ::recvfrom(udp_.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) return;
    auto q = network::parse_dns_query(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
    if (!q) return;
    ++udp_queries;
    if (mode_ == Mode::silent) return;
    auto send = [&](const Bytes& b) {
      (void)::sendto(udp_.get(), b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    };
    if (mode_ == Mode::wrong_id_first) {
      DnsQuery other = *q;
      other.id = static_cast<uint16_t>(q->id + 1);
      Bytes spoof = network::dns_answer(other, std::vector<std::array<uint8_t, 4>>{{203, 0, 113, 66}}, {}, 60);
      send(spoof);
    }
    send(reply(*q, false));
  }

  void serve_tcp() {
    UniqueFd c(::accept4(tcp_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) return;
    timeval tv{2, 0};
    (void)::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    Bytes buf;
    for (;;) {
      const network::DnsTcpFrame f = network::parse_dns_tcp_frame(buf);
      if (f.status == network::ParseStatus::complete) {
        auto q = network::parse_dns_query(f.message);
        if (!q) return;
        ++tcp_queries;
        auto framed = network::dns_tcp_frame(reply(*q, true));
        if (framed) (void)::send(c.get(), framed->data(), framed->size(), MSG_NOSIGNAL);
        return;
      }
      if (f.status == network::ParseStatus::invalid) return;
      std::array<uint8_t, 1024> chunk{};
      const ssize_t n = ::recv(c.get(), chunk.data(), chunk.size(), 0);
      if (n <= 0) return;
      buf.insert(buf.end(), chunk.begin(), chunk.begin() + n);
    }
  }
};

std::vector<std::string> texts(const std::vector<ResolvedAddress>& addrs) {
  std::vector<std::string> out;
  for (const auto& a : addrs) out.push_back(policy::to_string(a.addr));
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Resolver, UpstreamAnswerIpv4First) {
  FakeDns dns(FakeDns::Mode::answer);
  ASSERT_TRUE(dns.ok());
  auto r = resolve_host(dns.network(), "echo.test");
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(texts(*r), (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "2001:db8::1"}));
  for (const auto& a : *r) EXPECT_FALSE(a.from_hosts_map);
  EXPECT_EQ(dns.udp_queries, 2);  // A and AAAA
  EXPECT_EQ(dns.tcp_queries, 0);
}

TEST(Resolver, UpstreamNxdomainIsEnoent) {
  FakeDns dns(FakeDns::Mode::nxdomain);
  ASSERT_TRUE(dns.ok());
  auto r = resolve_host(dns.network(), "nope.test");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_NE(r.error().message.find("nope.test"), std::string::npos) << r.error().message;
}

TEST(Resolver, UpstreamNoAddressIsEnoent) {
  FakeDns dns(FakeDns::Mode::answer);
  ASSERT_TRUE(dns.ok());
  dns.a.clear();
  dns.aaaa.clear();
  auto r = resolve_host(dns.network(), "empty.test");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
}

TEST(Resolver, UpstreamServfailIsEio) {
  FakeDns dns(FakeDns::Mode::servfail);
  ASSERT_TRUE(dns.ok());
  auto r = resolve_host(dns.network(), "broken.test");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EIO);
  EXPECT_NE(r.error().message.find("SERVFAIL"), std::string::npos) << r.error().message;
}

TEST(Resolver, SilentUpstreamTimesOutAfterOneRetry) {
  FakeDns dns(FakeDns::Mode::silent);
  ASSERT_TRUE(dns.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = resolve_host(dns.network(), "slow.test");
  const double took = seconds_since(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ETIMEDOUT);
  EXPECT_NE(r.error().message.find("slow.test"), std::string::npos);
  // Two rounds of 2 s: not sooner, and not much later.
  EXPECT_GE(took, 3.9);
  EXPECT_LT(took, 6.0);
  EXPECT_EQ(dns.udp_queries, 4);  // A and AAAA, each sent twice
}

TEST(Resolver, TruncatedAnswerFallsBackToTcp) {
  FakeDns dns(FakeDns::Mode::truncate);
  ASSERT_TRUE(dns.ok());
  auto r = resolve_host(dns.network(), "big.test");
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(texts(*r), (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "2001:db8::1"}));
  EXPECT_EQ(dns.tcp_queries, 2);
}

TEST(Resolver, GarbageAnswerIsEio) {
  FakeDns dns(FakeDns::Mode::garbage);
  ASSERT_TRUE(dns.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = resolve_host(dns.network(), "garbage.test");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EIO);
  EXPECT_NE(r.error().message.find("malformed"), std::string::npos) << r.error().message;
  EXPECT_LT(seconds_since(t0), 1.5);
}

TEST(Resolver, ReplyWithTheWrongIdIsIgnored) {
  FakeDns dns(FakeDns::Mode::wrong_id_first);
  ASSERT_TRUE(dns.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = resolve_host(dns.network(), "echo.test");
  ASSERT_TRUE(r.ok()) << r.error().describe();
  // Not 203.0.113.66 (the mismatched reply), and no retry was needed.
  EXPECT_EQ(texts(*r), (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "2001:db8::1"}));
  EXPECT_LT(seconds_since(t0), 1.5);
}

TEST(Resolver, HostsMapWinsOverUpstreamAndIsFinal) {
  FakeDns dns(FakeDns::Mode::answer);
  ASSERT_TRUE(dns.ok());
  policy::OperatorNetwork n = dns.network();
  n.dns_hosts["echo.test"] = {*policy::parse_ip("::1"), *policy::parse_ip("127.0.0.1"), *policy::parse_ip("::1")};
  auto r = resolve_host(n, "echo.test");
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(texts(*r), (std::vector<std::string>{"127.0.0.1", "::1"}));
  for (const auto& a : *r) EXPECT_TRUE(a.from_hosts_map);
  EXPECT_EQ(dns.udp_queries, 0);

  // Other names still go upstream.
  auto other = resolve_host(n, "other.test");
  ASSERT_TRUE(other.ok()) << other.error().describe();
  EXPECT_EQ(other->size(), 3u);
  EXPECT_EQ(dns.udp_queries, 2);
}

TEST(Resolver, InvalidNameIsRefusedBeforeAsking) {
  FakeDns dns(FakeDns::Mode::answer);
  ASSERT_TRUE(dns.ok());
  auto r = resolve_host(dns.network(), "a..b");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, EINVAL);
  EXPECT_EQ(dns.udp_queries, 0);
}

TEST(Resolver, SystemResolverFindsLocalhost) {
  const policy::OperatorNetwork system;  // dns.upstream: system
  auto r = resolve_host(system, "localhost");
  ASSERT_TRUE(r.ok()) << r.error().describe();
  ASSERT_FALSE(r->empty());
  for (const auto& a : *r) {
    EXPECT_TRUE(policy::is_private_address(a.addr)) << policy::to_string(a.addr);  // loopback
    EXPECT_FALSE(a.from_hosts_map);
  }
  // IPv4 first.
  bool seen_v6 = false;
  for (const auto& a : *r) {
    if (a.addr.v6) seen_v6 = true;
    else EXPECT_FALSE(seen_v6);
  }
}

TEST(Resolver, SystemResolverNoSuchName) {
  const policy::OperatorNetwork system;
  auto r = resolve_host(system, "no-such-host.invalid");  // RFC 6761: never resolves
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().err == ENOENT || r.error().err == ETIMEDOUT) << r.error().describe();
}

}  // namespace
}  // namespace soyaos::supervisor
