// Egress policy of one run (SPEC.md C6, C6a): the manifest's egress entries and the
// operator's network policy compiled into (1) the Comet's NetworkPlan — which (address,
// port) pairs the netns redirects to the gateway or a UDP relay — and (2) the decisions the
// DNS stub, the gateway and the NFLOG reader take at run time. docs/network.md.
//
// Fake addresses (DESIGN.md): the stub answers an allowed name with an address of
// 198.18.0.0/15 that stands for that name alone, so the gateway knows the exact name behind
// every connection, whatever CDN shares the real address:
//   198.18.0.1 ..      one address per exact host name, fixed before the run (nft rules
//                      are installed before the agent starts);
//   198.19.K.0/24      a block per wildcard entry K; names below the wildcard get the block's
//                      addresses as they are first asked for (254 names per run);
//   198.18.0.0/15      egress "*": the whole range, handed out as names are asked for.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comet/network.h"
#include "common/result.h"
#include "manifest/manifest.h"
#include "policy/operator_network.h"
#include "policy/policy.h"

namespace soyaos::supervisor {

inline constexpr uint32_t kFakeExactBase = 0xC6120000;     // 198.18.0.0 (host byte order)
inline constexpr uint32_t kFakeWildcardBase = 0xC6130000;  // 198.19.0.0
inline constexpr uint32_t kFakeRangeBase = 0xC6120000;     // 198.18.0.0/15
inline constexpr uint32_t kFakeRangeSize = 0x20000;
inline constexpr size_t kMaxWildcardEntries = 255;
// `pack learn` (SPEC.md C13): names nothing declares get addresses of 198.19.255.0/24, the
// block no wildcard entry can take (kMaxWildcardEntries blocks end below it): at most
// kMaxLearnNames per run, then SERVFAIL (the name is still observed).
inline constexpr uint32_t kFakeLearnBase = 0xC613FF00;  // 198.19.255.0
inline constexpr uint32_t kMaxLearnNames = 254;
inline constexpr size_t kMaxExactNames = 65000;

struct EgressDecision {
  std::vector<size_t> entries;  // indexes into policy.egress that allow this (host, port)
  std::string closest;          // manifest_entry for a violation: key path or "no match"
  bool any = false;             // egress "*"
};

class EgressPlan {
 public:
  // Fails (the run must not start, C1) for what this Comet cannot enforce exactly: a `udp`
  // entry on a wildcard host, more wildcard entries or names than the fake range holds.
  // `proxy_allow` is the operator's allowlist for the Moon proxy (moon.yaml proxy.allow, C7).
  // `learn` (`pack learn`, SPEC.md C13): every TCP destination goes to the gateway (which
  // classifies and closes what no entry allows) and the stub answers undeclared names with
  // learning addresses (learn_address_for).
  static Result<EgressPlan> build(const policy::Policy& policy, const policy::OperatorNetwork& network,
                                  std::vector<manifest::EgressEntry> proxy_allow = {}, bool learn = false);

  [[nodiscard]] const comet::NetworkPlan& network_plan() const { return plan_; }
  [[nodiscard]] const policy::Policy& policy() const { return *policy_; }
  [[nodiscard]] const policy::OperatorNetwork& operator_network() const { return *network_; }
  [[nodiscard]] bool any() const { return policy_->egress_any; }
  [[nodiscard]] bool learn() const { return learn_; }
  [[nodiscard]] const std::vector<manifest::EgressEntry>& proxy_allow() const { return proxy_allow_; }

  // --- DNS stub ---
  // The entries (not denied by the operator) whose host pattern covers `name` (indexes as
  // entry() takes them).
  [[nodiscard]] std::vector<size_t> entries_for_name(const std::string& name) const;
  // The first entry whose pattern covers `name` although the operator denies it, if any.
  [[nodiscard]] std::optional<size_t> denied_entry_for_name(const std::string& name) const;
  // The fake address of an allowed name, allocating one in its wildcard block (or the
  // whole range under "*") on first use. nullopt when the block is exhausted.
  std::optional<uint32_t> fake_address_for(const std::string& name);
  // Learn mode: the learning address of a name no entry allows (kFakeLearnBase + 1..254,
  // the same one for the same name); nullopt when the block is exhausted.
  std::optional<uint32_t> learn_address_for(const std::string& name);
  // The name behind a fake address that was handed out (or fixed for an exact name).
  [[nodiscard]] std::optional<std::string> name_for_fake(uint32_t addr) const;
  [[nodiscard]] static bool is_fake(uint32_t addr) { return addr - kFakeRangeBase < kFakeRangeSize; }

  // --- gateway and NFLOG ---
  // Which entries allow a connection to `name` (a resolved fake address) on `port` over a
  // stream protocol (https, http, tcp), or to the IP literal `addr`.
  [[nodiscard]] EgressDecision decide_name(const std::string& name, uint16_t port, bool udp) const;
  [[nodiscard]] EgressDecision decide_literal(const policy::IpAddress& addr, uint16_t port, bool udp) const;
  // The manifest entry each UDP relay serves (plan.allow_udp[i] <-> udp_entries()[i]).
  [[nodiscard]] const std::vector<size_t>& udp_entries() const { return udp_entries_; }
  // Entry i: the pack's capabilities.egress[i], then (for a moon-proxy pack) the operator's
  // proxy.allow entries, key paths "proxy.allow[j]".
  [[nodiscard]] const manifest::EgressEntry& entry(size_t i) const { return entries_[i]; }
  // True for an entry that came from proxy.allow (reached without the proxy variables).
  [[nodiscard]] bool from_proxy_allow(size_t i) const { return i >= policy_->egress.size(); }

 private:
  const policy::Policy* policy_ = nullptr;
  const policy::OperatorNetwork* network_ = nullptr;
  comet::NetworkPlan plan_;
  std::vector<manifest::EgressEntry> entries_;       // see entry()
  std::vector<bool> denied_;                         // per entry: egress.deny covers its host
  std::map<std::string, uint32_t> name_to_fake_;     // every name handed out so far
  std::map<uint32_t, std::string> fake_to_name_;
  std::vector<std::pair<size_t, uint32_t>> wildcard_blocks_;  // (entry index, block base)
  std::map<uint32_t, uint32_t> block_next_;          // block base -> next host number
  uint32_t any_next_ = 1;                            // "*": next offset in the range
  bool learn_ = false;
  uint32_t learn_next_ = 1;                          // learn mode: next host in the learning block
  std::vector<size_t> udp_entries_;
  std::vector<manifest::EgressEntry> proxy_allow_;
};

// "NAME:PORT/PROTOCOL" as events show an egress target; IPv6 literals in brackets.
std::string egress_target(const std::string& host, uint16_t port, const std::string& protocol);

}  // namespace soyaos::supervisor
