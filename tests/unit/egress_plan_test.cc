// The egress plan: which (address, port) pairs the netns redirects, and the decisions the
// DNS stub, the gateway and the NFLOG reader take (src/supervisor/egress_plan.h).
#include "supervisor/egress_plan.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace soyaos::supervisor {
namespace {

using manifest::Protocol;

manifest::EgressEntry entry(const std::string& host, uint16_t port, Protocol protocol, int index) {
  manifest::EgressEntry e;
  e.host = host;
  e.port = port;
  e.protocol = protocol;
  e.key_path = "capabilities.egress[" + std::to_string(index) + "]";
  return e;
}

policy::Policy with_entries(std::vector<manifest::EgressEntry> entries) {
  policy::Policy p;
  p.egress = std::move(entries);
  return p;
}

std::string dotted(uint32_t host_order) {
  in_addr a{htonl(host_order)};
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

TEST(EgressPlan, ExactNamesGetFixedFakeAddressesRedirectedOnTheirPorts) {
  auto p = with_entries({entry("api.example.com", 443, Protocol::https, 0),
                         entry("api.example.com", 80, Protocol::http, 1),
                         entry("db.example.com", 5432, Protocol::tcp, 2)});
  policy::OperatorNetwork net;
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan) << plan.error().describe();
  auto api = plan->fake_address_for("api.example.com");
  auto db = plan->fake_address_for("db.example.com");
  ASSERT_TRUE(api && db);
  EXPECT_NE(*api, *db);
  EXPECT_TRUE(EgressPlan::is_fake(*api));
  EXPECT_EQ(plan->name_for_fake(*api), "api.example.com");
  const std::string rules = comet::nft_ruleset(plan->network_plan());
  EXPECT_NE(rules.find("ip daddr " + dotted(*api) + " tcp dport 443 redirect to :15001"), std::string::npos) << rules;
  EXPECT_NE(rules.find("ip daddr " + dotted(*api) + " tcp dport 80 redirect"), std::string::npos);
  EXPECT_NE(rules.find("ip daddr " + dotted(*db) + " tcp dport 5432 redirect"), std::string::npos);
  EXPECT_EQ(rules.find("ip daddr " + dotted(*db) + " tcp dport 443"), std::string::npos);
  // Undeclared names get nothing.
  EXPECT_FALSE(plan->fake_address_for("example.com"));
  EXPECT_TRUE(plan->entries_for_name("evil.com").empty());
}

TEST(EgressPlan, DecisionsNeedHostPortAndTransport) {
  auto p = with_entries({entry("api.example.com", 443, Protocol::https, 0),
                         entry("dns.example.com", 53, Protocol::udp, 1)});
  policy::OperatorNetwork net;
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  auto ok = plan->decide_name("api.example.com", 443, false);
  ASSERT_EQ(ok.entries.size(), 1u);
  EXPECT_EQ(ok.closest, "capabilities.egress[0]");
  auto wrong_port = plan->decide_name("api.example.com", 80, false);
  EXPECT_TRUE(wrong_port.entries.empty());
  EXPECT_EQ(wrong_port.closest, "capabilities.egress[0]");  // the host matched: closest entry
  auto udp_on_tcp = plan->decide_name("dns.example.com", 53, false);
  EXPECT_TRUE(udp_on_tcp.entries.empty());
  EXPECT_EQ(plan->decide_name("dns.example.com", 53, true).entries.size(), 1u);
  EXPECT_EQ(plan->decide_name("other.com", 443, false).closest, "no match");
  ASSERT_EQ(plan->network_plan().allow_udp.size(), 1u);
  ASSERT_EQ(plan->udp_entries().size(), 1u);
  EXPECT_EQ(plan->udp_entries()[0], 1u);
}

TEST(EgressPlan, WildcardsGetABlockAndMatchOnlyStrictlyBelow) {
  auto p = with_entries({entry("*.example.com", 443, Protocol::https, 0)});
  policy::OperatorNetwork net;
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->entries_for_name("example.com").empty());  // the apex is not below
  ASSERT_EQ(plan->entries_for_name("a.example.com").size(), 1u);
  auto a = plan->fake_address_for("a.example.com");
  auto b = plan->fake_address_for("b.c.example.com");
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*a & 0xffffff00u, *b & 0xffffff00u);  // the same /24 block
  EXPECT_EQ(plan->fake_address_for("a.example.com"), a);  // stable
  const std::string rules = comet::nft_ruleset(plan->network_plan());
  EXPECT_NE(rules.find("ip daddr " + dotted(*a & 0xffffff00u) + "/24 tcp dport 443 redirect"), std::string::npos)
      << rules;
  // A block holds 254 names; then the stub answers SERVFAIL rather than reuse one.
  for (int i = 0; i < 252; ++i) ASSERT_TRUE(plan->fake_address_for("n" + std::to_string(i) + ".example.com"));
  EXPECT_FALSE(plan->fake_address_for("one-too-many.example.com"));
}

TEST(EgressPlan, UdpOnAWildcardIsRefusedBeforeTheRun) {
  auto p = with_entries({entry("*.example.com", 53, Protocol::udp, 0)});
  policy::OperatorNetwork net;
  auto plan = EgressPlan::build(p, net);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message.find("capabilities.egress[0]"), std::string::npos);
}

TEST(EgressPlan, LiteralsAreRedirectedAsTheyAre) {
  auto p = with_entries({entry("192.0.2.7", 8443, Protocol::https, 0), entry("2001:db8::7", 443, Protocol::tcp, 1)});
  policy::OperatorNetwork net;
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  const std::string rules = comet::nft_ruleset(plan->network_plan());
  EXPECT_NE(rules.find("ip daddr 192.0.2.7 tcp dport 8443 redirect"), std::string::npos) << rules;
  EXPECT_NE(rules.find("ip6 daddr 2001:db8::7 tcp dport 443 redirect"), std::string::npos);
  auto addr = policy::parse_ip("192.0.2.7");
  ASSERT_TRUE(addr);
  EXPECT_EQ(plan->decide_literal(*addr, 8443, false).entries.size(), 1u);
  EXPECT_TRUE(plan->decide_literal(*addr, 443, false).entries.empty());
  EXPECT_TRUE(plan->entries_for_name("192.0.2.7").empty());  // literals are not names for DNS
}

TEST(EgressPlan, OperatorDenyRemovesEntries) {
  auto p = with_entries({entry("api.example.com", 443, Protocol::https, 0), entry("ok.example.com", 443, Protocol::https, 1)});
  policy::OperatorNetwork net;
  net.egress_deny = {"api.example.com"};
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->entries_for_name("api.example.com").empty());
  EXPECT_EQ(plan->denied_entry_for_name("api.example.com"), 0u);
  EXPECT_FALSE(plan->fake_address_for("api.example.com"));
  EXPECT_TRUE(plan->fake_address_for("ok.example.com"));
  EXPECT_EQ(plan->network_plan().redirect_tcp.size(), 1u);
}

// Issue #15: operator policy is checked against the concrete name, not only the pattern
// the pack declared, with the name's odd spellings refused rather than matched.
TEST(EgressPlan, OperatorDenyAppliesToConcreteNamesUnderAWildcard) {
  auto p = with_entries({entry("*.pw.test", 443, Protocol::https, 0), entry("*.pw.test", 80, Protocol::http, 1)});
  policy::OperatorNetwork net;
  net.egress_deny = {"secret.pw.test", "*.vault.pw.test"};
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan) << plan.error().describe();
  EXPECT_EQ(plan->entries_for_name("open.pw.test").size(), 2u);
  for (const char* denied : {"secret.pw.test", "a.vault.pw.test", "x.y.vault.pw.test"}) {
    EXPECT_TRUE(plan->entries_for_name(denied).empty()) << denied;
    EXPECT_EQ(plan->denied_entry_for_name(denied), 0u) << denied;
    EXPECT_FALSE(plan->fake_address_for(denied)) << denied;
    EXPECT_TRUE(plan->decide_name(denied, 443, false).entries.empty()) << denied;
  }
  // Spellings that are not canonical match nothing (the stub and the gateway refuse them).
  for (const char* odd : {"SECRET.pw.test", "secret.pw.test.", "secre\\t.pw.test", "\\115ecret.pw.test",
                          "secre%74.pw.test", "_x.pw.test"}) {
    EXPECT_TRUE(plan->entries_for_name(odd).empty()) << odd;
    EXPECT_FALSE(plan->fake_address_for(odd)) << odd;
  }
  EXPECT_FALSE(plan->denied_entry_for_name("open.pw.test"));
}

TEST(EgressPlan, AnyStillDeniesConcreteNames) {
  policy::Policy p;
  p.egress_any = true;
  policy::OperatorNetwork net;
  net.egress_deny = {"*.pw.test"};
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->decide_name("a.pw.test", 443, false).any);
  EXPECT_FALSE(plan->decide_name("A.pw.test", 443, false).any);
  EXPECT_TRUE(plan->decide_name("a.ok.test", 443, false).any);
}

// Issue #18: `*.wild.test:18443` and `*.a.wild.test:18080` — a name below both reaches both
// ports; a name only below the wider one is redirected on the wider one's port only.
TEST(EgressPlan, NestedWildcardsOnDifferentPortsRedirectEveryCoveringPort) {
  for (bool narrow_first : {false, true}) {
    std::vector<manifest::EgressEntry> entries = {entry("*.wild.test", 18443, Protocol::https, 0),
                                                  entry("*.a.wild.test", 18080, Protocol::http, 1)};
    if (narrow_first) std::swap(entries[0], entries[1]);
    auto p = with_entries(entries);
    policy::OperatorNetwork net;
    auto plan = EgressPlan::build(p, net);
    ASSERT_TRUE(plan) << plan.error().describe();
    auto both = plan->fake_address_for("x.a.wild.test");
    auto wide = plan->fake_address_for("y.wild.test");
    ASSERT_TRUE(both && wide);
    EXPECT_NE(*both & 0xffffff00u, *wide & 0xffffff00u);
    const std::string rules = comet::nft_ruleset(plan->network_plan());
    const std::string both_block = "ip daddr " + dotted(*both & 0xffffff00u) + "/24 tcp dport ";
    const std::string wide_block = "ip daddr " + dotted(*wide & 0xffffff00u) + "/24 tcp dport ";
    EXPECT_NE(rules.find(both_block + "18080 redirect"), std::string::npos) << rules;
    EXPECT_NE(rules.find(both_block + "18443 redirect"), std::string::npos) << rules;
    EXPECT_NE(rules.find(wide_block + "18443 redirect"), std::string::npos) << rules;
    EXPECT_EQ(rules.find(wide_block + "18080"), std::string::npos) << rules;
    EXPECT_EQ(plan->decide_name("x.a.wild.test", 18080, false).entries.size(), 1u);
    EXPECT_EQ(plan->decide_name("x.a.wild.test", 18443, false).entries.size(), 1u);
    EXPECT_TRUE(plan->decide_name("y.wild.test", 18080, false).entries.empty());
  }
}

TEST(EgressPlan, AnyRedirectsAllTcpAndHandsOutAddressesPerName) {
  policy::Policy p;
  p.egress_any = true;
  policy::OperatorNetwork net;
  net.egress_deny = {"*.blocked.test"};
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  const std::string rules = comet::nft_ruleset(plan->network_plan());
  EXPECT_NE(rules.find("ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :15001"), std::string::npos) << rules;
  EXPECT_NE(rules.find("ip6 daddr != ::1 meta l4proto tcp redirect to :15001"), std::string::npos);
  EXPECT_NE(rules.find("ct status dnat ip6 daddr ::1 tcp dport 15001 accept"), std::string::npos);
  auto a = plan->fake_address_for("anything.test");
  ASSERT_TRUE(a);
  EXPECT_EQ(plan->name_for_fake(*a), "anything.test");
  EXPECT_TRUE(plan->decide_name("anything.test", 12345, false).any);
  EXPECT_FALSE(plan->decide_name("x.blocked.test", 443, false).any);
  EXPECT_FALSE(plan->decide_name("anything.test", 53, true).any);  // "*" relays TCP only
}

TEST(EgressPlan, MoonProxyGetsItsListenerAndNoRedirect) {
  auto p = with_entries({entry("moon", 3128, Protocol::moon_proxy, 0)});
  p.moon_proxy = true;
  policy::OperatorNetwork net;
  auto plan = EgressPlan::build(p, net);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->network_plan().proxy_port, 3128);
  EXPECT_TRUE(plan->network_plan().redirect_tcp.empty());
  const std::string rules = comet::nft_ruleset(plan->network_plan());
  EXPECT_NE(rules.find("ip daddr 127.0.0.1 tcp dport 3128 accept"), std::string::npos) << rules;
}

// Clients that ignore the proxy variables (SPEC C7): proxy.allow's entries join a moon-proxy
// pack's, so their names resolve and are redirected on their ports — and nothing else; a pack
// without moon-proxy gets nothing from proxy.allow.
TEST(EgressPlan, MoonProxyPackAlsoGetsProxyAllowAsEntries) {
  auto p = with_entries({entry("moon", 3128, Protocol::moon_proxy, 0)});
  p.moon_proxy = true;
  auto allowed = entry("api.example.com", 443, Protocol::https, 0);
  allowed.key_path = "proxy.allow[0]";
  auto denied = entry("evil.example.com", 443, Protocol::https, 1);
  denied.key_path = "proxy.allow[1]";
  policy::OperatorNetwork net;
  net.egress_deny = {"evil.example.com"};
  auto plan = EgressPlan::build(p, net, {allowed, denied});
  ASSERT_TRUE(plan);
  const auto ids = plan->entries_for_name("api.example.com");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(plan->entry(ids[0]).key_path, "proxy.allow[0]");
  EXPECT_TRUE(plan->from_proxy_allow(ids[0]));
  EXPECT_FALSE(plan->from_proxy_allow(0));
  auto fake = plan->fake_address_for("api.example.com");
  ASSERT_TRUE(fake);
  EXPECT_EQ(plan->decide_name("api.example.com", 443, false).entries, ids);
  EXPECT_TRUE(plan->decide_name("api.example.com", 80, false).entries.empty());
  EXPECT_TRUE(plan->entries_for_name("evil.example.com").empty());  // egress.deny still wins
  EXPECT_TRUE(plan->entries_for_name("other.example.com").empty());
  ASSERT_EQ(plan->network_plan().redirect_tcp.size(), 1u);
  EXPECT_EQ(plan->network_plan().redirect_tcp[0].port, 443);

  auto plain = with_entries({entry("web.example.com", 80, Protocol::http, 0)});
  auto without = EgressPlan::build(plain, net, {allowed});
  ASSERT_TRUE(without);
  EXPECT_TRUE(without->entries_for_name("api.example.com").empty());
}

TEST(EgressPlan, EgressTargetBracketsIpv6) {
  EXPECT_EQ(egress_target("api.example.com", 443, "https"), "api.example.com:443/https");
  EXPECT_EQ(egress_target("2001:db8::1", 53, "udp"), "[2001:db8::1]:53/udp");
  // A refused upstream answer: NAME[ADDRESS], not bracketed again (docs/network.md).
  EXPECT_EQ(egress_target("a.test[::ffff:127.0.0.1]", 80, "tcp"), "a.test[::ffff:127.0.0.1]:80/tcp");
}

}  // namespace
}  // namespace soyaos::supervisor
