// The Comet's network layer: the agent's network namespace, its firewall and the sockets the
// supervisor serves inside it (SPEC C5, C6). docs/network-layer.md explains the layout and
// every rule.
//
//   parent (before clone)            child (fresh user+net namespace, still holding
//   NetworkPlan (plain data)          CAP_NET_ADMIN and CAP_NET_BIND_SERVICE over it)
//   nft_ruleset(plan) for goldens     setup_sandbox_network(plan):
//                                       lo up; veth pair soyaos0/soyaos1 (both ends here),
//                                       addresses, default routes v4+v6 (rtnetlink);
//                                       nftables ruleset (one nfnetlink batch, nft_batch.h);
//                                       listening sockets + NFLOG socket
//                                     -> NetworkFds handed to the supervisor; then every
//                                        capability is dropped (credentials step), so the
//                                        agent can never rewrite rules or routes.
//   supervisor: accept() on gateway_tcp, original_destination(); recvfrom() on
//   udp_relay[i]; read_nflog() for refused packets (violations).
//
// UDP path, decided: a redirected UDP datagram's original destination is not recoverable
// from the relay socket (SO_ORIGINAL_DST is TCP-only; IP_RECVORIGDSTADDR reports the
// post-NAT 127.0.0.1:port; it only helps with TPROXY, which needs a prerouting hook these
// locally generated packets never cross). Checked on the target kernel. So every allowed
// UDP entry gets its own relay port: allow_udp[i] is redirected to udp_relay_port + i and
// served by NetworkFds::udp_relay[i]; the port the datagram arrives on names its
// destination. Replies sent from that socket to the datagram's source are un-NATed by
// conntrack, so the agent sees them come from the real (address, port).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace soyaos::comet {

struct EgressRule {
  std::array<uint8_t, 16> addr{};  // network byte order; IPv4 in the first 4 bytes
  bool v6 = false;
  uint16_t port = 0;               // host byte order, 1..65535
  uint8_t proto = 0;               // IPPROTO_TCP or IPPROTO_UDP
  // 0: exactly `addr`; otherwise the network addr/prefix (a wildcard entry's block of fake
  // addresses). Only redirect_tcp entries may have one.
  uint8_t prefix = 0;
};

// At most this many udp entries (one relay socket each) per run.
inline constexpr size_t kMaxUdpRelays = 64;

// Computed in the parent before clone (plain data, no syscalls).
struct NetworkPlan {
  std::vector<EgressRule> redirect_tcp;  // (fake or literal address, port) pairs -> gateway
  std::vector<EgressRule> allow_udp;     // allow_udp[i] -> relay port udp_relay_port + i
  uint16_t gateway_port = 15001;         // the in-netns TCP listener the supervisor serves
  uint16_t udp_relay_port = 15101;       // first UDP relay port (one port per allow_udp entry)
  uint32_t nflog_group = 7;              // NFLOG group of refused packets (0..65535)
  // RFC 2544 benchmark range the stub hands fake per-name addresses out of. No address of
  // the netns lies in it; validated (IPv4 CIDR, not overlapping the netns's own addresses).
  std::string fake_v4_cidr = "198.18.0.0/15";
  // egress "*": every TCP destination outside the netns's loopback goes to the gateway,
  // which still decides and logs each connection (SPEC C6).
  bool catch_all_tcp = false;
  // The Moon proxy (C7, `protocol: moon-proxy`): a TCP listener on 127.0.0.1:proxy_port the
  // agent reaches directly (HTTP_PROXY). 0 = none.
  uint16_t proxy_port = 0;
};

// Every fd is O_CLOEXEC and O_NONBLOCK (served by the supervisor's event loop).
struct NetworkFds {
  UniqueFd gateway_tcp;             // TCP listening on 127.0.0.1:gateway_port
  UniqueFd gateway_tcp6;            // TCP listening on [::1]:gateway_port (IPV6_V6ONLY);
                                    // invalid when redirect_tcp has no IPv6 entry
  std::vector<UniqueFd> udp_relay;  // udp_relay[i] bound to 127.0.0.1 (or ::1 for an IPv6
                                    // entry) : udp_relay_port + i, serving allow_udp[i]
  UniqueFd dns_udp;                 // UDP bound to 127.0.0.1:53 (the stub resolver)
  UniqueFd dns_tcp;                 // TCP listening on 127.0.0.1:53
  UniqueFd nflog;                   // NETLINK_NETFILTER, bound to NFLOG group nflog_group
  UniqueFd proxy_tcp;               // TCP listening on 127.0.0.1:proxy_port; invalid when 0
};

// The netns's own addresses (veth soyaos0); the agent's sockets take them as source.
inline constexpr const char* kSandboxVethName = "soyaos0";
inline constexpr const char* kSandboxVethPeerName = "soyaos1";
inline constexpr const char* kSandboxAddrV4 = "10.254.254.1";  // /30
inline constexpr const char* kSandboxAddrV6 = "fd53:6f79:6100::1";  // /64, ULA

// Checks the plan: ports non-zero, the relay ports udp_relay_port .. +allow_udp.size()-1 in
// range and clear of 53 and the gateway port, protocols as documented, group < 65536, the
// fake range an IPv4 CIDR clear of loopback and the sandbox's own address. Errors: EINVAL.
Status validate_network_plan(const NetworkPlan& plan);

// The exact nftables ruleset setup_sandbox_network installs, as nft text (golden-file tested;
// the reference build_nft_batch() is checked against, tests/unit/nft_batch_test.cc).
// Only numbers and nft keywords: nothing is looked up in /etc (the child has pivoted).
std::string nft_ruleset(const NetworkPlan& plan);

// Child side, inside its fresh user+network namespace, after the mounts and before the
// capabilities are dropped. Brings up lo; creates the veth pair soyaos0/soyaos1 (both ends
// in this netns, NOARP, no IPv6 address autoconfiguration: the kernel itself sends nothing),
// gives soyaos0 kSandboxAddrV4/30 and kSandboxAddrV6/64 (no DAD) and a default route for
// each family, so that every destination reaches the netfilter output hook; installs
// nft_ruleset(plan); creates and binds the sockets of NetworkFds. Fails closed: any error
// is returned, naming the step (the run must not start, C1).
Result<NetworkFds> setup_sandbox_network(const NetworkPlan& plan);

// Child side, before the mounts (the host's /proc is still there; /proc/sys/net is the
// reader's netns): makes cubic, else reno, the congestion control of new TCP sockets in
// this fresh netns. Every TCP connection of the agent ends on the gateway over this netns's
// loopback, where a pacing algorithm the host may have chosen (BBR) only costs CPU: about
// twice the CPU per GiB on loopback (docs/benchmarks.md, "Egress"). The host's own sockets,
// the gateway's upstream ones included, keep the host's choice. Best effort and not a layer:
// nothing about what the agent may reach depends on it, so a failure leaves the default.
// (A netns other than the host's may only default to an algorithm of the host's
// net.ipv4.tcp_allowed_congestion_control, which always has reno.)
void prefer_unpaced_loopback_tcp();

// A network namespace holding nft_ruleset()'s hooks (its NAT and filter chains and
// conntrack), nothing else: no interface up, its rules filter only itself. While it lives,
// netfilter's global static keys for those hooks stay enabled, so each Comet's netns
// registers its hooks without patching kernel text on every CPU (at set-up and again at
// teardown): 0.4–0.6 ms of the child's CPU per run (docs/benchmarks-issue16-history.md,
// session 3). For long-lived processes (`soyaos moon serve`); the namespace lives as long
// as the returned fd. Runs a short-lived child (fork), so call it while the process has one
// thread.
Result<UniqueFd> hold_netfilter_hooks();

// ---- Supervisor side ----

// The destination the agent connected to before the redirect (SO_ORIGINAL_DST for an
// IPv4 socket, IP6T_SO_ORIGINAL_DST for IPv6). A connection accepted on the gateway was
// always redirected (the ruleset refuses direct connections to the gateway port).
// `family`: the accepted socket's (its listener's), or AF_UNSPEC to ask getsockname.
Result<sockaddr_storage> original_destination(const UniqueFd& accepted, int family = AF_UNSPEC);

struct RefusedPacket {
  std::array<uint8_t, 16> daddr{};  // network byte order; IPv4 in the first 4 bytes
  std::array<uint8_t, 16> saddr{};  // likewise: with sport, tells the supervisor's own late
                                    // replies (from its exact bound address) from the agent
  bool v6 = false;
  uint8_t proto = 0;   // IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, IPPROTO_ICMPV6, ...
  uint16_t dport = 0;  // host byte order; 0 when the protocol has no ports
  uint16_t sport = 0;  // likewise; tells a late relay reply (sport = a relay port) from the agent
};

struct NflogRead {
  std::vector<RefusedPacket> packets;
  // The socket's buffer overflowed (ENOBUFS) since the last read: some refused packets
  // were not delivered. Report it; the run has had at least one violation either way.
  bool overrun = false;
};

// Drains the NFLOG socket (non-blocking) and parses each NFULNL_MSG_PACKET's network and
// transport headers. Returns an empty list when nothing is pending.
Result<NflogRead> read_nflog(const UniqueFd& nflog);

// "1.2.3.4:80/tcp", "[2001:db8::1]:443/tcp", "10.0.0.1/icmp": for messages and events.
std::string to_string(const RefusedPacket& packet);

}  // namespace soyaos::comet
