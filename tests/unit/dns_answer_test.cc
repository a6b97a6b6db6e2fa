// The upstream resolver's DNS code (src/network/dns_answer.h): query building and the
// strict response parser (ours / not ours / malformed, compression, CNAME chains, bounds).
#include "network/dns_answer.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "network/dns_message.h"

namespace soyaos::network {
namespace {

using Bytes = std::vector<uint8_t>;

void put16(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

Bytes wire(const std::string& name) {
  auto w = dns_name_wire(name);
  EXPECT_TRUE(w.ok()) << name;
  return w.ok() ? *w : Bytes{};
}

struct Rr {
  Bytes owner;  // wire form, may end in a pointer
  uint16_t type = qtype::a;
  Bytes rdata;
  uint16_t klass = kDnsClassIn;
};

Rr a_rr(Bytes owner, std::array<uint8_t, 4> addr) { return Rr{std::move(owner), qtype::a, Bytes(addr.begin(), addr.end())}; }
Rr aaaa_rr(Bytes owner, std::array<uint8_t, 16> addr) {
  return Rr{std::move(owner), qtype::aaaa, Bytes(addr.begin(), addr.end())};
}

constexpr uint16_t kQrRdRa = 0x8180;
const Bytes kPtrToQuestion = {0xc0, 0x0c};  // the question's name, at offset 12

Bytes response(uint16_t id, uint16_t flags, const Bytes& qname, uint16_t type, const std::vector<Rr>& answers,
               uint16_t qdcount = 1) {
  Bytes b;
  for (size_t v : {size_t{id}, size_t{flags}, size_t{qdcount}, answers.size(), size_t{0}, size_t{0}}) put16(b, v);
  b.insert(b.end(), qname.begin(), qname.end());
  put16(b, type);
  put16(b, kDnsClassIn);
  for (const Rr& rr : answers) {
    b.insert(b.end(), rr.owner.begin(), rr.owner.end());
    put16(b, rr.type);
    put16(b, rr.klass);
    b.insert(b.end(), {0, 0, 0, 60});  // ttl
    put16(b, rr.rdata.size());
    b.insert(b.end(), rr.rdata.begin(), rr.rdata.end());
  }
  return b;
}

TEST(DnsResponseParse, NameWire) {
  EXPECT_EQ(wire("Api.Example.COM"), (Bytes{3, 'a', 'p', 'i', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0}));
  EXPECT_EQ(wire("example.com."), wire("example.com"));
  EXPECT_EQ(wire(std::string(63, 'a') + ".b").size(), 63u + 1 + 2 + 1);
  for (const std::string& bad : {std::string(), std::string("."), std::string("a..b"), std::string(".a"),
                                std::string(64, 'a') + ".com", std::string("a\\.b"), std::string(254, 'a')}) {
    EXPECT_FALSE(dns_name_wire(bad).ok()) << bad;
  }
}

TEST(DnsResponseParse, BuiltQueryIsAStandardQuery) {
  auto q = dns_build_query(0xbeef, "Echo.Test", qtype::aaaa);
  ASSERT_TRUE(q.ok());
  auto parsed = parse_dns_query(*q);
  ASSERT_TRUE(parsed.ok()) << parsed.error().describe();
  EXPECT_EQ(parsed->id, 0xbeef);
  EXPECT_TRUE(parsed->rd);
  EXPECT_EQ(parsed->name, "echo.test");
  EXPECT_EQ(parsed->qtype, qtype::aaaa);
  ASSERT_TRUE(parsed->edns.has_value());
  EXPECT_EQ(parsed->edns->udp_payload_size, 1232);
  EXPECT_FALSE(dns_build_query(1, "a..b", qtype::a).ok());
}

TEST(DnsResponseParse, ParsesTheStubBuildersAnswer) {
  // The project's own reply builder answering our own query: the two sides agree.
  auto q = dns_build_query(7, "echo.test", qtype::a);
  ASSERT_TRUE(q.ok());
  auto parsed = parse_dns_query(*q);
  ASSERT_TRUE(parsed.ok());
  const std::array<uint8_t, 4> v4[] = {{192, 0, 2, 1}, {192, 0, 2, 2}, {192, 0, 2, 1}};
  const Bytes reply = dns_answer(*parsed, v4, {}, 60);
  const DnsResponse r = parse_dns_response(reply, 7, wire("echo.test"), qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  EXPECT_EQ(r.rcode, 0);
  EXPECT_FALSE(r.truncated);
  ASSERT_EQ(r.a.size(), 2u);  // duplicates kept out
  EXPECT_EQ(r.a[0], (std::array<uint8_t, 4>{192, 0, 2, 1}));
  EXPECT_EQ(r.a[1], (std::array<uint8_t, 4>{192, 0, 2, 2}));
  EXPECT_TRUE(r.aaaa.empty());

  const DnsResponse nx = parse_dns_response(dns_error(*parsed, Rcode::nxdomain), 7, wire("echo.test"), qtype::a);
  ASSERT_EQ(nx.status, DnsResponseStatus::ok) << nx.error;
  EXPECT_EQ(nx.rcode, 3);
  EXPECT_TRUE(nx.a.empty());
}

TEST(DnsResponseParse, CompressedOwnersAndAaaa) {
  const Bytes qn = wire("echo.test");
  const std::array<uint8_t, 16> v6{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Bytes m = response(9, kQrRdRa, qn, qtype::aaaa, {aaaa_rr(kPtrToQuestion, v6)});
  const DnsResponse r = parse_dns_response(m, 9, qn, qtype::aaaa);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  ASSERT_EQ(r.aaaa.size(), 1u);
  EXPECT_EQ(r.aaaa[0], v6);
}

TEST(DnsResponseParse, QuestionMatchIsCaseInsensitive) {
  const Bytes m = response(9, kQrRdRa, wire("echo.test") /*lower*/, qtype::a, {a_rr(kPtrToQuestion, {1, 2, 3, 4})});
  Bytes upper = m;
  upper[13] = 'E';  // "Echo" in the question (0x20 bit randomisation, as some resolvers echo)
  const DnsResponse r = parse_dns_response(upper, 9, wire("echo.test"), qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  EXPECT_EQ(r.a.size(), 1u);
}

TEST(DnsResponseParse, FollowsCnameChainsAndIgnoresOtherRecords) {
  const Bytes qn = wire("www.example.com");
  // www.example.com CNAME edge.cdn.test; edge.cdn.test CNAME e1.cdn.test (compressed);
  // e1.cdn.test A 192.0.2.9; unrelated.test A 198.51.100.1 (not ours: skipped); a TXT.
  const Bytes edge = wire("edge.cdn.test");
  const size_t first_rr = 12 + qn.size() + 4;
  const size_t edge_at = first_rr + 2 + 10;  // the first CNAME's RDATA
  Bytes e1 = {2, 'e', '1', 0xc0, static_cast<uint8_t>(edge_at + 5)};  // "e1" + pointer to "cdn.test"
  const Rr txt{kPtrToQuestion, qtype::txt, {3, 'h', 'i', '!'}};
  const Rr ch1{kPtrToQuestion, qtype::cname, edge};
  const Rr ch2{{0xc0, static_cast<uint8_t>(edge_at)}, qtype::cname, e1};
  const size_t ch2_rdata = edge_at + edge.size() + 2 + 10;
  const Bytes m = response(3, kQrRdRa, qn, qtype::a,
                           {ch1, ch2, a_rr({0xc0, static_cast<uint8_t>(ch2_rdata)}, {192, 0, 2, 9}),
                            a_rr(wire("unrelated.test"), {198, 51, 100, 1}), txt});
  const DnsResponse r = parse_dns_response(m, 3, qn, qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  ASSERT_EQ(r.a.size(), 1u);
  EXPECT_EQ(r.a[0], (std::array<uint8_t, 4>{192, 0, 2, 9}));
}

TEST(DnsResponseParse, CnameLoopsAndLongChainsAreBounded) {
  const Bytes qn = wire("a.test");
  std::vector<Rr> rrs;
  // a -> b -> a (a loop), and a chain n0 -> n1 -> ... longer than the limit.
  rrs.push_back({wire("a.test"), qtype::cname, wire("b.test")});
  rrs.push_back({wire("b.test"), qtype::cname, wire("a.test")});
  rrs.push_back(a_rr(wire("b.test"), {192, 0, 2, 1}));
  auto r = parse_dns_response(response(1, kQrRdRa, qn, qtype::a, rrs), 1, qn, qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  EXPECT_EQ(r.a.size(), 1u);

  rrs.clear();
  rrs.push_back({wire("a.test"), qtype::cname, wire("n0.test")});
  for (size_t i = 0; i < 20; ++i) {
    rrs.push_back({wire("n" + std::to_string(i) + ".test"), qtype::cname, wire("n" + std::to_string(i + 1) + ".test")});
  }
  rrs.push_back(a_rr(wire("n20.test"), {192, 0, 2, 2}));
  r = parse_dns_response(response(1, kQrRdRa, qn, qtype::a, rrs), 1, qn, qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  EXPECT_TRUE(r.a.empty());  // beyond kDnsMaxCnameChain hops
}

TEST(DnsResponseParse, NotOurs) {
  const Bytes qn = wire("echo.test");
  const Bytes good = response(5, kQrRdRa, qn, qtype::a, {a_rr(kPtrToQuestion, {1, 2, 3, 4})});
  EXPECT_EQ(parse_dns_response(good, 6, qn, qtype::a).status, DnsResponseStatus::not_ours);              // id
  EXPECT_EQ(parse_dns_response(good, 5, wire("other.test"), qtype::a).status, DnsResponseStatus::not_ours);  // name
  EXPECT_EQ(parse_dns_response(good, 5, qn, qtype::aaaa).status, DnsResponseStatus::not_ours);           // type
  Bytes query_bit = good;
  query_bit[2] &= 0x7f;  // QR clear: a query, maybe our own reflected
  EXPECT_EQ(parse_dns_response(query_bit, 5, qn, qtype::a).status, DnsResponseStatus::not_ours);
  Bytes opcode = good;
  opcode[2] |= 0x10;  // opcode 2
  EXPECT_EQ(parse_dns_response(opcode, 5, qn, qtype::a).status, DnsResponseStatus::not_ours);
  EXPECT_EQ(parse_dns_response(Bytes{0, 5, 0x81}, 5, qn, qtype::a).status, DnsResponseStatus::not_ours);
  Bytes chaos = good;
  chaos[12 + qn.size() + 3] = 3;  // class CH
  EXPECT_EQ(parse_dns_response(chaos, 5, qn, qtype::a).status, DnsResponseStatus::not_ours);
}

TEST(DnsResponseParse, Truncated) {
  const Bytes qn = wire("echo.test");
  const Bytes m = response(5, kQrRdRa | 0x0200, qn, qtype::a, {});
  const DnsResponse r = parse_dns_response(m, 5, qn, qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  EXPECT_TRUE(r.truncated);
}

TEST(DnsResponseParse, Malformed) {
  const Bytes qn = wire("echo.test");
  auto status = [&](const Bytes& m) { return parse_dns_response(m, 5, qn, qtype::a); };
  const Bytes good = response(5, kQrRdRa, qn, qtype::a, {a_rr(kPtrToQuestion, {1, 2, 3, 4})});
  ASSERT_EQ(status(good).status, DnsResponseStatus::ok);

  // Every strict prefix that still holds our id is malformed (runs past the end).
  for (size_t n = 12; n < good.size(); ++n) {
    const DnsResponse r = status(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_EQ(r.status, DnsResponseStatus::malformed) << n;
    EXPECT_FALSE(r.error.empty());
    EXPECT_TRUE(r.a.empty());
  }
  // No question / two questions.
  EXPECT_EQ(status(response(5, kQrRdRa, qn, qtype::a, {}, 0)).status, DnsResponseStatus::malformed);
  // A record of the wrong length.
  EXPECT_EQ(status(response(5, kQrRdRa, qn, qtype::a, {Rr{kPtrToQuestion, qtype::a, {1, 2, 3}}})).status,
            DnsResponseStatus::malformed);
  EXPECT_EQ(status(response(5, kQrRdRa, qn, qtype::a, {Rr{kPtrToQuestion, qtype::aaaa, {1, 2, 3, 4}}})).status,
            DnsResponseStatus::malformed);
  // Garbage after the header.
  Bytes garbage = {0, 5, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 0xff, 0xfe, 0x01};
  EXPECT_EQ(status(garbage).status, DnsResponseStatus::malformed);
  // Pointer forwards, to itself, into the header, reserved label types.
  for (const Bytes& owner : {Bytes{0xc0, 0xff}, Bytes{0xc0, static_cast<uint8_t>(12 + qn.size() + 4)}, Bytes{0xc0, 2},
                             Bytes{0x40, 1}, Bytes{0x80, 1}}) {
    EXPECT_EQ(status(response(5, kQrRdRa, qn, qtype::a, {a_rr(owner, {1, 2, 3, 4})})).status,
              DnsResponseStatus::malformed);
  }
  // A CNAME whose name does not end where its RDATA does.
  Bytes cname = wire("x.test");
  cname.push_back(0);
  EXPECT_EQ(status(response(5, kQrRdRa, qn, qtype::a, {Rr{kPtrToQuestion, qtype::cname, cname}})).status,
            DnsResponseStatus::malformed);
}

TEST(DnsResponseParse, PointerChainsAreBounded) {
  // A long chain of backward pointers: each record's owner points at the previous one.
  const Bytes qn = wire("echo.test");
  std::vector<Rr> rrs;
  rrs.push_back(Rr{kPtrToQuestion, qtype::txt, {0}});
  size_t at = 12 + qn.size() + 4;
  for (int i = 0; i < 60; ++i) {
    rrs.push_back(Rr{{static_cast<uint8_t>(0xc0 | (at >> 8)), static_cast<uint8_t>(at)}, qtype::txt, {0}});
    at += 2 + 10 + 1;
  }
  const DnsResponse r = parse_dns_response(response(5, kQrRdRa, qn, qtype::a, rrs), 5, qn, qtype::a);
  EXPECT_EQ(r.status, DnsResponseStatus::malformed);
  EXPECT_NE(r.error.find("too many compression pointers"), std::string::npos) << r.error;
}

TEST(DnsResponseParse, AddressesAreCapped) {
  const Bytes qn = wire("echo.test");
  std::vector<Rr> rrs;
  for (int i = 0; i < 200; ++i) rrs.push_back(a_rr(kPtrToQuestion, {10, 0, static_cast<uint8_t>(i / 256), static_cast<uint8_t>(i)}));
  const DnsResponse r = parse_dns_response(response(5, kQrRdRa, qn, qtype::a, rrs), 5, qn, qtype::a);
  ASSERT_EQ(r.status, DnsResponseStatus::ok) << r.error;
  EXPECT_EQ(r.a.size(), kDnsMaxAddresses);
}

}  // namespace
}  // namespace soyaos::network
