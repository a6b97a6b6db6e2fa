// Upstream name resolution for the egress gateway, on the Moon's behalf (SPEC.md C6, C6a):
// the operator's dns.hosts map first, then the upstream resolver (the system's, or the
// configured dns.upstream server). Blocking: the gateway calls it off its event loop.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "policy/operator_network.h"

namespace soyaos::supervisor {

struct ResolvedAddress {
  policy::IpAddress addr;
  bool from_hosts_map = false;  // from dns.hosts: trusted as given (no rebinding check)
};

// Resolves `name` (lower-case DNS name, no trailing dot). dns.hosts (exact match) wins and
// is final; otherwise system (getaddrinfo, AF_UNSPEC, SOCK_STREAM) or the dns.upstream
// server (A and AAAA queries over UDP, TCP on truncation; 2 s timeout, one retry).
// Addresses are returned IPv4 first, de-duplicated, in the resolver's order otherwise.
// Errors: ENOENT for a name that does not exist / has no address, ETIMEDOUT, EIO for a
// malformed upstream answer; the message names the name.
Result<std::vector<ResolvedAddress>> resolve_host(const policy::OperatorNetwork& network,
                                                  const std::string& name);

}  // namespace soyaos::supervisor
