#include "comet/network.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "comet/nft_batch.h"

namespace soyaos::comet {
namespace {

// From <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>, which drag in
// kernel headers that clash with glibc's <netinet/in.h>.
constexpr int kSoOriginalDst = 80;
constexpr int kIp6tSoOriginalDst = 80;

constexpr uint8_t kSandboxPrefixV4 = 30;
constexpr uint8_t kSandboxPrefixV6 = 64;
constexpr uint16_t kDnsPort = 53;
constexpr uint32_t kNflogCopyRange = 128;  // bytes of each refused packet: IP + L4 headers

std::string format_addr(const std::array<uint8_t, 16>& addr, bool v6) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, addr.data(), buf, sizeof buf);
  return buf;
}

std::string endpoint(const EgressRule& rule) {
  return (rule.v6 ? "[" + format_addr(rule.addr, true) + "]" : format_addr(rule.addr, false)) + ":" +
         std::to_string(rule.port);
}

uint16_t relay_port(const NetworkPlan& plan, size_t index) {
  return static_cast<uint16_t>(plan.udp_relay_port + index);
}

bool has_v6_redirect(const NetworkPlan& plan) {
  if (plan.catch_all_tcp) return true;
  for (const auto& r : plan.redirect_tcp) {
    if (r.v6) return true;
  }
  return false;
}

// "a.b.c.d/len" -> (network, prefix length) in host byte order.
bool parse_cidr_v4(const std::string& cidr, uint32_t* net, int* len) {
  auto slash = cidr.find('/');
  if (slash == std::string::npos) return false;
  in_addr a{};
  if (::inet_pton(AF_INET, cidr.substr(0, slash).c_str(), &a) != 1) return false;
  const std::string l = cidr.substr(slash + 1);
  if (l.empty() || l.size() > 2 || l.find_first_not_of("0123456789") != std::string::npos) return false;
  *len = std::stoi(l);
  if (*len > 32) return false;
  *net = ntohl(a.s_addr);
  return true;
}

// ---- netlink plumbing (libmnl builds and parses; the fd is ours) ----

class Netlink {
 public:
  static Result<Netlink> open(int protocol, const char* what) {
    // SOCK_RAW is the only type netlink has; CLOEXEC so nothing leaks across exec.
    UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol));
    if (!fd) return errno_error(std::string("socket(AF_NETLINK, ") + what + ")");
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
      return errno_error(std::string("bind netlink ") + what);
    }
    return Netlink(std::move(fd));
  }

  char* buffer() { return buf_.get(); }

  // Sends the one message built in buffer() with NLM_F_ACK and waits for its ack.
  Status transact(nlmsghdr* nlh, const std::string& what) {
    nlh->nlmsg_flags |= NLM_F_ACK;
    nlh->nlmsg_seq = ++seq_;
    if (::send(fd_.get(), nlh, nlh->nlmsg_len, 0) < 0) return errno_error("send " + what);
    for (;;) {
      ssize_t n = ::recv(fd_.get(), buf_.get(), kBufferSize, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error("recv " + what);
      }
      // Other messages (an NFLOG packet, say) carry sequence number 0 and pass through.
      int rc = mnl_cb_run(buf_.get(), static_cast<size_t>(n), seq_, 0, nullptr, nullptr);
      if (rc == MNL_CB_ERROR) return errno_error(what);
      if (rc == MNL_CB_STOP) return {};
    }
  }

  UniqueFd take() { return std::move(fd_); }

 private:
  static constexpr size_t kBufferSize = 16384;
  explicit Netlink(UniqueFd fd) : fd_(std::move(fd)), buf_(new char[kBufferSize]) {}
  UniqueFd fd_;
  std::unique_ptr<char[]> buf_;
  uint32_t seq_ = 0;
};

nlmsghdr* put_header(char* buf, uint16_t type, uint16_t flags) {
  std::memset(buf, 0, MNL_NLMSG_HDRLEN);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  return nlh;
}

Status set_link(Netlink& rt, unsigned index, const std::string& name) {
  // IPv6 address generation off, while the link is down: no link-local address, hence no
  // DAD, router solicitation or MLD report leaves the kernel (they would hit the log rule).
  nlmsghdr* nlh = put_header(rt.buffer(), RTM_NEWLINK, 0);
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = static_cast<int>(index);
  nlattr* spec = mnl_attr_nest_start(nlh, IFLA_AF_SPEC);
  nlattr* inet6 = mnl_attr_nest_start(nlh, AF_INET6);
  mnl_attr_put_u8(nlh, IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
  mnl_attr_nest_end(nlh, inet6);
  mnl_attr_nest_end(nlh, spec);
  if (auto s = rt.transact(nlh, "rtnetlink: addrgenmode none " + name); !s) return s;

  // Up, and NOARP: no neighbour discovery, no solicited-node multicast membership.
  nlh = put_header(rt.buffer(), RTM_NEWLINK, 0);
  ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = static_cast<int>(index);
  ifm->ifi_flags = IFF_UP | IFF_NOARP;
  ifm->ifi_change = IFF_UP | IFF_NOARP;
  return rt.transact(nlh, "rtnetlink: set " + name + " up");
}

Status link_up(Netlink& rt, unsigned index, const std::string& name) {
  nlmsghdr* nlh = put_header(rt.buffer(), RTM_NEWLINK, 0);
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = static_cast<int>(index);
  ifm->ifi_flags = IFF_UP;
  ifm->ifi_change = IFF_UP;
  return rt.transact(nlh, "rtnetlink: set " + name + " up");
}

Status create_veth(Netlink& rt, const char* name, const char* peer) {
  nlmsghdr* nlh = put_header(rt.buffer(), RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
  nlattr* linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
  nlattr* data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  nlattr* peer_nest = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
  // VETH_INFO_PEER's payload starts with the peer's own ifinfomsg, then its attributes.
  mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg));
  mnl_attr_put_strz(nlh, IFLA_IFNAME, peer);
  mnl_attr_nest_end(nlh, peer_nest);
  mnl_attr_nest_end(nlh, data);
  mnl_attr_nest_end(nlh, linkinfo);
  return rt.transact(nlh, std::string("rtnetlink: create veth ") + name + "/" + peer);
}

Status add_address(Netlink& rt, unsigned index, int family, const char* text, uint8_t prefix) {
  std::array<uint8_t, 16> addr{};
  if (::inet_pton(family, text, addr.data()) != 1) return make_error(std::string("bad address ") + text, EINVAL);
  nlmsghdr* nlh = put_header(rt.buffer(), RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = static_cast<uint8_t>(family);
  ifa->ifa_prefixlen = prefix;
  ifa->ifa_flags = IFA_F_NODAD;  // usable at once: no tentative state, no DAD probe sent
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = index;
  const size_t len = family == AF_INET6 ? 16 : 4;
  mnl_attr_put(nlh, IFA_LOCAL, len, addr.data());
  mnl_attr_put(nlh, IFA_ADDRESS, len, addr.data());
  mnl_attr_put_u32(nlh, IFA_FLAGS, IFA_F_NODAD);
  return rt.transact(nlh, std::string("rtnetlink: add address ") + text + "/" + std::to_string(prefix));
}

Status add_default_route(Netlink& rt, unsigned index, int family) {
  nlmsghdr* nlh = put_header(rt.buffer(), RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = static_cast<uint8_t>(family);
  rtm->rtm_dst_len = 0;
  rtm->rtm_table = RT_TABLE_MAIN;
  rtm->rtm_protocol = RTPROT_BOOT;
  // A device route without a gateway: link scope for IPv4 (as `ip route add default dev`).
  rtm->rtm_scope = family == AF_INET ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
  rtm->rtm_type = RTN_UNICAST;
  mnl_attr_put_u32(nlh, RTA_OIF, index);
  return rt.transact(nlh, std::string("rtnetlink: add default route (") +
                              (family == AF_INET ? "IPv4" : "IPv6") + ") via " + kSandboxVethName);
}

Result<unsigned> link_index(const char* name) {
  unsigned index = ::if_nametoindex(name);
  if (index == 0) return errno_error(std::string("if_nametoindex ") + name);
  return index;
}

Status setup_links() {
  auto rt = Netlink::open(NETLINK_ROUTE, "NETLINK_ROUTE");
  if (!rt) return rt.error();
  auto lo = link_index("lo");
  if (!lo) return lo.error();
  if (auto s = link_up(*rt, *lo, "lo"); !s) return s;
  if (auto s = create_veth(*rt, kSandboxVethName, kSandboxVethPeerName); !s) return s;
  auto veth = link_index(kSandboxVethName);
  if (!veth) return veth.error();
  auto peer = link_index(kSandboxVethPeerName);
  if (!peer) return peer.error();
  if (auto s = set_link(*rt, *peer, kSandboxVethPeerName); !s) return s;
  if (auto s = set_link(*rt, *veth, kSandboxVethName); !s) return s;
  if (auto s = add_address(*rt, *veth, AF_INET, kSandboxAddrV4, kSandboxPrefixV4); !s) return s;
  if (auto s = add_address(*rt, *veth, AF_INET6, kSandboxAddrV6, kSandboxPrefixV6); !s) return s;
  if (auto s = add_default_route(*rt, *veth, AF_INET); !s) return s;
  return add_default_route(*rt, *veth, AF_INET6);
}

// ---- sockets ----

Result<UniqueFd> bound_socket(int family, int type, const char* addr_text, uint16_t port,
                              const std::string& what) {
  UniqueFd fd(::socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return errno_error("socket " + what);
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return errno_error("setsockopt SO_REUSEADDR " + what);
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    // IPv6 only: the v4 listener is a separate socket, bound to 127.0.0.1 alone.
    if (::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) {
      return errno_error("setsockopt IPV6_V6ONLY " + what);
    }
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    ::inet_pton(AF_INET6, addr_text, &sin6->sin6_addr);
    len = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    ::inet_pton(AF_INET, addr_text, &sin->sin_addr);
    len = sizeof(sockaddr_in);
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0) return errno_error("bind " + what);
  if (type == SOCK_STREAM && ::listen(fd.get(), SOMAXCONN) != 0) return errno_error("listen " + what);
  return fd;
}

Result<UniqueFd> nflog_socket(uint32_t group) {
  auto nl = Netlink::open(NETLINK_NETFILTER, "NETLINK_NETFILTER");
  if (!nl) return nl.error();
  const std::string what = "nfnetlink_log: group " + std::to_string(group);
  auto config = [&](char* buf) {
    nlmsghdr* nlh = put_header(buf, (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG, 0);
    auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
    nfg->nfgen_family = AF_UNSPEC;
    nfg->version = NFNETLINK_V0;
    nfg->res_id = htons(static_cast<uint16_t>(group));
    return nlh;
  };
  nlmsghdr* nlh = config(nl->buffer());
  nfulnl_msg_config_cmd cmd{};
  cmd.command = NFULNL_CFG_CMD_BIND;
  mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof cmd, &cmd);
  if (auto s = nl->transact(nlh, what + " bind"); !s) return s.error();

  nlh = config(nl->buffer());
  nfulnl_msg_config_mode mode{};
  mode.copy_range = htonl(kNflogCopyRange);
  mode.copy_mode = NFULNL_COPY_PACKET;
  mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof mode, &mode);
  // Deliver each packet at once rather than batching up to 100 or for a second.
  mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(1));
  if (auto s = nl->transact(nlh, what + " copy mode"); !s) return s.error();

  UniqueFd fd = nl->take();
  // A burst of refusals should not overflow the default buffer; best effort (rmem_max caps it).
  int size = 1 << 20;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  // Non-blocking from here on (the configuration above waited for its acks).
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) return errno_error("fcntl O_NONBLOCK nflog");
  return fd;
}

// ---- NFLOG parsing ----

bool parse_packet(const uint8_t* p, size_t len, RefusedPacket* out) {
  if (len < 1) return false;
  const int version = p[0] >> 4;
  size_t l4 = 0;
  if (version == 4) {
    if (len < 20) return false;
    const size_t ihl = static_cast<size_t>(p[0] & 0x0f) * 4;
    if (ihl < 20 || ihl > len) return false;
    out->v6 = false;
    out->proto = p[9];
    std::memcpy(out->saddr.data(), p + 12, 4);
    std::memcpy(out->daddr.data(), p + 16, 4);
    // A non-first fragment carries no transport header.
    const uint16_t frag = static_cast<uint16_t>((p[6] << 8) | p[7]);
    if ((frag & 0x1fff) != 0) return true;
    l4 = ihl;
  } else if (version == 6) {
    if (len < 40) return false;
    out->v6 = true;
    std::memcpy(out->saddr.data(), p + 8, 16);
    std::memcpy(out->daddr.data(), p + 24, 16);
    uint8_t next = p[6];
    l4 = 40;
    // Walk the common extension headers to the transport header.
    for (int i = 0; i < 8; ++i) {
      if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS) {
        if (l4 + 2 > len) break;
        uint8_t n = p[l4];
        l4 += (static_cast<size_t>(p[l4 + 1]) + 1) * 8;
        next = n;
      } else if (next == IPPROTO_FRAGMENT) {
        if (l4 + 8 > len) break;
        const uint16_t off = static_cast<uint16_t>((p[l4 + 2] << 8) | p[l4 + 3]);
        uint8_t n = p[l4];
        l4 += 8;
        next = n;
        if ((off & 0xfff8) != 0) {  // not the first fragment
          out->proto = next;
          return true;
        }
      } else {
        break;
      }
    }
    out->proto = next;
  } else {
    return false;
  }
  if ((out->proto == IPPROTO_TCP || out->proto == IPPROTO_UDP || out->proto == IPPROTO_SCTP ||
       out->proto == IPPROTO_UDPLITE || out->proto == IPPROTO_DCCP) &&
      l4 + 4 <= len) {
    out->sport = static_cast<uint16_t>((p[l4] << 8) | p[l4 + 1]);
    out->dport = static_cast<uint16_t>((p[l4 + 2] << 8) | p[l4 + 3]);
  }
  return true;
}

int nflog_attr_cb(const nlattr* attr, void* data) {
  auto** tb = static_cast<const nlattr**>(data);
  const int type = mnl_attr_get_type(attr);
  if (mnl_attr_type_valid(attr, NFULA_MAX) < 0) return MNL_CB_OK;  // newer attribute: skip
  tb[type] = attr;
  return MNL_CB_OK;
}

}  // namespace

Status validate_network_plan(const NetworkPlan& plan) {
  if (plan.gateway_port == 0) return make_error("network plan: gateway port 0", EINVAL);
  if (plan.gateway_port == kDnsPort) return make_error("network plan: gateway port 53 is the DNS stub's", EINVAL);
  if (plan.nflog_group > 0xffff) {
    return make_error("network plan: NFLOG group " + std::to_string(plan.nflog_group) + " > 65535", EINVAL);
  }
  for (const auto& r : plan.redirect_tcp) {
    if (r.proto != IPPROTO_TCP || r.port == 0) {
      return make_error("network plan: redirect_tcp entry " + endpoint(r) + " is not a TCP port", EINVAL);
    }
    if (r.prefix > (r.v6 ? 128 : 32)) {
      return make_error("network plan: redirect_tcp entry " + endpoint(r) + " has prefix /" +
                            std::to_string(r.prefix),
                        EINVAL);
    }
  }
  for (const auto& r : plan.allow_udp) {
    if (r.prefix != 0) return make_error("network plan: UDP entry " + endpoint(r) + " with a prefix", EINVAL);
  }
  if (plan.proxy_port == kDnsPort || (plan.proxy_port != 0 && plan.proxy_port == plan.gateway_port)) {
    return make_error("network plan: proxy port " + std::to_string(plan.proxy_port) + " collides", EINVAL);
  }
  const size_t n = plan.allow_udp.size();
  if (n > 0) {
    if (plan.udp_relay_port == 0 || plan.udp_relay_port + n - 1 > 0xffff) {
      return make_error("network plan: UDP relay ports " + std::to_string(plan.udp_relay_port) + "+" +
                            std::to_string(n) + " out of range",
                        EINVAL);
    }
    if (plan.udp_relay_port <= kDnsPort && kDnsPort < plan.udp_relay_port + n) {
      return make_error("network plan: UDP relay ports cover the DNS stub's port 53", EINVAL);
    }
    if (plan.udp_relay_port <= plan.gateway_port && plan.gateway_port < plan.udp_relay_port + n) {
      return make_error("network plan: gateway port " + std::to_string(plan.gateway_port) +
                            " lies in the UDP relay ports",
                        EINVAL);
    }
  }
  for (const auto& r : plan.allow_udp) {
    if (r.proto != IPPROTO_UDP || r.port == 0) {
      return make_error("network plan: allow_udp entry " + endpoint(r) + " is not a UDP port", EINVAL);
    }
  }
  uint32_t net = 0;
  int len = 0;
  if (!parse_cidr_v4(plan.fake_v4_cidr, &net, &len)) {
    return make_error("network plan: fake address range `" + plan.fake_v4_cidr + "` is not an IPv4 CIDR", EINVAL);
  }
  const uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  in_addr own{};
  ::inet_pton(AF_INET, kSandboxAddrV4, &own);
  if ((ntohl(own.s_addr) & mask) == (net & mask) || (0x7f000000u & mask) == (net & mask)) {
    return make_error("network plan: fake address range " + plan.fake_v4_cidr +
                          " overlaps the sandbox's own or loopback addresses",
                      EINVAL);
  }
  return {};
}

std::string nft_ruleset(const NetworkPlan& plan) {
  const std::string gw = std::to_string(plan.gateway_port);
  const std::string group = std::to_string(plan.nflog_group);
  std::string out;
  out += "# SoyaOS Comet network layer, generated by nft_ruleset() (docs/network-layer.md).\n";
  out += "table inet soyaos {\n";
  out += "\tchain nat_output {\n";
  out += "\t\ttype nat hook output priority -100; policy accept;\n";
  for (const auto& r : plan.redirect_tcp) {
    std::string addr = format_addr(r.addr, r.v6);
    if (r.prefix != 0) addr += "/" + std::to_string(r.prefix);
    out += std::string("\t\t") + (r.v6 ? "ip6" : "ip") + " daddr " + addr + " tcp dport " +
           std::to_string(r.port) + " redirect to :" + gw + "\n";
  }
  if (plan.catch_all_tcp) {
    // egress "*": everything but the netns's own loopback (the stub, the gateway itself,
    // the proxy) is redirected; the gateway decides and logs each connection.
    out += "\t\tip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :" + gw + "\n";
    out += "\t\tip6 daddr != ::1 meta l4proto tcp redirect to :" + gw + "\n";
  }
  for (size_t i = 0; i < plan.allow_udp.size(); ++i) {
    const auto& r = plan.allow_udp[i];
    out += std::string("\t\t") + (r.v6 ? "ip6" : "ip") + " daddr " + format_addr(r.addr, r.v6) +
           " udp dport " + std::to_string(r.port) + " redirect to :" + std::to_string(relay_port(plan, i)) + "\n";
  }
  out += "\t}\n";
  out += "\tchain filter_output {\n";
  out += "\t\ttype filter hook output priority 0; policy drop;\n";
  out += "\t\tct state established,related accept\n";
  out += "\t\tct state invalid drop\n";
  out += "\t\tct status dnat ip daddr 127.0.0.1 tcp dport " + gw + " accept\n";
  if (has_v6_redirect(plan)) out += "\t\tct status dnat ip6 daddr ::1 tcp dport " + gw + " accept\n";
  for (size_t i = 0; i < plan.allow_udp.size(); ++i) {
    out += std::string("\t\tct status dnat ") + (plan.allow_udp[i].v6 ? "ip6 daddr ::1" : "ip daddr 127.0.0.1") +
           " udp dport " + std::to_string(relay_port(plan, i)) + " accept\n";
  }
  out += "\t\tip daddr 127.0.0.1 udp dport 53 accept\n";
  out += "\t\tip daddr 127.0.0.1 tcp dport 53 accept\n";
  if (plan.proxy_port != 0) {
    out += "\t\tip daddr 127.0.0.1 tcp dport " + std::to_string(plan.proxy_port) + " accept\n";
  }
  out += "\t\tlog group " + group + "\n";
  out += "\t\tmeta l4proto tcp reject with tcp reset\n";
  out += "\t\treject with icmpx type admin-prohibited\n";
  out += "\t}\n";
  out += "}\n";
  return out;
}

Result<NetworkFds> setup_sandbox_network(const NetworkPlan& plan) {
  if (auto s = validate_network_plan(plan); !s) return s.error();
  if (auto s = setup_links(); !s) return s.error();
  NetworkFds fds;
  // The NFLOG listener before the ruleset, so that no refused packet goes unreported.
  auto nflog = nflog_socket(plan.nflog_group);
  if (!nflog) return nflog.error();
  fds.nflog = std::move(*nflog);
  // The ruleset as one nfnetlink batch (nft_batch.h): nft_ruleset(plan)'s rules, expression
  // for expression.
  if (auto s = install_nft_batch(build_nft_batch(plan)); !s) return s.error();

  const std::string gw = std::to_string(plan.gateway_port);
  auto gateway = bound_socket(AF_INET, SOCK_STREAM, "127.0.0.1", plan.gateway_port, "gateway 127.0.0.1:" + gw);
  if (!gateway) return gateway.error();
  fds.gateway_tcp = std::move(*gateway);
  if (has_v6_redirect(plan)) {
    auto gateway6 = bound_socket(AF_INET6, SOCK_STREAM, "::1", plan.gateway_port, "gateway [::1]:" + gw);
    if (!gateway6) return gateway6.error();
    fds.gateway_tcp6 = std::move(*gateway6);
  }
  for (size_t i = 0; i < plan.allow_udp.size(); ++i) {
    const bool v6 = plan.allow_udp[i].v6;
    const uint16_t port = relay_port(plan, i);
    auto relay = bound_socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM, v6 ? "::1" : "127.0.0.1", port,
                              "UDP relay for " + endpoint(plan.allow_udp[i]) + " on port " + std::to_string(port));
    if (!relay) return relay.error();
    fds.udp_relay.push_back(std::move(*relay));
  }
  // Port 53 needs CAP_NET_BIND_SERVICE over this netns, which the child still holds.
  auto dns_udp = bound_socket(AF_INET, SOCK_DGRAM, "127.0.0.1", kDnsPort, "DNS stub udp 127.0.0.1:53");
  if (!dns_udp) return dns_udp.error();
  fds.dns_udp = std::move(*dns_udp);
  auto dns_tcp = bound_socket(AF_INET, SOCK_STREAM, "127.0.0.1", kDnsPort, "DNS stub tcp 127.0.0.1:53");
  if (!dns_tcp) return dns_tcp.error();
  fds.dns_tcp = std::move(*dns_tcp);
  if (plan.proxy_port != 0) {
    auto proxy = bound_socket(AF_INET, SOCK_STREAM, "127.0.0.1", plan.proxy_port,
                              "Moon proxy 127.0.0.1:" + std::to_string(plan.proxy_port));
    if (!proxy) return proxy.error();
    fds.proxy_tcp = std::move(*proxy);
  }
  return fds;
}

void prefer_unpaced_loopback_tcp() {
  UniqueFd f(::open("/proc/sys/net/ipv4/tcp_congestion_control", O_WRONLY | O_CLOEXEC));
  if (!f) return;
  for (const char* cc : {"cubic", "reno"}) {
    const size_t len = std::strlen(cc);
    if (::write(f.get(), cc, len) == static_cast<ssize_t>(len)) return;
  }
}

Result<UniqueFd> hold_netfilter_hooks() {
  int ready[2];
  int release[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return errno_error("pipe2");
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  if (::pipe2(release, O_CLOEXEC) != 0) return errno_error("pipe2");
  UniqueFd release_r(release[0]), release_w(release[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return errno_error("fork (netfilter hooks holder)");
  if (pid == 0) {
    // The child: a new netns (and, without root, the user namespace that lets us own it),
    // the ruleset, then wait until the parent holds the namespace.
    ready_r.reset();
    release_w.reset();
    const int flags = ::geteuid() == 0 ? CLONE_NEWNET : CLONE_NEWUSER | CLONE_NEWNET;
    char status = 1;
    if (::unshare(flags) == 0) {
      NetworkPlan plan;
      plan.gateway_port = 1;  // only the hooks matter: nothing is ever redirected here
      status = install_nft_batch(build_nft_batch(plan)) ? 0 : 2;
    }
    (void)!::write(ready_w.get(), &status, 1);
    char byte = 0;
    (void)!::read(release_r.get(), &byte, 1);  // EOF: the parent has the namespace (or gave up)
    ::_exit(status);
  }
  ready_w.reset();
  release_r.reset();
  char status = 1;
  const bool told = ::read(ready_r.get(), &status, 1) == 1;
  UniqueFd ns;
  int open_errno = 0;
  if (told && status == 0) {
    ns.reset(::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) open_errno = errno;
  }
  release_w.reset();
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!told) return make_error("netfilter hooks holder: the child died", ECHILD);
  if (status == 1) return make_error("netfilter hooks holder: cannot create a network namespace", EPERM);
  if (status != 0) return make_error("netfilter hooks holder: cannot install the ruleset", EPERM);
  if (!ns) return make_error("netfilter hooks holder: open its /proc/PID/ns/net", open_errno);
  return ns;
}

Result<sockaddr_storage> original_destination(const UniqueFd& accepted, int family) {
  socklen_t len = 0;
  if (family == AF_UNSPEC) {
    sockaddr_storage local{};
    len = sizeof local;
    if (::getsockname(accepted.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      return errno_error("getsockname (original destination)");
    }
    family = local.ss_family;
  }
  sockaddr_storage dst{};
  if (family == AF_INET) {
    len = sizeof(sockaddr_in);
    if (::getsockopt(accepted.get(), SOL_IP, kSoOriginalDst, &dst, &len) != 0) {
      return errno_error("getsockopt SO_ORIGINAL_DST");
    }
  } else if (family == AF_INET6) {
    len = sizeof(sockaddr_in6);
    if (::getsockopt(accepted.get(), SOL_IPV6, kIp6tSoOriginalDst, &dst, &len) != 0) {
      return errno_error("getsockopt IP6T_SO_ORIGINAL_DST");
    }
  } else {
    return make_error("original destination: not an IP socket (family " + std::to_string(family) + ")",
                      EAFNOSUPPORT);
  }
  return dst;
}

Result<NflogRead> read_nflog(const UniqueFd& nflog) {
  NflogRead result;
  // Large enough for a whole batch (the kernel's default nlbufsiz is 4 KiB; at most 128 KiB).
  constexpr size_t kBufferSize = 131072;
  std::unique_ptr<char[]> buf(new char[kBufferSize]);
  for (;;) {
    ssize_t n = ::recv(nflog.get(), buf.get(), kBufferSize, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ENOBUFS) {  // overflowed; later messages still arrive
        result.overrun = true;
        continue;
      }
      return errno_error("recv nflog");
    }
    int remaining = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.get()); mnl_nlmsg_ok(nlh, remaining);
         nlh = mnl_nlmsg_next(nlh, &remaining)) {
      if (nlh->nlmsg_type == NLMSG_ERROR || nlh->nlmsg_type == NLMSG_DONE) continue;
      if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_ULOG || NFNL_MSG_TYPE(nlh->nlmsg_type) != NFULNL_MSG_PACKET) {
        continue;
      }
      if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg))) continue;
      const nlattr* tb[NFULA_MAX + 1] = {};
      if (mnl_attr_parse(nlh, sizeof(nfgenmsg), nflog_attr_cb, tb) < 0) continue;
      if (tb[NFULA_PAYLOAD] == nullptr) continue;
      RefusedPacket packet;
      const auto* payload = static_cast<const uint8_t*>(mnl_attr_get_payload(tb[NFULA_PAYLOAD]));
      if (parse_packet(payload, mnl_attr_get_payload_len(tb[NFULA_PAYLOAD]), &packet)) {
        result.packets.push_back(packet);
      }
    }
  }
  return result;
}

std::string to_string(const RefusedPacket& packet) {
  std::string proto;
  switch (packet.proto) {
    case IPPROTO_TCP: proto = "tcp"; break;
    case IPPROTO_UDP: proto = "udp"; break;
    case IPPROTO_ICMP: proto = "icmp"; break;
    case IPPROTO_ICMPV6: proto = "icmpv6"; break;
    case IPPROTO_SCTP: proto = "sctp"; break;
    default: proto = "proto-" + std::to_string(packet.proto); break;
  }
  std::string addr = format_addr(packet.daddr, packet.v6);
  const bool ported = packet.proto == IPPROTO_TCP || packet.proto == IPPROTO_UDP || packet.proto == IPPROTO_SCTP ||
                      packet.proto == IPPROTO_UDPLITE || packet.proto == IPPROTO_DCCP;
  if (!ported) return addr + "/" + proto;
  return (packet.v6 ? "[" + addr + "]" : addr) + ":" + std::to_string(packet.dport) + "/" + proto;
}

}  // namespace soyaos::comet
