// The operator's network policy (src/policy/operator_network.h): addresses, ranges, the
// private-address rule (SPEC.md C6) and the deny / allow_private lookups (C6a).
#include "policy/operator_network.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <string>

namespace soyaos::policy {
namespace {

IpAddress ip(const std::string& s) {
  auto a = parse_ip(s);
  EXPECT_TRUE(a.has_value()) << s;
  return a.value_or(IpAddress{});
}

Cidr cidr(const std::string& s) {
  auto c = parse_cidr(s);
  EXPECT_TRUE(c.has_value()) << s;
  return c.value_or(Cidr{});
}

TEST(OperatorNetwork, ParseIpAcceptsV4AndV6) {
  auto a = parse_ip("192.0.2.1");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->v6);
  EXPECT_EQ(a->bytes[0], 192);
  EXPECT_EQ(a->bytes[3], 1);
  EXPECT_EQ(a->bytes[4], 0);
  EXPECT_EQ(to_string(*a), "192.0.2.1");

  auto b = parse_ip("2001:DB8::1");
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->v6);
  EXPECT_EQ(to_string(*b), "2001:db8::1");
  auto c = parse_ip("[2001:db8::1]");
  ASSERT_TRUE(c);
  EXPECT_EQ(*b, *c);
  EXPECT_EQ(to_string(ip("::ffff:10.0.0.1")), "::ffff:10.0.0.1");
}

TEST(OperatorNetwork, ParseIpRefusesEverythingElse) {
  for (const char* bad : {"", "127.1", "1.2.3", "1.2.3.4.5", "256.0.0.1", "01.2.3.4x", "example.com", "[192.0.2.1]",
                          "fe80::1%eth0", "[2001:db8::1", "2001:db8::1]", "[]", " 192.0.2.1", "192.0.2.1 ",
                          "2001:db8:::1", "::ffff:1.2.3.4.5"}) {
    EXPECT_FALSE(parse_ip(bad).has_value()) << bad;
  }
  EXPECT_FALSE(parse_ip(std::string(100, '1')).has_value());
}

TEST(OperatorNetwork, ParseCidr) {
  auto a = parse_cidr("10.0.0.0/8");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->prefix, 8);
  EXPECT_EQ(to_string(*a), "10.0.0.0/8");
  auto b = parse_cidr("fd00::/8");
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->base.v6);
  EXPECT_EQ(to_string(*b), "fd00::/8");
  EXPECT_EQ(cidr("192.0.2.7").prefix, 32);
  EXPECT_EQ(cidr("2001:db8::7").prefix, 128);
  EXPECT_EQ(cidr("0.0.0.0/0").prefix, 0);
  EXPECT_EQ(cidr("::/0").prefix, 0);
  EXPECT_EQ(cidr("172.16.0.0/12").prefix, 12);
  EXPECT_EQ(cidr("[2001:db8::]/32").prefix, 32);
}

TEST(OperatorNetwork, ParseCidrRefusesHostBitsAndBadPrefixes) {
  for (const char* bad : {"10.0.0.1/8", "172.17.0.0/11", "fd00::1/8", "192.168.1.0/16", "10.0.0.0/33", "::/129",
                          "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/08", "10.0.0.0/8/8", "10.0.0.0/a",
                          "/8", "example.com/8", "10.0.0.0/1000"}) {
    EXPECT_FALSE(parse_cidr(bad).has_value()) << bad;
  }
}

TEST(OperatorNetwork, Contains) {
  EXPECT_TRUE(contains(cidr("10.0.0.0/8"), ip("10.255.1.2")));
  EXPECT_FALSE(contains(cidr("10.0.0.0/8"), ip("11.0.0.0")));
  EXPECT_TRUE(contains(cidr("172.16.0.0/12"), ip("172.31.255.255")));
  EXPECT_FALSE(contains(cidr("172.16.0.0/12"), ip("172.32.0.0")));
  EXPECT_TRUE(contains(cidr("0.0.0.0/0"), ip("203.0.113.1")));
  EXPECT_FALSE(contains(cidr("0.0.0.0/0"), ip("2001:db8::1")));  // families differ
  EXPECT_TRUE(contains(cidr("fd00::/8"), ip("fd12:3456::1")));
  EXPECT_FALSE(contains(cidr("fd00::/8"), ip("fc00::1")));
  EXPECT_TRUE(contains(cidr("192.0.2.7"), ip("192.0.2.7")));
  EXPECT_FALSE(contains(cidr("192.0.2.7"), ip("192.0.2.8")));
  // IPv4-mapped IPv6 is compared as the IPv4 address it carries.
  EXPECT_TRUE(contains(cidr("10.0.0.0/8"), ip("::ffff:10.1.2.3")));
  EXPECT_FALSE(contains(cidr("10.0.0.0/8"), ip("::ffff:11.1.2.3")));
  EXPECT_TRUE(contains(cidr("::ffff:0:0/96"), ip("10.1.2.3")));
  EXPECT_FALSE(contains(cidr("::/0"), ip("10.1.2.3")) && !contains(cidr("::ffff:0:0/96"), ip("10.1.2.3")));
}

TEST(OperatorNetwork, PrivateAddressesEveryListedRange) {
  for (const char* p : {"127.0.0.1", "127.255.255.254", "10.0.0.0", "10.255.255.255", "172.16.0.1", "172.31.255.255",
                        "192.168.0.1", "192.168.255.255", "169.254.169.254", "169.254.0.0", "100.64.0.1",
                        "100.127.255.255", "::1", "fc00::1", "fd00::1", "fdff:ffff::1", "fe80::1", "febf::1",
                        // unspecified, "this network", multicast, broadcast
                        "0.0.0.0", "0.1.2.3", "::", "224.0.0.1", "239.255.255.255", "ff02::1", "255.255.255.255",
                        // IPv4-mapped / compatible / NAT64 forms
                        "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::10.0.0.1",
                        "::127.0.0.1", "64:ff9b::169.254.169.254", "::ffff:0.0.0.0", "64:ff9b::7f00:1",
                        "64:ff9b::10.1.2.3",
                        // local-use NAT64 (RFC 8215) at each RFC 6052 prefix length
                        "64:ff9b:1::a9fe:a9fe", "64:ff9b:1:7f00:1::", "64:ff9b:1:ff7f:0:1::",
                        "64:ff9b:1:ffff:7f:0:1:0",
                        // 6to4 of 127.0.0.1 and 10.0.0.1, Teredo with a private server / client,
                        // ISATAP interface id
                        "2002:7f00:1::1", "2002:a00:1::", "2001:0:a00:1::", "2001:0:808:808:0:0:80ff:fffe",
                        "2001:db8::5efe:a9fe:a9fe"}) {
    EXPECT_TRUE(is_private_address(ip(p))) << p;
  }
  for (const char* p : {"8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.0", "192.169.0.1", "100.63.255.255",
                        "100.128.0.0", "169.253.255.255", "11.0.0.1", "126.255.255.255", "128.0.0.1",
                        "223.255.255.255", "255.255.255.254", "2001:db8::1", "2606:4700::1111", "fbff::1", "fec0::1",
                        "::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1",
                        "2001:0:808:808:0:0:f7f7:f7f7"}) {
    EXPECT_FALSE(is_private_address(ip(p))) << p;
  }
}

TEST(OperatorNetwork, DeniesExactWildcardAndAddresses) {
  OperatorNetwork n;
  n.egress_deny = {"evil.example.com", "*.bad.example", "203.0.113.7", "2001:db8::66"};
  EXPECT_TRUE(n.denies("evil.example.com"));
  EXPECT_TRUE(n.denies("EVIL.example.com"));
  EXPECT_TRUE(n.denies("evil.example.com."));
  EXPECT_FALSE(n.denies("sub.evil.example.com"));  // exact pattern: only that name
  EXPECT_FALSE(n.denies("example.com"));
  EXPECT_TRUE(n.denies("a.bad.example"));
  EXPECT_TRUE(n.denies("x.y.bad.example"));
  EXPECT_FALSE(n.denies("bad.example"));  // wildcard: strictly below
  EXPECT_FALSE(n.denies("notbad.example"));
  EXPECT_TRUE(n.denies("203.0.113.7"));
  EXPECT_TRUE(n.denies("::ffff:203.0.113.7"));
  EXPECT_FALSE(n.denies("203.0.113.8"));
  EXPECT_TRUE(n.denies("2001:db8::66"));
  EXPECT_TRUE(n.denies("2001:DB8:0::66"));
  EXPECT_FALSE(n.denies("2001:db8::67"));
  EXPECT_FALSE(OperatorNetwork{}.denies("evil.example.com"));
}

TEST(OperatorNetwork, AddressFormsCarryEveryEmbeddedIpv4) {
  auto has = [](const std::string& v6, const std::string& v4) {
    const auto forms = address_forms(ip(v6));
    return std::find(forms.begin(), forms.end(), ip(v4)) != forms.end();
  };
  EXPECT_EQ(address_forms(ip("192.0.2.1")).size(), 1U);
  EXPECT_EQ(address_forms(ip("2001:db8::1")).size(), 1U);
  EXPECT_EQ(address_forms(ip("::1")).size(), 1U);  // loopback, not ::0.0.0.1
  EXPECT_TRUE(has("::ffff:192.0.2.1", "192.0.2.1"));
  EXPECT_TRUE(has("::192.0.2.1", "192.0.2.1"));
  EXPECT_TRUE(has("64:ff9b::192.0.2.1", "192.0.2.1"));
  EXPECT_TRUE(has("64:ff9b:1::c000:201", "192.0.2.1"));
  EXPECT_TRUE(has("64:ff9b:1:c000:2:100::", "192.0.2.1"));  // /48 layout, u octet skipped
  EXPECT_TRUE(has("2002:c000:201::1", "192.0.2.1"));
  EXPECT_TRUE(has("2001:0:4136:e378:8000:63bf:3fff:fdfe", "65.54.227.120"));  // RFC 4380 example
  EXPECT_TRUE(has("2001:0:4136:e378:8000:63bf:3fff:fdfe", "192.0.2.1"));
  EXPECT_TRUE(same_address(ip("::ffff:10.0.0.1"), ip("10.0.0.1")));
  EXPECT_TRUE(same_address(ip("64:ff9b::a00:1"), ip("::ffff:10.0.0.1")));
  EXPECT_FALSE(same_address(ip("64:ff9b::a00:1"), ip("10.0.0.2")));
}

TEST(OperatorNetwork, DenyAddressesCoverEveryForm) {
  OperatorNetwork n;
  n.egress_deny = {"203.0.113.7", "::ffff:198.51.100.9"};
  for (const char* a : {"203.0.113.7", "::ffff:203.0.113.7", "::203.0.113.7", "64:ff9b::cb00:7107",
                        "64:ff9b:1::cb00:7107", "2002:cb00:7107::1", "198.51.100.9", "64:ff9b::198.51.100.9"}) {
    EXPECT_TRUE(n.denies(a)) << a;
    EXPECT_TRUE(n.denies_address(ip(a))) << a;
  }
  for (const char* a : {"203.0.113.8", "64:ff9b::cb00:7108", "2001:db8::cb00:7107"}) {
    EXPECT_FALSE(n.denies(a)) << a;
    EXPECT_FALSE(n.denies_address(ip(a))) << a;
  }
}

TEST(OperatorNetwork, RefusesPrivateChecksEachFormAgainstAllowPrivate) {
  OperatorNetwork n;
  EXPECT_TRUE(n.refuses_private(ip("10.1.2.3")));
  EXPECT_TRUE(n.refuses_private(ip("64:ff9b::a01:203")));
  EXPECT_FALSE(n.refuses_private(ip("192.0.2.1")));
  n.allow_private = {cidr("10.0.0.0/8")};
  EXPECT_FALSE(n.refuses_private(ip("10.1.2.3")));
  EXPECT_FALSE(n.refuses_private(ip("::ffff:10.1.2.3")));
  EXPECT_FALSE(n.refuses_private(ip("64:ff9b::a01:203")));
  EXPECT_TRUE(n.refuses_private(ip("64:ff9b::7f00:1")));
  EXPECT_TRUE(n.refuses_private(ip("::1")));
}

TEST(OperatorNetwork, PrivateAllowed) {
  OperatorNetwork n;
  EXPECT_FALSE(n.private_allowed(ip("10.1.2.3")));  // empty by default
  n.allow_private = {cidr("10.0.0.0/8"), cidr("fd00::/8")};
  EXPECT_TRUE(n.private_allowed(ip("10.1.2.3")));
  EXPECT_TRUE(n.private_allowed(ip("::ffff:10.1.2.3")));
  EXPECT_TRUE(n.private_allowed(ip("fd00::1")));
  EXPECT_FALSE(n.private_allowed(ip("192.168.1.1")));
  EXPECT_FALSE(n.private_allowed(ip("fc00::1")));
  EXPECT_FALSE(n.private_allowed(ip("127.0.0.1")));
}

}  // namespace
}  // namespace soyaos::policy
