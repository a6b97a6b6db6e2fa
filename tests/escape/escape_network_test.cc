// Escape suite: the network (C6, C7) from inside real Comets; see escape_test.cc.
#include "escape_fixture.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- network (C6, C7) ---------------------------------------------------------------------
//
// Host-side listeners that must see nothing: TCP on 0.0.0.0 (the host's non-loopback
// address and its loopback), TCP on [::] when the host has IPv6, TCP on 127.0.0.1 behind
// each declared entry (an https entry, an http entry, and a `localhost` tcp entry whose
// upstream answer is the host's loopback: rebinding), a UDP socket on 0.0.0.0 and a host
// abstract unix socket. They are never accepted from during the run: the kernel completes
// any connection into the backlog, so a non-blocking accept() afterwards finds a leak.

class HostListener {
 public:
  HostListener(int family, int type, const char* address) {
    fd_ = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      ::inet_pton(AF_INET6, address, &a->sin6_addr);
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      ::inet_pton(AF_INET, address, &a->sin_addr);
      len = sizeof *a;
    }
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || (type == SOCK_STREAM && ::listen(fd_, 64) != 0)) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    len = sizeof ss;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    stream_ = type == SOCK_STREAM;
  }
  ~HostListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  HostListener(const HostListener&) = delete;
  HostListener& operator=(const HostListener&) = delete;
  [[nodiscard]] bool ok() const { return fd_ >= 0; }
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] std::string port_s() const { return std::to_string(port_); }
  // What reached it, if anything ("" = nothing).
  [[nodiscard]] std::string reached() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stream_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) return "";
      char buf[256] = {};
      ssize_t n = ::recv(c, buf, sizeof buf - 1, 0);
      ::close(c);
      return "a connection" + (n > 0 ? std::string(": ") + std::string(buf, static_cast<size_t>(n)) : "");
    }
    char buf[256] = {};
    ssize_t n = ::recv(fd_, buf, sizeof buf - 1, MSG_DONTWAIT);
    return n >= 0 ? "a datagram: " + std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  bool stream_ = true;
};

class EscapeNetworkTest : public EscapeTest {
 protected:
  void SetUp() override {
    EscapeTest::SetUp();
    if (IsSkipped()) return;
    host_ip_ = host_ipv4_address();
    if (host_ip_.empty()) host_ip_ = "127.0.0.1";
    auto home = dir_.path() / "home";
    fs::create_directories(home);
    fs::permissions(home, fs::perms::all);
    extra_env_["SOYAOS_HOME"] = home.string();
    abstract_ = "soyaos-escape-net-" + std::to_string(::getpid());
    abs_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(abs_fd_, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, abstract_.data(), abstract_.size());
    auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_.size());
    ASSERT_EQ(::bind(abs_fd_, reinterpret_cast<sockaddr*>(&a), alen), 0);
    ASSERT_EQ(::listen(abs_fd_, 8), 0);
    for (auto* l : {&any_, &https_, &http_, &localhost_, &udp_}) ASSERT_TRUE(l->ok());
  }

  void TearDown() override {
    // Nothing reached any host-side listener, whatever the test asserted.
    for (auto [name, l] : std::initializer_list<std::pair<const char*, const HostListener*>>{
             {"TCP 0.0.0.0", &any_}, {"TCP 127.0.0.1 (https entry)", &https_},
             {"TCP 127.0.0.1 (http entry)", &http_}, {"TCP 127.0.0.1 (localhost entry)", &localhost_},
             {"UDP 0.0.0.0", &udp_}, {"TCP [::]", &any6_}}) {
      if (l->ok()) {
        EXPECT_EQ(l->reached(), "") << "the host listener " << name << " was reached";
      }
    }
    if (abs_fd_ >= 0) {
      EXPECT_LT(::accept(abs_fd_, nullptr, nullptr), 0) << "a connection reached the host abstract socket";
      ::close(abs_fd_);
    }
    EscapeTest::TearDown();
  }

  void set_network(const std::string& egress_yaml, const std::string& tier) {
    dir_.write("pack/soyapack.yaml", "soyapack: v0\nname: escape-attack\nversion: 0.1.0\n"
                                     "agent: {runtime: python3, entrypoint: attack.py}\n"
                                     "capabilities:\n  egress:" + egress_yaml +
                                         "\n  fs: {read: [/workdir], write: [/workdir/out]}\n"
                                         "  determinism_tier: " + tier +
                                         "\nresources: {timeout: 60s, write_quota: 1Mi}\n");
    dir_.write("home/moon.yaml", "dns:\n  hosts:\n    allowed.test: 127.0.0.1\n");
  }

  // A network violation with this resource and errno.
  static bool has_violation(const AttackRun& run, const std::string& resource, const std::string& err) {
    for (const auto& v : run.violations("network")) {
      const auto& d = v["data"];
      if (d.value("resource", "") == resource && d.value("errno", "") == err) return true;
    }
    return false;
  }

  std::string host_ip_;
  std::string abstract_;
  int abs_fd_ = -1;
  HostListener any_{AF_INET, SOCK_STREAM, "0.0.0.0"};
  HostListener any6_{AF_INET6, SOCK_STREAM, "::"};
  HostListener https_{AF_INET, SOCK_STREAM, "127.0.0.1"};
  HostListener http_{AF_INET, SOCK_STREAM, "127.0.0.1"};
  HostListener localhost_{AF_INET, SOCK_STREAM, "127.0.0.1"};
  HostListener udp_{AF_INET, SOCK_DGRAM, "0.0.0.0"};
};

#define EXPECT_RESET(run, name)                                                                          \
  EXPECT_TRUE((run).get(name) == "errno=ECONNRESET" || (run).get(name) == "errno=EPIPE")                   \
      << (name) << " was not reset: " << (run).get(name) << "\n" << (run).context()

TEST_F(EscapeNetworkTest, NetworkEscapesReachNothingOnTheHost) {
  set_network("\n    - {host: allowed.test, port: " + https_.port_s() + ", protocol: https}" +
                  "\n    - {host: allowed.test, port: " + http_.port_s() + ", protocol: http}" +
                  "\n    - {host: localhost, port: " + localhost_.port_s() + ", protocol: tcp}",
              "side-effect");
  const auto start = std::chrono::steady_clock::now();
  auto run = attack({"net", host_ip_, any_.port_s(), https_.port_s(), http_.port_s(), localhost_.port_s(),
                     udp_.port_s(), abstract_});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
  // Refused by the netns's rules: ECONNREFUSED (C6).
  for (const char* c : {"net.v4_host_ip", "net.v4_loopback", "net.v4_loopback_other", "net.v4_zero", "net.v4_public",
                        "net.v4_private_10", "net.v4_private_172", "net.v4_private_192", "net.v4_cgnat",
                        "net.metadata", "net.metadata_v6", "net.sandbox_own_addr", "net.fake_unassigned",
                        "net.v6_loopback", "net.v6_literal", "net.mptcp_host", "net.gateway_direct",
                        "net.gateway_direct_v6", "net.allowed_wrong_port", "net.dns_8888_tcp", "net.doh_1111",
                        "net.dot_1111", "net.doh_v6", "net.fastopen_host", "net.still_refused"}) {
    EXPECT_CASE(run, c, "errno=ECONNREFUSED");
  }
  EXPECT_REFUSED(run, "net.v6_mapped_host");
  EXPECT_REFUSED(run, "net.sctp_host");  // EPROTONOSUPPORT without the module, else refused by the rules
  // Declared host and port, wrong protocol: the gateway resets (C6).
  for (const char* c : {"net.https_plaintext", "net.https_sni_mismatch", "net.https_no_sni", "net.https_sni_suffix",
                        "net.http_host_mismatch", "net.http_duplicate_host", "net.http_tls", "net.http_absolute_uri",
                        "net.http_proxy_header", "net.http_connect", "net.rebind_localhost"}) {
    EXPECT_RESET(run, c);
  }
  // DNS: nothing but A/AAAA for declared names; nothing forwarded.
  for (const char* c : {"net.dns_unlisted", "net.dns_exfil_label", "net.dns_exfil_long", "net.dns_tcp_unlisted"}) {
    EXPECT_CASE(run, c, "ok NXDOMAIN");
  }
  for (const char* c : {"net.dns_txt", "net.dns_any", "net.dns_null", "net.dns_axfr_tcp", "net.dns_tcp_txt"}) {
    EXPECT_CASE(run, c, "ok REFUSED");
  }
  // UDP anywhere but a udp entry: EPERM; sockets and ioctls that need CAP_NET_*: EPERM.
  for (const char* c : {"net.allowed_udp", "net.dns_8888_udp", "net.dns_v6_server", "net.dns_host_resolver",
                        "net.raw_inet", "net.raw_inet6", "net.inet_sock_packet", "net.ioctl_siocaddrt",
                        "net.ioctl_siocsifflags_lo_down", "net.ioctl_siocsifaddr", "net.so_mark",
                        "net.ip_transparent", "net.sendmmsg_host", "net.udp_host", "net.udp_loopback",
                        "net.udplite_host", "net.udp_multicast", "net.udp_broadcast"}) {
    EXPECT_CASE(run, c, "errno=EPERM");
  }
  // Families outside AF_UNIX/AF_INET/AF_INET6: EAFNOSUPPORT (seccomp, C5).
  for (const char* c : {"net.packet_raw", "net.packet_dgram", "net.netlink_netfilter", "net.netlink_sock_diag",
                        "net.vsock", "net.af_alg", "net.socketpair_inet"}) {
    EXPECT_CASE(run, c, "errno=EAFNOSUPPORT");
  }
  // NETLINK_ROUTE opens (getifaddrs); what it cannot do is EscapeTest.NetlinkRoute*.
  EXPECT_CASE(run, "net.netlink_route", "ok bound");
  for (const char* c : {"net.icmp_ping", "net.icmp6_ping"}) {
    EXPECT_TRUE(run.get(c) == "errno=EACCES" || run.get(c) == "errno=EPERM") << c << ": " << run.get(c);
  }
  EXPECT_REFUSED(run, "net.proc_sys_ip_forward");
  EXPECT_REFUSED(run, "net.abstract_unix");
  EXPECT_EQ(run.get("net.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  // Each attempt is reported (C8) with what the agent saw.
  const std::string any = any_.port_s(), hs = https_.port_s(), ht = http_.port_s(), lh = localhost_.port_s();
  const std::vector<std::pair<std::string, std::string>> expected = {
      {host_ip_ + ":" + any + "/tcp", "ECONNREFUSED"},
      {"127.0.0.1:" + any + "/tcp", "ECONNREFUSED"},
      {"169.254.169.254:80/tcp", "ECONNREFUSED"},
      {"[fd00:ec2::254]:80/tcp", "ECONNREFUSED"},
      {"10.0.0.1:80/tcp", "ECONNREFUSED"},
      {"[::1]:" + any + "/tcp", "ECONNREFUSED"},
      {"127.0.0.1:15001/tcp", "ECONNREFUSED"},
      {"[::1]:15001/tcp", "ECONNREFUSED"},
      {"allowed.test:" + any + "/tcp", "ECONNREFUSED"},
      {"allowed.test:" + hs + "/udp", "EPERM"},
      {"allowed.test:" + hs + "/https", "ECONNRESET"},
      {"allowed.test:" + ht + "/http", "ECONNRESET"},
      {"localhost[127.0.0.1]:" + lh + "/tcp", "ECONNRESET"},
      {"dns:evil.test", "NXDOMAIN"},
      {"dns:6f70657261746f722d736563726574.allowed.test", "NXDOMAIN"},
      {"dns:allowed.test", "REFUSED"},
      {"8.8.8.8:53/udp", "EPERM"},
      {"8.8.8.8:53/tcp", "ECONNREFUSED"},
      {"[2001:4860:4860::8888]:53/udp", "EPERM"},
      {"1.1.1.1:443/tcp", "ECONNREFUSED"},
      {"1.1.1.1:853/tcp", "ECONNREFUSED"},
      {"[2606:4700:4700::1111]:443/tcp", "ECONNREFUSED"},
      {host_ip_ + ":" + udp_.port_s() + "/udp", "EPERM"},
      {"224.0.0.251:5353/udp", "EPERM"},
  };
  for (const auto& [resource, err] : expected) {
    EXPECT_TRUE(has_violation(run, resource, err)) << "no violation " << resource << " " << err << "\n"
                                                   << run.output.err.substr(0, 6000);
  }
  for (const auto& v : run.violations("network")) {
    EXPECT_EQ(v["data"]["pack"], "escape-attack") << v.dump();
    EXPECT_TRUE(v["data"].contains("manifest_entry")) << v.dump();
  }
  EXPECT_GE(run.violations("network").size(), 50u) << run.context();
}

TEST_F(EscapeNetworkTest, EgressStarStillKeepsTheHostOut) {
  set_network(" \"*\"", "unrestricted");
  auto run = attack({"netstar", host_ip_, any_.port_s(), udp_.port_s()});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  // The sandbox's loopback is not redirected: refused by the rules.
  EXPECT_CASE(run, "star.loopback", "errno=ECONNREFUSED");
  EXPECT_CASE(run, "star.v6_loopback", "errno=ECONNREFUSED");
  // The gateway takes the rest and refuses the host's own address, private and metadata
  // ranges and a loopback upstream answer (rebinding): reset, never connected.
  for (const char* c : {"star.host_ip", "star.metadata", "star.private_10", "star.rebind_localhost"}) {
    EXPECT_RESET(run, c);
  }
  EXPECT_CASE(run, "star.udp_host", "errno=EPERM");
  EXPECT_CASE(run, "star.dns_txt", "ok REFUSED");
  EXPECT_EQ(run.get("star.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  EXPECT_TRUE(has_violation(run, host_ip_ + ":" + any_.port_s() + "/tcp", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "169.254.169.254:80/tcp", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "localhost[127.0.0.1]:" + any_.port_s() + "/tcp", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, host_ip_ + ":" + udp_.port_s() + "/udp", "EPERM")) << run.output.err;
}

}  // namespace
}  // namespace soyaos::testing
