// The operator's network policy (SPEC.md C6, C6a): address parsing, CIDR ranges, the
// private-address rule the egress gateway applies to upstream answers, and the
// egress.deny / egress.allow_private lookups. Pure functions, no I/O.
#include "policy/operator_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "manifest/manifest.h"

namespace soyaos::policy {
namespace {

// Longer than any textual address ("ffff:...:255.255.255.255" is 45 bytes, plus brackets
// and a prefix): anything longer is refused before it is copied for inet_pton.
constexpr size_t kMaxAddressText = 64;

bool is_v4_mapped(const IpAddress& a) {
  if (!a.v6) return false;
  for (size_t i = 0; i < 10; ++i) {
    if (a.bytes[i] != 0) return false;
  }
  return a.bytes[10] == 0xff && a.bytes[11] == 0xff;
}

// ::a.b.c.d (deprecated "IPv4-compatible", RFC 4291 2.5.5.1), excluding :: and ::1, which
// are IPv6 addresses of their own.
bool is_v4_compatible(const IpAddress& a) {
  if (!a.v6) return false;
  for (size_t i = 0; i < 12; ++i) {
    if (a.bytes[i] != 0) return false;
  }
  const bool unspecified_or_loopback =
      a.bytes[12] == 0 && a.bytes[13] == 0 && a.bytes[14] == 0 && (a.bytes[15] == 0 || a.bytes[15] == 1);
  return !unspecified_or_loopback;
}

IpAddress embedded_v4(const IpAddress& a) {
  IpAddress v4;
  std::copy_n(a.bytes.begin() + 12, 4, v4.bytes.begin());
  return v4;
}

IpAddress v4_of(uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3) {
  IpAddress v4;
  v4.bytes = {b0, b1, b2, b3};
  return v4;
}

bool starts_with(const IpAddress& a, std::initializer_list<uint8_t> prefix) {
  return a.v6 && std::equal(prefix.begin(), prefix.end(), a.bytes.begin());
}

IpAddress mapped_v6(const IpAddress& v4) {
  IpAddress v6;
  v6.v6 = true;
  v6.bytes[10] = v6.bytes[11] = 0xff;
  std::copy_n(v4.bytes.begin(), 4, v6.bytes.begin() + 12);
  return v6;
}

// The first `prefix` bits of a and b are equal.
bool prefix_equal(const std::array<uint8_t, 16>& a, const std::array<uint8_t, 16>& b, unsigned prefix) {
  const unsigned whole = prefix / 8;
  if (!std::equal(a.begin(), a.begin() + whole, b.begin())) return false;
  const unsigned rest = prefix % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

Cidr v4_range(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t prefix) {
  Cidr r;
  r.base.bytes = {a, b, c, d};
  r.prefix = prefix;
  return r;
}

Cidr v6_range(std::array<uint8_t, 16> bytes, uint8_t prefix) {
  Cidr r;
  r.base.bytes = bytes;
  r.base.v6 = true;
  r.prefix = prefix;
  return r;
}

bool private_v4(const IpAddress& a) {
  static const Cidr kRanges[] = {
      v4_range(0, 0, 0, 0, 8),         // "this network", 0.0.0.0
      v4_range(10, 0, 0, 0, 8),        // private
      v4_range(100, 64, 0, 0, 10),     // CGNAT
      v4_range(127, 0, 0, 0, 8),       // loopback
      v4_range(169, 254, 0, 0, 16),    // link-local, cloud metadata
      v4_range(172, 16, 0, 0, 12),     // private
      v4_range(192, 168, 0, 0, 16),    // private
      v4_range(224, 0, 0, 0, 4),       // multicast
      v4_range(255, 255, 255, 255, 32) // limited broadcast
  };
  return std::any_of(std::begin(kRanges), std::end(kRanges), [&](const Cidr& r) { return contains(r, a); });
}

bool private_v6(const IpAddress& a) {
  static const Cidr kRanges[] = {
      v6_range({}, 128),                                                  // ::
      v6_range({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128),   // ::1
      v6_range({0xfc}, 7),                                                // unique local
      v6_range({0xfe, 0x80}, 10),                                         // link-local
      v6_range({0xff}, 8),                                                // multicast
  };
  return std::any_of(std::begin(kRanges), std::end(kRanges), [&](const Cidr& r) { return contains(r, a); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  return out;
}

}  // namespace

std::optional<IpAddress> parse_ip(std::string_view text) {
  if (text.empty() || text.size() > kMaxAddressText) return std::nullopt;
  bool bracketed = false;
  if (text.front() == '[') {
    if (text.size() < 3 || text.back() != ']') return std::nullopt;
    text = text.substr(1, text.size() - 2);
    bracketed = true;
  }
  const std::string s(text);  // inet_pton needs a NUL-terminated string
  IpAddress a;
  if (!bracketed && ::inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) return a;
  if (::inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) {
    a.v6 = true;
    return a;
  }
  return std::nullopt;
}

std::string to_string(const IpAddress& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(addr.v6 ? AF_INET6 : AF_INET, addr.bytes.data(), buf, sizeof buf) == nullptr) return "?";
  return buf;
}

std::optional<Cidr> parse_cidr(std::string_view text) {
  if (text.size() > kMaxAddressText) return std::nullopt;
  const size_t slash = text.find('/');
  const auto addr = parse_ip(text.substr(0, slash));
  if (!addr) return std::nullopt;
  const unsigned max = addr->v6 ? 128 : 32;
  unsigned prefix = max;
  if (slash != std::string_view::npos) {
    const std::string_view digits = text.substr(slash + 1);
    // At most 3 digits, no sign, no leading zeros ("/08" is more likely a typo than a /8).
    if (digits.empty() || digits.size() > 3 || (digits.size() > 1 && digits[0] == '0') ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    prefix = 0;
    for (char c : digits) prefix = prefix * 10 + static_cast<unsigned>(c - '0');
    if (prefix > max) return std::nullopt;
  }
  // Host bits must be zero: "10.0.0.1/8" is a typo, not a range.
  IpAddress zeroed;
  zeroed.v6 = addr->v6;
  for (unsigned bit = 0; bit < prefix; ++bit) {
    const unsigned byte = bit / 8;
    const auto mask = static_cast<uint8_t>(0x80 >> (bit % 8));
    zeroed.bytes[byte] |= static_cast<uint8_t>(addr->bytes[byte] & mask);
  }
  if (zeroed != *addr) return std::nullopt;
  return Cidr{*addr, static_cast<uint8_t>(prefix)};
}

std::string to_string(const Cidr& cidr) { return to_string(cidr.base) + "/" + std::to_string(cidr.prefix); }

bool contains(const Cidr& cidr, const IpAddress& addr) {
  IpAddress a = addr;
  if (!cidr.base.v6 && is_v4_mapped(a)) a = embedded_v4(a);
  // An IPv6 range over the mapped space (::ffff:0:0/96) covers the IPv4 addresses too.
  if (cidr.base.v6 && !a.v6) a = mapped_v6(a);
  if (a.v6 != cidr.base.v6) return false;
  return prefix_equal(cidr.base.bytes, a.bytes, std::min<unsigned>(cidr.prefix, a.v6 ? 128 : 32));
}

std::vector<IpAddress> address_forms(const IpAddress& addr) {
  std::vector<IpAddress> out{addr};
  if (!addr.v6) return out;
  const auto& b = addr.bytes;
  auto add = [&](const IpAddress& v4) {
    if (std::find(out.begin(), out.end(), v4) == out.end()) out.push_back(v4);
  };
  if (is_v4_mapped(addr) || is_v4_compatible(addr)) add(embedded_v4(addr));
  // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052 2.1).
  if (starts_with(addr, {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0})) add(embedded_v4(addr));
  // Local-use NAT64 64:ff9b:1::/48 (RFC 8215): the operator picks the prefix length, so
  // every RFC 6052 2.2 layout counts (bits 64..71 are the reserved "u" octet).
  if (starts_with(addr, {0, 0x64, 0xff, 0x9b, 0, 1})) {
    add(v4_of(b[6], b[7], b[9], b[10]));    // /48
    add(v4_of(b[7], b[9], b[10], b[11]));   // /56
    add(v4_of(b[9], b[10], b[11], b[12]));  // /64
    add(embedded_v4(addr));                 // /96
  }
  if (starts_with(addr, {0x20, 0x02})) add(v4_of(b[2], b[3], b[4], b[5]));  // 6to4 (RFC 3056)
  if (starts_with(addr, {0x20, 0x01, 0, 0})) {                                // Teredo (RFC 4380)
    add(v4_of(b[4], b[5], b[6], b[7]));
    add(v4_of(static_cast<uint8_t>(~b[12]), static_cast<uint8_t>(~b[13]), static_cast<uint8_t>(~b[14]),
              static_cast<uint8_t>(~b[15])));
  }
  // ISATAP interface identifier (RFC 5214 6.1): 0000:5efe or 0200:5efe, then the IPv4.
  if ((b[8] == 0 || b[8] == 2) && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe) add(embedded_v4(addr));
  return out;
}

bool same_address(const IpAddress& a, const IpAddress& b) {
  const auto fa = address_forms(a);
  const auto fb = address_forms(b);
  return std::any_of(fa.begin(), fa.end(), [&](const IpAddress& x) { return std::find(fb.begin(), fb.end(), x) != fb.end(); });
}

bool is_private_address(const IpAddress& addr) {
  const auto forms = address_forms(addr);
  return std::any_of(forms.begin(), forms.end(),
                     [](const IpAddress& f) { return f.v6 ? private_v6(f) : private_v4(f); });
}

bool OperatorNetwork::denies(std::string_view host) const {
  std::string h = lower(host);
  if (!h.empty() && h.back() == '.') h.pop_back();  // "evil.example.com." is the same name
  const std::optional<IpAddress> host_ip = parse_ip(h);
  for (const std::string& pattern : egress_deny) {
    if (pattern == h) return true;
    if (host_ip) {
      if (const auto p = parse_ip(pattern); p && same_address(*p, *host_ip)) return true;
      continue;
    }
    if (pattern.size() > 2 && pattern[0] == '*' && pattern[1] == '.' && manifest::host_matches(pattern, h)) return true;
  }
  return false;
}

bool OperatorNetwork::denies_address(const IpAddress& addr) const {
  return std::any_of(egress_deny.begin(), egress_deny.end(), [&](const std::string& pattern) {
    const auto p = parse_ip(pattern);
    return p && same_address(*p, addr);
  });
}

std::optional<ConnectTarget> OperatorNetwork::connect_target(std::string_view host, uint16_t port) const {
  if (connect_to.empty()) return std::nullopt;
  std::string h = lower(host);
  if (!h.empty() && h.back() == '.') h.pop_back();
  if (const auto ip = parse_ip(h)) h = to_string(*ip);  // one spelling per address
  const auto it = connect_to.find({h, port});
  if (it == connect_to.end()) return std::nullopt;
  return it->second;
}

bool OperatorNetwork::private_allowed(const IpAddress& addr) const {
  return std::any_of(allow_private.begin(), allow_private.end(), [&](const Cidr& r) { return contains(r, addr); });
}

bool OperatorNetwork::refuses_private(const IpAddress& addr) const {
  const auto forms = address_forms(addr);
  return std::any_of(forms.begin(), forms.end(), [&](const IpAddress& f) {
    return (f.v6 ? private_v6(f) : private_v4(f)) && !private_allowed(f);
  });
}

}  // namespace soyaos::policy
