// The operator's network policy (SPEC.md C6, C6a), as plain data: what the Moon's
// configuration (`moon.yaml`: dns.hosts, dns.upstream, egress.deny, egress.allow_private,
// egress.connect_to, proxy.allow, tls.ca_files) says about every run on this machine.
// Parsed by src/moon/config.cc; read by the egress gateway and the DNS stub
// (src/supervisor). No I/O here.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::policy {

struct IpAddress {
  std::array<uint8_t, 16> bytes{};  // network byte order; IPv4 in the first 4 bytes, rest 0
  bool v6 = false;
  friend auto operator<=>(const IpAddress&, const IpAddress&) = default;
};

// "192.0.2.1", "2001:db8::1", "[2001:db8::1]" (inet_pton syntax; no zone ids, no
// shortened IPv4 like "127.1"). nullopt otherwise.
std::optional<IpAddress> parse_ip(std::string_view text);
// "192.0.2.1", "2001:db8::1" (inet_ntop form, no brackets).
std::string to_string(const IpAddress& addr);

struct Cidr {
  IpAddress base;       // host bits zero
  uint8_t prefix = 0;   // 0..32 (IPv4) or 0..128 (IPv6)
  friend auto operator<=>(const Cidr&, const Cidr&) = default;
};

// "10.0.0.0/8", "fd00::/8"; a bare address is a /32 or /128. Host bits set below the
// prefix are an error (nullopt): "10.0.0.1/8" is a typo, not a range.
std::optional<Cidr> parse_cidr(std::string_view text);
std::string to_string(const Cidr& cidr);
// Same family and the first `prefix` bits equal. An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) is compared as the IPv4 address it carries.
bool contains(const Cidr& cidr, const IpAddress& addr);

// The address itself, then every IPv4 address an IPv6 address carries in a form that some
// path (the kernel's dual-stack sockets, a NAT64 gateway, a 6to4 or Teredo relay) would
// turn into a connection to that IPv4 address: IPv4-mapped ::ffff:a.b.c.d,
// IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 (RFC 6052) and the local-use 64:ff9b:1::/48
// (RFC 8215; every RFC 6052 embedding, /48 to /96, since its prefix length is local),
// 6to4 2002:AABB:CCDD::/48, Teredo 2001:0::/32 (server and de-obfuscated client) and the
// ISATAP interface id ::0:5efe:a.b.c.d. Every address rule (egress.deny, the private
// ranges, the host's own addresses) is checked against each form.
std::vector<IpAddress> address_forms(const IpAddress& addr);
// Some form of a equals some form of b ("::ffff:10.0.0.1" is 10.0.0.1).
bool same_address(const IpAddress& a, const IpAddress& b);

// The ranges SPEC.md C6 refuses for upstream answers unless the operator allows them:
// 127/8, 10/8, 172.16/12, 192.168/16, 169.254/16, 100.64/10, ::1, fc00::/7, fe80::/10 —
// plus the unspecified and "this network" addresses (0/8, ::), multicast (224/4, ff00::/8),
// broadcast 255.255.255.255, and every address whose address_forms include one of them,
// which no upstream answer should ever steer a connection to either.
bool is_private_address(const IpAddress& addr);

struct DnsUpstream {
  IpAddress server;
  uint16_t port = 53;
};

// An egress.connect_to target: where the gateway connects instead of the address the name
// resolves to (and the port the agent asked for), as curl's --connect-to.
struct ConnectTarget {
  IpAddress addr;
  uint16_t port = 0;
  friend auto operator<=>(const ConnectTarget&, const ConnectTarget&) = default;
};

struct OperatorNetwork {
  // dns.hosts: lower-cased DNS name -> its addresses, in file order. Consulted before the
  // upstream resolver, like /etc/hosts; its addresses are trusted as given (C6).
  std::map<std::string, std::vector<IpAddress>> dns_hosts;
  // dns.upstream: nullopt = "system" (the host's resolver, getaddrinfo), else a server.
  std::optional<DnsUpstream> dns_upstream;
  // egress.deny: normalised host patterns (DNS name, "*.suffix" wildcard, IP literal as
  // to_string gives it) that no pack may reach, whatever it declares.
  std::vector<std::string> egress_deny;
  // egress.allow_private: ranges upstream answers may fall in despite C6's rebinding rule.
  std::vector<Cidr> allow_private;
  // proxy.allow: the Moon proxy's own allowlist (C7), host + port + protocol
  // (https | http | tcp), key paths "proxy.allow[i]".
  std::vector<manifest::EgressEntry> proxy_allow;
  // egress.connect_to: (lower-cased DNS name, or an IP literal in to_string form; port) ->
  // where the gateway, the UDP relays and the Moon proxy connect for that destination.
  // Trusted as given, like dns.hosts (no rebinding rule), any protocol.
  std::map<std::pair<std::string, uint16_t>, ConnectTarget> connect_to;
  // tls.ca_files: absolute paths of PEM files (each holding at least one certificate,
  // checked when moon.yaml is loaded) trusted in addition to the system's roots wherever the
  // Moon verifies an upstream's TLS certificate (SPEC C11, C12).
  std::vector<std::string> tls_ca_files;

  // True when `host` (a lower-case DNS name, or an IP literal in to_string form) matches an
  // egress.deny pattern: exact, wildcard strictly below (manifest::host_matches), or the
  // same address.
  [[nodiscard]] bool denies(std::string_view host) const;
  // True when some form of `addr` (address_forms) is an egress.deny address.
  [[nodiscard]] bool denies_address(const IpAddress& addr) const;
  // The egress.connect_to target for a connection to `host` (as `denies` takes it) on `port`.
  [[nodiscard]] std::optional<ConnectTarget> connect_target(std::string_view host, uint16_t port) const;
  // True when `addr` falls in an egress.allow_private range.
  [[nodiscard]] bool private_allowed(const IpAddress& addr) const;
  // True when some form of `addr` is private (is_private_address) and no egress.allow_private
  // range covers that form: the C6 rebinding rule for an upstream answer.
  [[nodiscard]] bool refuses_private(const IpAddress& addr) const;
};

}  // namespace soyaos::policy
