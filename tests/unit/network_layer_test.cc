// The network layer, applied alone in a forked child that enters a fresh user+network
// namespace (as root, and rootless as nobody): redirected pairs reach the gateway with their
// original destination, everything else is refused with the documented errno and reported
// through NFLOG, and once the capabilities are dropped nothing can rewrite the rules.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libmnl/libmnl.h>
#include <linux/capability.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "comet/network.h"
#include "common/unique_fd.h"

namespace soyaos::comet {
namespace {

constexpr int kSkipStatus = 77;

[[noreturn]] void child_fail(int report, int line, const std::string& what, long rc, int err) {
  char buf[1024];
  int n = err == 0 ? std::snprintf(buf, sizeof buf, "line %d: %s\n", line, what.c_str())
                   : std::snprintf(buf, sizeof buf, "line %d: %s -> rc=%ld errno=%d (%s)\n", line, what.c_str(),
                                   rc, err, strerrorname_np(err) ? strerrorname_np(err) : "?");
  if (n > 0) (void)!::write(report, buf, static_cast<size_t>(std::min(n, static_cast<int>(sizeof buf) - 1)));
  ::_exit(1);
}
[[noreturn]] void child_skip(int report, const std::string& why) {
  (void)!::write(report, why.data(), why.size());
  ::_exit(kSkipStatus);
}
#define CHILD_EXPECT_ERRNO(call, want)                                                   \
  do {                                                                                   \
    errno = 0;                                                                           \
    long rc_ = static_cast<long>(call);                                                  \
    if (rc_ != -1 || errno != (want)) child_fail(report, __LINE__, #call, rc_, errno);   \
  } while (0)
#define CHILD_EXPECT_OK(call)                                                            \
  do {                                                                                   \
    errno = 0;                                                                           \
    long rc_ = static_cast<long>(call);                                                  \
    if (rc_ < 0) child_fail(report, __LINE__, #call, rc_, errno);                        \
  } while (0)
#define CHILD_CHECK(cond, what)                                                          \
  do {                                                                                   \
    if (!(cond)) child_fail(report, __LINE__, what, 0, 0);                               \
  } while (0)

struct ChildOutcome {
  bool skipped = false;
  std::string failure;  // empty on success
};

ChildOutcome run_in_child(const std::function<void(int)>& body) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {false, "pipe2 failed"};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    body(p[1]);
    ::_exit(0);
  }
  ::close(p[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSkipStatus) return {true, msg};
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && msg.empty()) return {};
  return {false, msg + " (status " + std::to_string(status) + ")"};
}

EgressRule rule(const char* addr, uint16_t port, uint8_t proto) {
  EgressRule r;
  r.v6 = std::strchr(addr, ':') != nullptr;
  EXPECT_EQ(::inet_pton(r.v6 ? AF_INET6 : AF_INET, addr, r.addr.data()), 1) << addr;
  r.port = port;
  r.proto = proto;
  return r;
}

NetworkPlan test_plan() {
  NetworkPlan plan;
  plan.redirect_tcp = {rule("198.18.0.1", 443, IPPROTO_TCP), rule("2001:db8::5", 443, IPPROTO_TCP)};
  plan.allow_udp = {rule("9.9.9.9", 53, IPPROTO_UDP), rule("2001:db8::53", 5353, IPPROTO_UDP)};
  plan.gateway_port = 15001;
  plan.udp_relay_port = 15101;
  plan.nflog_group = 7;
  return plan;
}

sockaddr_storage sockaddr_of(const char* addr, uint16_t port) {
  sockaddr_storage ss{};
  if (std::strchr(addr, ':') != nullptr) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    ::inet_pton(AF_INET6, addr, &s6->sin6_addr);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    ::inet_pton(AF_INET, addr, &s4->sin_addr);
  }
  return ss;
}
socklen_t sockaddr_len(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}
std::string sockaddr_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(s6->sin6_port));
  }
  const auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &s4->sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(s4->sin_port));
}

// connect() on a fresh blocking socket; returns 0 or -1 with errno, the socket in *out.
int connect_to(const char* addr, uint16_t port, int type, UniqueFd* out) {
  sockaddr_storage ss = sockaddr_of(addr, port);
  UniqueFd fd(::socket(ss.ss_family, type | SOCK_CLOEXEC, 0));
  if (!fd) return -1;
  int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&ss), sockaddr_len(ss));
  int saved = errno;
  *out = std::move(fd);
  errno = saved;
  return rc;
}

int send_datagram(const UniqueFd& fd, const char* addr, uint16_t port, const char* data) {
  sockaddr_storage ss = sockaddr_of(addr, port);
  return static_cast<int>(::sendto(fd.get(), data, std::strlen(data), 0, reinterpret_cast<const sockaddr*>(&ss),
                                   sockaddr_len(ss)));
}

bool readable(const UniqueFd& fd, int timeout_ms) {
  pollfd p{fd.get(), POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1;
}

// Becomes nobody (rootless) or stays root, then enters a fresh user+network namespace with
// only the calling id mapped, then chroots to an empty directory: the layer must need
// nothing from the filesystem (in the Comet it runs after pivot_root).
void enter_sandbox_namespaces(int report, bool rootless, const std::string& empty_root) {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (rootless && uid == 0) {
    uid = gid = 65534;
    CHILD_EXPECT_OK(::setgroups(0, nullptr));
    CHILD_EXPECT_OK(::setresgid(gid, gid, gid));
    CHILD_EXPECT_OK(::setresuid(uid, uid, uid));
    // The id change cleared dumpable, which would make /proc/self/*_map root's.
    CHILD_EXPECT_OK(::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
  }
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
    if (errno == EPERM || errno == ENOSPC || errno == EINVAL) {
      child_skip(report, std::string("user+network namespaces unavailable: ") + std::strerror(errno));
    }
    child_fail(report, __LINE__, "unshare(CLONE_NEWUSER|CLONE_NEWNET)", -1, errno);
  }
  auto write_file = [&](const char* path, const std::string& text) {
    UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
    if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      child_fail(report, __LINE__, std::string("write ") + path + " " + text, -1, errno);
    }
  };
  write_file("/proc/self/setgroups", "deny");
  write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
  write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
  CHILD_EXPECT_OK(::chroot(empty_root.c_str()));
  CHILD_EXPECT_OK(::chdir("/"));
}

void drop_all_capabilities(int report) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  // Raw capset: effective, permitted and inheritable all empty.
  CHILD_EXPECT_OK(::syscall(SYS_capset, &header, data));
}

// Waits up to 3 s for NFLOG to report `want` ("1.2.3.4:80/tcp"); collects everything seen.
bool wait_refused(const UniqueFd& nflog, const std::string& want, std::vector<std::string>* seen) {
  for (int i = 0; i < 30; ++i) {
    auto got = read_nflog(nflog);
    if (!got.ok()) {
      seen->push_back("error: " + got.error().describe());
      return false;
    }
    if (got->overrun) seen->push_back("overrun");
    for (const auto& p : got->packets) seen->push_back(to_string(p));
    for (const auto& s : *seen) {
      if (s == want) return true;
    }
    (void)readable(nflog, 100);
  }
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// One netlink request; returns the errno of its ack (0 when acknowledged as done).
int netlink_errno(int protocol, const std::function<size_t(char*)>& build) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol));
  if (!fd) return errno;
  alignas(nlmsghdr) static char buf[8192];
  std::memset(buf, 0, sizeof buf);
  size_t len = build(buf);
  if (::send(fd.get(), buf, len, 0) < 0) return errno;
  for (;;) {
    if (!readable(fd, 2000)) return ETIMEDOUT;
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) return errno;
    int rc = mnl_cb_run(buf, static_cast<size_t>(n), 0, 0, nullptr, nullptr);
    if (rc == MNL_CB_ERROR) return errno;
    if (rc == MNL_CB_STOP) return 0;
  }
}

void put_nfgen(nlmsghdr* nlh, uint8_t family, uint16_t res_id) {
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = family;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = htons(res_id);
}

// An nf_tables transaction deleting table `name` of family inet.
size_t build_delete_table(char* buf, const char* name) {
  char* at = buf;
  nlmsghdr* begin = mnl_nlmsg_put_header(at);
  begin->nlmsg_type = NFNL_MSG_BATCH_BEGIN;
  begin->nlmsg_flags = NLM_F_REQUEST;
  begin->nlmsg_seq = 1;
  put_nfgen(begin, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  at += begin->nlmsg_len;
  nlmsghdr* del = mnl_nlmsg_put_header(at);
  del->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE;
  del->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  del->nlmsg_seq = 2;
  put_nfgen(del, NFPROTO_INET, 0);
  mnl_attr_put_strz(del, NFTA_TABLE_NAME, name);
  at += del->nlmsg_len;
  nlmsghdr* end = mnl_nlmsg_put_header(at);
  end->nlmsg_type = NFNL_MSG_BATCH_END;
  end->nlmsg_flags = NLM_F_REQUEST;
  end->nlmsg_seq = 3;
  put_nfgen(end, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  at += end->nlmsg_len;
  return static_cast<size_t>(at - buf);
}

size_t build_delete_default_route(char* buf) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_DELROUTE;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = 1;
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = AF_INET;
  rtm->rtm_table = RT_TABLE_MAIN;
  rtm->rtm_scope = RT_SCOPE_NOWHERE;
  return nlh->nlmsg_len;
}

size_t build_nflog_unbind(char* buf, uint16_t group) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = 1;
  put_nfgen(nlh, AF_UNSPEC, group);
  nfulnl_msg_config_cmd cmd{};
  cmd.command = NFULNL_CFG_CMD_UNBIND;
  mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof cmd, &cmd);
  return nlh->nlmsg_len;
}

// ---- pure functions ---------------------------------------------------------------------

TEST(NetworkRuleset, MatchesGolden) {
  const std::string text = nft_ruleset(test_plan());
  const std::string path = std::string(SOYAOS_SOURCE_DIR) + "/tests/golden/network/ruleset.nft";
  if (const char* update = std::getenv("SOYAOS_UPDATE_GOLDEN"); update && *update == '1') {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path;
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_EQ(golden.str(), text)
      << "The sandbox's nftables ruleset changed. If intended, review the diff and regenerate with:\n"
         "  SOYAOS_UPDATE_GOLDEN=1 build-netns/tests/unit_tests --gtest_filter=NetworkRuleset.MatchesGolden\n"
         "then update docs/network-layer.md to match.";
}

TEST(NetworkRuleset, EmptyPlanRefusesEverything) {
  NetworkPlan plan;
  const std::string text = nft_ruleset(plan);
  EXPECT_EQ(text.find("redirect"), std::string::npos);
  EXPECT_EQ(text.find("ip6 daddr ::1"), std::string::npos);  // no IPv6 gateway listener
  EXPECT_NE(text.find("policy drop;"), std::string::npos);
  EXPECT_NE(text.find("log group 7\n\t\tmeta l4proto tcp reject with tcp reset\n"), std::string::npos);
  EXPECT_TRUE(validate_network_plan(plan).ok());
}

TEST(NetworkPlanValidation, RejectsIncoherentPlans) {
  EXPECT_TRUE(validate_network_plan(test_plan()).ok()) << validate_network_plan(test_plan()).error().describe();
  auto rejects = [](const std::function<void(NetworkPlan&)>& edit, const char* fragment) {
    NetworkPlan plan = test_plan();
    edit(plan);
    Status s = validate_network_plan(plan);
    EXPECT_FALSE(s.ok()) << fragment;
    if (!s.ok()) {
      EXPECT_EQ(s.error().err, EINVAL);
      EXPECT_NE(s.error().message.find(fragment), std::string::npos) << s.error().message;
    }
  };
  rejects([](NetworkPlan& p) { p.gateway_port = 0; }, "gateway port 0");
  rejects([](NetworkPlan& p) { p.gateway_port = 53; }, "port 53");
  rejects([](NetworkPlan& p) { p.udp_relay_port = 15100; p.gateway_port = 15101; }, "gateway port");
  rejects([](NetworkPlan& p) { p.udp_relay_port = 65535; }, "out of range");
  rejects([](NetworkPlan& p) { p.udp_relay_port = 52; }, "port 53");
  rejects([](NetworkPlan& p) { p.nflog_group = 70000; }, "NFLOG group");
  rejects([](NetworkPlan& p) { p.redirect_tcp[0].proto = IPPROTO_UDP; }, "198.18.0.1:443");
  rejects([](NetworkPlan& p) { p.allow_udp[1].port = 0; }, "[2001:db8::53]:0");
  rejects([](NetworkPlan& p) { p.fake_v4_cidr = "198.18.0.0"; }, "not an IPv4 CIDR");
  rejects([](NetworkPlan& p) { p.fake_v4_cidr = "198.18.0.0/33"; }, "not an IPv4 CIDR");
  rejects([](NetworkPlan& p) { p.fake_v4_cidr = "10.0.0.0/8"; }, "overlaps");
  rejects([](NetworkPlan& p) { p.fake_v4_cidr = "0.0.0.0/0"; }, "overlaps");
}

TEST(NetworkRefusedPacket, ToString) {
  RefusedPacket p;
  ::inet_pton(AF_INET, "1.2.3.4", p.daddr.data());
  p.proto = IPPROTO_TCP;
  p.dport = 80;
  EXPECT_EQ(to_string(p), "1.2.3.4:80/tcp");
  p.proto = IPPROTO_ICMP;
  EXPECT_EQ(to_string(p), "1.2.3.4/icmp");
  p.v6 = true;
  ::inet_pton(AF_INET6, "2001:db8::1", p.daddr.data());
  p.proto = IPPROTO_UDP;
  p.dport = 53;
  EXPECT_EQ(to_string(p), "[2001:db8::1]:53/udp");
}

TEST(NetworkOriginalDestination, RefusesNonIpSockets) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto dst = original_destination(a);
  ASSERT_FALSE(dst.ok());
  EXPECT_EQ(dst.error().err, EAFNOSUPPORT);
}

// ---- the layer in the kernel --------------------------------------------------------------

enum class Mode { root, rootless };
void PrintTo(Mode mode, std::ostream* os) { *os << (mode == Mode::root ? "root" : "rootless"); }

class NetworkLayer : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (GetParam() == Mode::root && ::geteuid() != 0) GTEST_SKIP() << "not running as root";
    char tmpl[] = "/tmp/soyaos-netns-root-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);  // nobody must be able to chroot into it
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  // Runs `body` in a child that entered the namespaces and set the layer up.
  void run(const std::function<void(int, NetworkFds&)>& body, const NetworkPlan& plan = test_plan()) {
    const bool rootless = GetParam() == Mode::rootless;
    ChildOutcome outcome = run_in_child([&](int report) {
      enter_sandbox_namespaces(report, rootless, root_);
      Result<NetworkFds> fds = setup_sandbox_network(plan);
      if (!fds) child_fail(report, __LINE__, "setup_sandbox_network: " + fds.error().describe(), -1, fds.error().err);
      body(report, *fds);
    });
    if (outcome.skipped) GTEST_SKIP() << outcome.failure;
    EXPECT_EQ(outcome.failure, "");
  }
  std::string root_;
};

TEST_P(NetworkLayer, RedirectsAllowedPairsAndRefusesTheRest) {
  run([](int report, NetworkFds& fds) {
    CHILD_CHECK(fds.gateway_tcp && fds.gateway_tcp6 && fds.dns_udp && fds.dns_tcp && fds.nflog, "missing fds");
    CHILD_CHECK(fds.udp_relay.size() == 2 && fds.udp_relay[0] && fds.udp_relay[1], "missing UDP relay fds");
    for (int fd : {fds.gateway_tcp.get(), fds.nflog.get(), fds.dns_udp.get(), fds.udp_relay[0].get()}) {
      CHILD_CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, "fd without O_CLOEXEC");
      CHILD_CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0, "fd without O_NONBLOCK");
    }
    // The agent holds no capability in the Comet: check the way it will run.
    drop_all_capabilities(report);
    std::vector<std::string> seen;

    // An allowed (fake address, port) pair reaches the gateway, which learns the original.
    UniqueFd c1;
    CHILD_EXPECT_OK(connect_to("198.18.0.1", 443, SOCK_STREAM, &c1));
    CHILD_CHECK(readable(fds.gateway_tcp, 2000), "gateway did not see the connection");
    UniqueFd a1(::accept4(fds.gateway_tcp.get(), nullptr, nullptr, SOCK_CLOEXEC));
    CHILD_CHECK(a1.valid(), "accept on the gateway");
    auto dst = original_destination(a1);
    CHILD_CHECK(dst.ok(), dst.ok() ? "" : dst.error().describe());
    CHILD_CHECK(sockaddr_text(*dst) == "198.18.0.1:443", "original destination " + sockaddr_text(*dst));
    // The gateway names the family (its listener's) instead of asking getsockname: the same.
    auto dst_named = original_destination(a1, AF_INET);
    CHILD_CHECK(dst_named.ok() && sockaddr_text(*dst_named) == "198.18.0.1:443", "original destination, AF_INET");
    CHILD_EXPECT_OK(::write(c1.get(), "ping", 4));
    char buf[64];
    CHILD_CHECK(::read(a1.get(), buf, sizeof buf) == 4, "data through the gateway");

    // IPv6 pairs go to the IPv6 listener.
    UniqueFd c6;
    CHILD_EXPECT_OK(connect_to("2001:db8::5", 443, SOCK_STREAM, &c6));
    CHILD_CHECK(readable(fds.gateway_tcp6, 2000), "IPv6 gateway did not see the connection");
    UniqueFd a6(::accept4(fds.gateway_tcp6.get(), nullptr, nullptr, SOCK_CLOEXEC));
    CHILD_CHECK(a6.valid(), "accept on the IPv6 gateway");
    auto dst6 = original_destination(a6);
    CHILD_CHECK(dst6.ok(), dst6.ok() ? "" : dst6.error().describe());
    CHILD_CHECK(sockaddr_text(*dst6) == "[2001:db8::5]:443", "original destination " + sockaddr_text(*dst6));
    auto dst6_named = original_destination(a6, AF_INET6);
    CHILD_CHECK(dst6_named.ok() && sockaddr_text(*dst6_named) == "[2001:db8::5]:443", "original destination, AF_INET6");

    // Anything else in TCP: refused at once, and reported.
    UniqueFd c2;
    CHILD_EXPECT_ERRNO(connect_to("1.2.3.4", 80, SOCK_STREAM, &c2), ECONNREFUSED);
    CHILD_CHECK(wait_refused(fds.nflog, "1.2.3.4:80/tcp", &seen), "NFLOG: " + joined(seen));
    CHILD_EXPECT_ERRNO(connect_to("198.18.0.1", 80, SOCK_STREAM, &c2), ECONNREFUSED);  // right host, wrong port
    CHILD_CHECK(wait_refused(fds.nflog, "198.18.0.1:80/tcp", &seen), "NFLOG: " + joined(seen));
    CHILD_EXPECT_ERRNO(connect_to("2001:db8::1", 443, SOCK_STREAM, &c2), ECONNREFUSED);
    CHILD_CHECK(wait_refused(fds.nflog, "[2001:db8::1]:443/tcp", &seen), "NFLOG: " + joined(seen));
    // The gateway port itself is reachable only through the redirect.
    CHILD_EXPECT_ERRNO(connect_to("127.0.0.1", 15001, SOCK_STREAM, &c2), ECONNREFUSED);
    CHILD_CHECK(wait_refused(fds.nflog, "127.0.0.1:15001/tcp", &seen), "NFLOG: " + joined(seen));
    // ...and so are the sandbox's own addresses (nothing listens there, nothing may).
    CHILD_EXPECT_ERRNO(connect_to(kSandboxAddrV4, 8080, SOCK_STREAM, &c2), ECONNREFUSED);
    CHILD_CHECK(wait_refused(fds.nflog, std::string(kSandboxAddrV4) + ":8080/tcp", &seen), "NFLOG: " + joined(seen));

    // UDP: DNS to any other server fails with EPERM and is reported, v4 and v6.
    UniqueFd u(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    CHILD_EXPECT_ERRNO(send_datagram(u, "8.8.8.8", 53, "q"), EPERM);
    CHILD_CHECK(wait_refused(fds.nflog, "8.8.8.8:53/udp", &seen), "NFLOG: " + joined(seen));
    UniqueFd u6(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    CHILD_EXPECT_ERRNO(send_datagram(u6, "2001:4860:4860::8888", 53, "q"), EPERM);
    CHILD_CHECK(wait_refused(fds.nflog, "[2001:4860:4860::8888]:53/udp", &seen), "NFLOG: " + joined(seen));
    // An allowed UDP pair's port, but another host.
    CHILD_EXPECT_ERRNO(send_datagram(u, "9.9.9.10", 53, "q"), EPERM);
    // The source port is reported too (it tells the agent's packets from late relay replies).
    {
      UniqueFd b(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_storage local = sockaddr_of("0.0.0.0", 40000);
      CHILD_EXPECT_OK(::bind(b.get(), reinterpret_cast<const sockaddr*>(&local), sockaddr_len(local)));
      CHILD_EXPECT_ERRNO(send_datagram(b, "8.8.4.4", 53, "q"), EPERM);
      bool found = false;
      for (int i = 0; i < 30 && !found; ++i) {
        auto got = read_nflog(fds.nflog);
        CHILD_CHECK(got.ok(), "read_nflog");
        for (const auto& p : got->packets) {
          if (to_string(p) == "8.8.4.4:53/udp") {
            CHILD_CHECK(p.sport == 40000 && !p.v6 && p.proto == IPPROTO_UDP, "sport " + std::to_string(p.sport));
            found = true;
          } else {
            seen.push_back(to_string(p));
          }
        }
        if (!found) (void)readable(fds.nflog, 100);
      }
      CHILD_CHECK(found, "NFLOG did not report 8.8.4.4:53/udp");
    }
    // Other local resolvers and DNS over TCP are refused too.
    CHILD_EXPECT_ERRNO(send_datagram(u, "127.0.0.53", 53, "q"), EPERM);
    CHILD_EXPECT_ERRNO(send_datagram(u6, "::1", 53, "q"), EPERM);
    CHILD_EXPECT_ERRNO(connect_to("8.8.8.8", 53, SOCK_STREAM, &c2), ECONNREFUSED);
    CHILD_CHECK(wait_refused(fds.nflog, "8.8.8.8:53/tcp", &seen), "NFLOG: " + joined(seen));

    // The stub resolver on 127.0.0.1:53, UDP and TCP.
    CHILD_EXPECT_OK(send_datagram(u, "127.0.0.1", 53, "dns?"));
    CHILD_CHECK(readable(fds.dns_udp, 2000), "DNS stub did not get the query");
    CHILD_CHECK(::recv(fds.dns_udp.get(), buf, sizeof buf, 0) == 4, "DNS query");
    UniqueFd d;
    CHILD_EXPECT_OK(connect_to("127.0.0.1", 53, SOCK_STREAM, &d));
    CHILD_CHECK(readable(fds.dns_tcp, 2000), "DNS stub (tcp) did not see the connection");

    // Allowed UDP pairs arrive on their own relay port; replies come back from the original.
    for (int i = 0; i < 2; ++i) {
      const char* addr = i == 0 ? "9.9.9.9" : "2001:db8::53";
      const uint16_t port = i == 0 ? 53 : 5353;
      UniqueFd& client = i == 0 ? u : u6;
      CHILD_EXPECT_OK(send_datagram(client, addr, port, "hello"));
      CHILD_CHECK(readable(fds.udp_relay[static_cast<size_t>(i)], 2000), std::string("relay for ") + addr);
      sockaddr_storage from{};
      socklen_t from_len = sizeof from;
      CHILD_CHECK(::recvfrom(fds.udp_relay[static_cast<size_t>(i)].get(), buf, sizeof buf, 0,
                             reinterpret_cast<sockaddr*>(&from), &from_len) == 5,
                  "relay datagram");
      CHILD_CHECK(::sendto(fds.udp_relay[static_cast<size_t>(i)].get(), "back", 4, 0,
                           reinterpret_cast<const sockaddr*>(&from), from_len) == 4,
                  "relay reply");
      CHILD_CHECK(readable(client, 2000), "no reply through the relay");
      sockaddr_storage reply_from{};
      socklen_t reply_len = sizeof reply_from;
      CHILD_CHECK(::recvfrom(client.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&reply_from),
                             &reply_len) == 4,
                  "reply datagram");
      const std::string want = i == 0 ? "9.9.9.9:53" : "[2001:db8::53]:5353";
      CHILD_CHECK(sockaddr_text(reply_from) == want, "reply from " + sockaddr_text(reply_from));
    }

    // Nothing but the refusals above reached NFLOG (the kernel itself sent nothing).
    auto rest = read_nflog(fds.nflog);
    CHILD_CHECK(rest.ok(), "read_nflog");
    for (const auto& p : rest->packets) seen.push_back(to_string(p));
    const std::vector<std::string> expected = {
        "1.2.3.4:80/tcp", "198.18.0.1:80/tcp", "[2001:db8::1]:443/tcp", "127.0.0.1:15001/tcp",
        std::string(kSandboxAddrV4) + ":8080/tcp", "8.8.8.8:53/udp", "[2001:4860:4860::8888]:53/udp",
        "9.9.9.10:53/udp", "127.0.0.53:53/udp", "[::1]:53/udp", "8.8.8.8:53/tcp"};
    for (const auto& s : seen) {
      CHILD_CHECK(std::find(expected.begin(), expected.end(), s) != expected.end(), "unexpected NFLOG entry " + s);
    }
  });
}

TEST_P(NetworkLayer, AgentWithoutCapabilitiesCannotRewriteRules) {
  run([](int report, NetworkFds& fds) {
    // With the setup's capabilities the same requests are accepted (the messages are sound):
    // deleting a table that does not exist is ENOENT, not EPERM.
    int before = netlink_errno(NETLINK_NETFILTER, [](char* b) { return build_delete_table(b, "absent"); });
    CHILD_CHECK(before == ENOENT, std::string("nft delete absent table before drop: ") + strerrorname_np(before));

    drop_all_capabilities(report);
    int err = netlink_errno(NETLINK_NETFILTER, [](char* b) { return build_delete_table(b, "soyaos"); });
    CHILD_CHECK(err == EPERM, std::string("nft delete table: ") + (err ? strerrorname_np(err) : "accepted"));
    err = netlink_errno(NETLINK_ROUTE, build_delete_default_route);
    CHILD_CHECK(err == EPERM, std::string("delete default route: ") + (err ? strerrorname_np(err) : "accepted"));
    err = netlink_errno(NETLINK_NETFILTER, [](char* b) { return build_nflog_unbind(b, 7); });
    CHILD_CHECK(err == EPERM, std::string("nflog unbind: ") + (err ? strerrorname_np(err) : "accepted"));
    {
      std::unique_ptr<nft_ctx, decltype(&nft_ctx_free)> ctx(nft_ctx_new(NFT_CTX_DEFAULT), &nft_ctx_free);
      nft_ctx_buffer_output(ctx.get());
      nft_ctx_buffer_error(ctx.get());
      CHILD_CHECK(nft_run_cmd_from_buffer(ctx.get(), "flush ruleset") != 0, "libnftables flushed the ruleset");
      CHILD_CHECK(std::strstr(nft_ctx_get_error_buffer(ctx.get()), "Operation not permitted") != nullptr,
                  std::string("nft error: ") + nft_ctx_get_error_buffer(ctx.get()));
    }
    // Binding the DNS port is a privilege the agent no longer has either.
    UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss = sockaddr_of("127.0.0.2", 53);
    CHILD_EXPECT_ERRNO(::bind(s.get(), reinterpret_cast<const sockaddr*>(&ss), sockaddr_len(ss)), EACCES);

    // The rules still hold.
    UniqueFd c;
    CHILD_EXPECT_ERRNO(connect_to("1.2.3.4", 80, SOCK_STREAM, &c), ECONNREFUSED);
    std::vector<std::string> seen;
    CHILD_CHECK(wait_refused(fds.nflog, "1.2.3.4:80/tcp", &seen), "NFLOG after the attempts: " + joined(seen));
  });
}

// egress "*" (every TCP destination but loopback to the gateway), a wildcard's /24 block of
// fake addresses, and the Moon proxy listener: the kernel takes the ruleset and each works.
TEST_P(NetworkLayer, CatchAllBlocksAndProxyListener) {
  NetworkPlan plan;
  EgressRule block = rule("198.19.0.0", 443, IPPROTO_TCP);
  block.prefix = 24;
  plan.redirect_tcp.push_back(block);
  plan.catch_all_tcp = true;
  plan.proxy_port = 3128;
  run(
      [](int report, NetworkFds& fds) {
        CHILD_CHECK(fds.gateway_tcp6 && fds.proxy_tcp, "missing gateway6 or proxy listener");
        drop_all_capabilities(report);
        std::vector<std::string> seen;
        for (const char* addr : {"198.19.0.77", "203.0.113.9", "2001:db8::9"}) {
          UniqueFd c;
          CHILD_EXPECT_OK(connect_to(addr, 443, SOCK_STREAM, &c));
          const UniqueFd& gw = std::string(addr).find(':') != std::string::npos ? fds.gateway_tcp6 : fds.gateway_tcp;
          CHILD_CHECK(readable(gw, 2000), std::string("gateway did not see ") + addr);
          UniqueFd a(::accept4(gw.get(), nullptr, nullptr, SOCK_CLOEXEC));
          auto dst = original_destination(a);
          CHILD_CHECK(dst.ok(), "original destination");
        }
        UniqueFd p;
        CHILD_EXPECT_OK(connect_to("127.0.0.1", 3128, SOCK_STREAM, &p));
        CHILD_CHECK(readable(fds.proxy_tcp, 2000), "proxy listener did not see the connection");
        // Loopback is not redirected: the gateway port directly is still refused.
        UniqueFd g;
        CHILD_EXPECT_ERRNO(connect_to("127.0.0.1", 15001, SOCK_STREAM, &g), ECONNREFUSED);
        CHILD_CHECK(wait_refused(fds.nflog, "127.0.0.1:15001/tcp", &seen), "NFLOG: " + joined(seen));
        // UDP is not covered by the catch-all.
        UniqueFd u(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        CHILD_EXPECT_ERRNO(send_datagram(u, "203.0.113.9", 53, "q"), EPERM);
      },
      plan);
}

INSTANTIATE_TEST_SUITE_P(Modes, NetworkLayer, ::testing::Values(Mode::root, Mode::rootless),
                         [](const auto& info) { return info.param == Mode::root ? "Root" : "Rootless"; });

}  // namespace
}  // namespace soyaos::comet
