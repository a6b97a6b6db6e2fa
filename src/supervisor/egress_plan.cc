#include "supervisor/egress_plan.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "network/host_name.h"

namespace soyaos::supervisor {
namespace {

using manifest::Protocol;

bool is_wildcard(const std::string& host) { return host.rfind("*.", 0) == 0; }

comet::EgressRule v4_rule(uint32_t addr_host_order, uint16_t port, uint8_t proto, uint8_t prefix = 0) {
  comet::EgressRule r;
  const uint32_t be = htonl(addr_host_order);
  std::memcpy(r.addr.data(), &be, 4);
  r.port = port;
  r.proto = proto;
  r.prefix = prefix;
  return r;
}

comet::EgressRule literal_rule(const policy::IpAddress& ip, uint16_t port, uint8_t proto) {
  comet::EgressRule r;
  r.addr = ip.bytes;
  r.v6 = ip.v6;
  r.port = port;
  r.proto = proto;
  return r;
}

bool stream_protocol(Protocol p) { return p == Protocol::https || p == Protocol::http || p == Protocol::tcp; }

bool is_canonical_name(const std::string& name) {
  const auto canonical = network::canonical_host_name(name);
  return canonical.ok() && canonical.value() == name;
}


}  // namespace

std::string egress_target(const std::string& host, uint16_t port, const std::string& protocol) {
  // An IPv6 literal goes in brackets; "NAME[ADDRESS]" (a refused upstream answer, whose
  // address may be IPv6) is already bracketed.
  const bool v6 = host.find(':') != std::string::npos && host.find('[') == std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" + protocol;
}

Result<EgressPlan> EgressPlan::build(const policy::Policy& policy, const policy::OperatorNetwork& network,
                                     std::vector<manifest::EgressEntry> proxy_allow, bool learn) {
  EgressPlan p;
  p.learn_ = learn;
  p.policy_ = &policy;
  p.network_ = &network;
  p.proxy_allow_ = std::move(proxy_allow);
  // Learning: every TCP destination reaches the gateway, which relays what an entry allows
  // and only reads the first bytes of the rest (egress_learn.cc).
  p.plan_.catch_all_tcp = policy.egress_any || learn;
  p.entries_ = policy.egress;
  if (policy.moon_proxy) {
    p.plan_.proxy_port = policy::kMoonProxyPort;
    // The Moon proxy also serves clients that ignore the proxy variables (Node's fetch):
    // proxy.allow's entries join the pack's, so their names resolve to fake addresses and
    // their connections get the gateway's checks (SNI / Host / port) against proxy.allow.
    p.entries_.insert(p.entries_.end(), p.proxy_allow_.begin(), p.proxy_allow_.end());
  }
  const auto& entries = p.entries_;
  p.denied_.resize(entries.size(), false);
  for (size_t i = 0; i < entries.size(); ++i) p.denied_[i] = network.denies(entries[i].host);

  // Exact names first: one fixed fake address each, redirected on the port of every
  // entry (exact or wildcard) that covers it.
  uint32_t next_exact = kFakeExactBase + 1;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (p.denied_[i] || e.protocol == Protocol::moon_proxy || is_wildcard(e.host) ||
        policy::parse_ip(e.host)) {
      continue;
    }
    if (p.name_to_fake_.count(e.host) != 0) continue;
    if (next_exact >= kFakeWildcardBase || p.name_to_fake_.size() >= kMaxExactNames) {
      return make_error("network: too many egress host names for the fake address range", E2BIG);
    }
    p.name_to_fake_[e.host] = next_exact;
    p.fake_to_name_[next_exact] = e.host;
    ++next_exact;
  }
  std::set<std::pair<uint32_t, uint16_t>> tcp_pairs;
  for (const auto& [name, fake] : p.name_to_fake_) {
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      if (p.denied_[i] || !stream_protocol(e.protocol) || !manifest::host_matches(e.host, name)) continue;
      if (tcp_pairs.insert({fake, e.port}).second) p.plan_.redirect_tcp.push_back(v4_rule(fake, e.port, IPPROTO_TCP));
    }
  }
  // Wildcards: a /24 block each. A name is given an address in the block of the most
  // specific wildcard entry covering it (fake_address_for); the entries covering such a
  // name are that entry and every wider one (suffix patterns nest or are disjoint), so the
  // block is redirected on the ports of exactly those entries: `*.a.wild.test:18080`'s
  // block also on the port of `*.wild.test:18443`, but not the other way round.
  uint32_t next_block = kFakeWildcardBase;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (p.denied_[i] || !is_wildcard(e.host)) continue;
    if (e.protocol == Protocol::udp) {
      return make_error("network: " + e.key_path + ": a udp entry needs an exact host or address (`" + e.host +
                            "` is a wildcard: which address a datagram was meant for cannot be told apart)",
                        EINVAL);
    }
    uint32_t block = 0;
    for (const auto& [j, b] : p.wildcard_blocks_) {
      if (entries[j].host == e.host) block = b;
    }
    if (block == 0) {
      if (p.wildcard_blocks_.size() >= kMaxWildcardEntries) {
        return make_error("network: more than 255 wildcard egress hosts", E2BIG);
      }
      block = next_block;
      next_block += 0x100;
      p.block_next_[block] = 1;
    }
    p.wildcard_blocks_.emplace_back(i, block);
    for (size_t j = 0; j < entries.size(); ++j) {
      const auto& wider = entries[j];
      if (p.denied_[j] || !stream_protocol(wider.protocol) || !is_wildcard(wider.host) ||
          !manifest::host_matches(wider.host, e.host)) {
        continue;
      }
      if (tcp_pairs.insert({block, wider.port}).second) {
        p.plan_.redirect_tcp.push_back(v4_rule(block, wider.port, IPPROTO_TCP, 24));
      }
    }
  }
  // IP literals: redirected as they are.
  std::set<std::tuple<policy::IpAddress, uint16_t, uint8_t>> literal_pairs;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    auto ip = policy::parse_ip(e.host);
    if (p.denied_[i] || !ip) continue;
    const uint8_t proto = e.protocol == Protocol::udp ? IPPROTO_UDP : IPPROTO_TCP;
    if (!literal_pairs.insert({*ip, e.port, proto}).second) continue;
    if (proto == IPPROTO_TCP) {
      p.plan_.redirect_tcp.push_back(literal_rule(*ip, e.port, proto));
    }
  }
  // UDP: one relay port per entry (docs/network-layer.md, "UDP path").
  std::set<std::pair<std::string, uint16_t>> udp_seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (p.denied_[i] || e.protocol != Protocol::udp || !udp_seen.insert({e.host, e.port}).second) continue;
    if (auto ip = policy::parse_ip(e.host)) {
      p.plan_.allow_udp.push_back(literal_rule(*ip, e.port, IPPROTO_UDP));
    } else {
      p.plan_.allow_udp.push_back(v4_rule(p.name_to_fake_.at(e.host), e.port, IPPROTO_UDP));
    }
    p.udp_entries_.push_back(i);
  }
  if (auto s = comet::validate_network_plan(p.plan_); !s) return s.error();
  return p;
}

std::vector<size_t> EgressPlan::entries_for_name(const std::string& name) const {
  std::vector<size_t> out;
  // Operator policy applies to the concrete name, whatever pattern the pack declared
  // (issue #15: a wildcard entry reached a name egress.deny lists). A name that is not
  // canonical (network::canonical_host_name) matches nothing: callers canonicalise first.
  if (!is_canonical_name(name) || network_->denies(name)) return out;
  const auto& entries = entries_;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (denied_[i] || entries[i].protocol == Protocol::moon_proxy) continue;
    if (policy::parse_ip(entries[i].host)) continue;
    if (manifest::host_matches(entries[i].host, name)) out.push_back(i);
  }
  return out;
}

std::optional<size_t> EgressPlan::denied_entry_for_name(const std::string& name) const {
  const auto& entries = entries_;
  const bool name_denied = network_->denies(name);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].protocol == Protocol::moon_proxy || policy::parse_ip(entries[i].host)) continue;
    if ((denied_[i] || name_denied) && manifest::host_matches(entries[i].host, name)) return i;
  }
  return std::nullopt;
}

std::optional<uint32_t> EgressPlan::fake_address_for(const std::string& name) {
  if (auto it = name_to_fake_.find(name); it != name_to_fake_.end()) return it->second;
  uint32_t addr = 0;
  if (policy_->egress_any) {
    // Offsets not used by exact names (those are fixed in 198.18.0.x upwards) nor
    // wildcard blocks: under "*" there are neither, every name draws from the range.
    if (any_next_ >= kFakeRangeSize - 1) return std::nullopt;
    addr = kFakeRangeBase + any_next_++;
    if ((addr & 0xff) == 0) addr = kFakeRangeBase + any_next_++;  // skip x.y.z.0
  } else {
    if (entries_for_name(name).empty()) return std::nullopt;
    // The most specific wildcard covering the name (see build: its block is redirected on
    // the ports of every entry covering the name).
    std::optional<std::pair<size_t, uint32_t>> best;
    for (const auto& [i, block] : wildcard_blocks_) {
      if (!manifest::host_matches(entries_[i].host, name)) continue;
      if (!best || entries_[i].host.size() > entries_[best->first].host.size()) best = {i, block};
    }
    if (!best) return std::nullopt;
    uint32_t& next = block_next_[best->second];
    if (next > 254) return std::nullopt;
    addr = best->second + next++;
  }
  name_to_fake_[name] = addr;
  fake_to_name_[addr] = name;
  return addr;
}

std::optional<uint32_t> EgressPlan::learn_address_for(const std::string& name) {
  if (auto it = name_to_fake_.find(name); it != name_to_fake_.end()) return it->second;
  if (!learn_ || learn_next_ > kMaxLearnNames) return std::nullopt;
  const uint32_t addr = kFakeLearnBase + learn_next_++;
  name_to_fake_[name] = addr;
  fake_to_name_[addr] = name;
  return addr;
}

std::optional<std::string> EgressPlan::name_for_fake(uint32_t addr) const {
  auto it = fake_to_name_.find(addr);
  if (it == fake_to_name_.end()) return std::nullopt;
  return it->second;
}

EgressDecision EgressPlan::decide_name(const std::string& name, uint16_t port, bool udp) const {
  EgressDecision d;
  d.closest = "no match";
  if (policy_->egress_any) {
    d.any = !udp;
    if (!udp && is_canonical_name(name) && !network_->denies(name)) return d;
    d.any = false;
    d.closest = "capabilities.egress";
    return d;
  }
  const auto& entries = entries_;
  for (size_t i : entries_for_name(name)) {
    const bool entry_udp = entries[i].protocol == Protocol::udp;
    if (entries[i].port == port && entry_udp == udp) {
      d.entries.push_back(i);
    } else if (d.closest == "no match") {
      d.closest = entries[i].key_path;  // the host matched: port or protocol differs
    }
  }
  if (!d.entries.empty()) d.closest = entries[d.entries.front()].key_path;
  return d;
}

EgressDecision EgressPlan::decide_literal(const policy::IpAddress& addr, uint16_t port, bool udp) const {
  EgressDecision d;
  d.closest = "no match";
  if (policy_->egress_any) {
    d.any = !udp && !network_->denies(policy::to_string(addr));
    if (!d.any) d.closest = "capabilities.egress";
    return d;
  }
  const auto& entries = entries_;
  for (size_t i = 0; i < entries.size(); ++i) {
    auto ip = policy::parse_ip(entries[i].host);
    if (denied_[i] || !ip || *ip != addr) continue;
    const bool entry_udp = entries[i].protocol == Protocol::udp;
    if (entries[i].port == port && entry_udp == udp) {
      d.entries.push_back(i);
    } else if (d.closest == "no match") {
      d.closest = entries[i].key_path;
    }
  }
  if (!d.entries.empty()) d.closest = entries[d.entries.front()].key_path;
  return d;
}

}  // namespace soyaos::supervisor
