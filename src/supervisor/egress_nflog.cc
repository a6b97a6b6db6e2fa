// NFLOG (SPEC.md C6): every packet the agent's netns refused becomes a violation.

#include <netinet/in.h>

#include <algorithm>
#include <array>

#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

// A late reply from one of the supervisor's own sockets (a UDP relay or the stub answering
// after the conntrack entry expired), not the agent's attempt: from the exact address our
// sockets are bound to (127.0.0.1 or ::1) and one of their ports, to the netns's loopback.
// The agent cannot send such a packet (those address/port pairs are taken by our sockets),
// so an attempt from a socket the agent bound to a service port on another address
// (127.0.0.2:53, the sandbox's own address) is reported like any other (issue #18).
bool EgressService::Impl::own_late_reply(const comet::RefusedPacket& p) const {
  if (std::find(service_ports.begin(), service_ports.end(), p.sport) == service_ports.end()) return false;
  static constexpr std::array<uint8_t, 16> kLoopback6{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (p.v6) return p.saddr == kLoopback6 && p.daddr == kLoopback6;
  return p.saddr[0] == 127 && p.saddr[1] == 0 && p.saddr[2] == 0 && p.saddr[3] == 1 && p.daddr[0] == 127;
}

void EgressService::Impl::drain_nflog() {
  auto read = comet::read_nflog(fds.nflog);
  if (!read) return;
  for (const auto& p : read->packets) {
    if (own_late_reply(p)) continue;
    policy::IpAddress addr;
    addr.bytes = p.daddr;
    addr.v6 = p.v6;
    const bool tcp = p.proto == IPPROTO_TCP, udp = p.proto == IPPROTO_UDP;
    std::string host = policy::to_string(addr), closest = "no match", detail;
    if (!addr.v6 && EgressPlan::is_fake(v4_host_order(addr))) {
      if (auto name = plan.name_for_fake(v4_host_order(addr))) {
        host = *name;
        if (tcp || udp) closest = plan.decide_name(host, p.dport, udp).closest;
      }
    } else if (tcp || udp) {
      closest = plan.decide_literal(addr, p.dport, udp).closest;
    }
    if (plan.any() && udp) detail = "egress \"*\" covers TCP only: UDP needs a udp entry";
    std::string resource = (tcp || udp) ? egress_target(host, p.dport, tcp ? "tcp" : "udp")
                                        : comet::to_string(p);
    violation(resource, tcp ? "connect" : "sendto", tcp ? "ECONNREFUSED" : "EPERM", closest, detail);
  }
  if (read->overrun) {
    violation("nflog", "connect", "ECONNREFUSED", "no match",
              "more refused packets than the NFLOG socket could hold: some were not reported one by one");
  }
}

}  // namespace soyaos::supervisor
