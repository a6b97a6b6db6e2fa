// NFLOG (SPEC.md C6): every packet the agent's netns refused becomes a violation.

#include <netinet/in.h>

#include <algorithm>

#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

void EgressService::Impl::drain_nflog() {
  auto read = comet::read_nflog(fds.nflog);
  if (!read) return;
  for (const auto& p : read->packets) {
    if (std::find(service_ports.begin(), service_ports.end(), p.sport) != service_ports.end()) {
      continue;  // a late reply from one of our own sockets, not the agent's attempt
    }
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
