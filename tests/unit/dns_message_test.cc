#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "network/dns_message.h"

namespace soyaos::network {
namespace {

using Bytes = std::vector<uint8_t>;

// dig 9.18: `dig www.Example.com A` (RD, AD, EDNS0 1232 with a COOKIE option)
constexpr uint8_t kDigQuery[] = {
    0x3a, 0x5c, 0x01, 0x20, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x77, 0x77, 0x77,
    0x07, 0x45, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63, 0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00,
    0x01, 0x00, 0x00, 0x29, 0x04, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x0a, 0x00, 0x08,
    0x7c, 0x3b, 0x1a, 0x6e, 0x5f, 0x0d, 0x2c, 0x41,
};
// glibc getaddrinfo: AAAA api.openai.com (RD, no EDNS0)
constexpr uint8_t kGlibcQuery[] = {
    0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x61, 0x70, 0x69,
    0x06, 0x6f, 0x70, 0x65, 0x6e, 0x61, 0x69, 0x03, 0x63, 0x6f, 0x6d, 0x00, 0x00, 0x1c, 0x00, 0x01,
};

uint16_t get16(const Bytes& b, size_t at) { return static_cast<uint16_t>((b[at] << 8) | b[at + 1]); }

void put16(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

Bytes wire_name(const std::vector<std::string>& labels) {
  Bytes b;
  for (const std::string& l : labels) {
    b.push_back(static_cast<uint8_t>(l.size()));
    b.insert(b.end(), l.begin(), l.end());
  }
  b.push_back(0);
  return b;
}

// A query: header with the given flags and counts, then the raw question bytes.
Bytes query(const Bytes& name, uint16_t type = qtype::a, uint16_t flags = 0x0100, uint16_t qd = 1,
            uint16_t an = 0, uint16_t ns = 0, uint16_t ar = 0) {
  Bytes b;
  for (uint16_t v : {uint16_t{0x1234}, flags, qd, an, ns, ar}) put16(b, v);
  b.insert(b.end(), name.begin(), name.end());
  put16(b, type);
  put16(b, kDnsClassIn);
  return b;
}

DnsQuery parsed(std::span<const uint8_t> b) {
  Result<DnsQuery> q = parse_dns_query(b);
  EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().describe());
  return q.ok() ? *q : DnsQuery{};
}

TEST(DnsQuery, DigQueryWithEdns) {
  const DnsQuery q = parsed(kDigQuery);
  EXPECT_EQ(q.id, 0x3a5c);
  EXPECT_TRUE(q.rd);
  EXPECT_EQ(q.name, "www.example.com");
  EXPECT_FALSE(q.name_unusual);
  EXPECT_EQ(q.label_count, 3U);
  EXPECT_EQ(q.qtype, qtype::a);
  EXPECT_EQ(q.qclass, kDnsClassIn);
  ASSERT_TRUE(q.edns.has_value());
  EXPECT_EQ(q.edns->udp_payload_size, 1232);
  EXPECT_EQ(q.edns->version, 0);
  // The question is echoed as received (case preserved for 0x20 mixing).
  EXPECT_EQ(q.qname_wire[1], 'w');
  EXPECT_EQ(q.qname_wire[5], 'E');
}

TEST(DnsQuery, GlibcQuery) {
  const DnsQuery q = parsed(kGlibcQuery);
  EXPECT_EQ(q.id, 0xbeef);
  EXPECT_EQ(q.name, "api.openai.com");
  EXPECT_EQ(q.qtype, qtype::aaaa);
  EXPECT_FALSE(q.edns.has_value());
}

TEST(DnsQuery, EveryPrefixIsAnError) {
  for (const std::span<const uint8_t> full : {std::span<const uint8_t>(kDigQuery), std::span<const uint8_t>(kGlibcQuery)}) {
    for (size_t n = 0; n < full.size(); ++n) EXPECT_FALSE(parse_dns_query(full.first(n)).ok()) << n;
  }
}

TEST(DnsQuery, NamesInPresentationForm) {
  DnsQuery q = parsed(query(wire_name({"A_b-1", "EXAMPLE"})));
  EXPECT_EQ(q.name, "a_b-1.example");
  EXPECT_FALSE(q.name_unusual);
  // A dot or a backslash inside a label, and unprintable bytes, are escaped so the text
  // can never equal a name with different labels.
  q = parsed(query(wire_name({"evil.com", "example"})));
  EXPECT_EQ(q.name, "evil\\.com.example");
  EXPECT_TRUE(q.name_unusual);
  EXPECT_EQ(q.label_count, 2U);
  q = parsed(query(wire_name({std::string("a\0b", 3), "x y", "\\", "\xff"})));
  EXPECT_EQ(q.name, "a\\000b.x\\032y.\\\\.\\255");
  EXPECT_TRUE(q.name_unusual);
  q = parsed(query(wire_name({"*", "example"})));
  EXPECT_EQ(q.name, "*.example");
  EXPECT_TRUE(q.name_unusual);
  q = parsed(query(wire_name({})));  // the root
  EXPECT_EQ(q.name, "");
  EXPECT_EQ(q.label_count, 0U);
}

TEST(DnsQuery, NameLengthLimits) {
  // 63-byte labels are fine, 64 is not.
  EXPECT_TRUE(parse_dns_query(query(wire_name({std::string(63, 'a'), "example"}))).ok());
  EXPECT_FALSE(parse_dns_query(query(wire_name({std::string(64, 'a'), "example"}))).ok());
  // 255 wire bytes: 3 labels of 63 + one of 61 = 4*1 + 250 + 1 = 255.
  const std::string l63(63, 'a');
  EXPECT_TRUE(parse_dns_query(query(wire_name({l63, l63, l63, std::string(61, 'b')}))).ok());
  EXPECT_FALSE(parse_dns_query(query(wire_name({l63, l63, l63, std::string(62, 'b')}))).ok());
}

TEST(DnsQuery, Refusals) {
  const Bytes name = wire_name({"a", "example"});
  Bytes pointer = query(Bytes{1, 'a', 0xc0, 12});
  Bytes loop = query(Bytes{0xc0, 12});
  Bytes ext_label = query(Bytes{0x41, 'a', 0});
  Bytes trailing = query(name);
  trailing.push_back(0);
  Bytes opt_not_root = query(name, qtype::a, 0x0100, 1, 0, 0, 1);
  opt_not_root.insert(opt_not_root.end(), {1, 'x', 0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0});
  Bytes tsig = query(name, qtype::a, 0x0100, 1, 0, 0, 1);
  tsig.insert(tsig.end(), {0, 0, 250, 0, 255, 0, 0, 0, 0, 0, 0});
  Bytes opt_overrun = query(name, qtype::a, 0x0100, 1, 0, 0, 1);
  opt_overrun.insert(opt_overrun.end(), {0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 5, 0, 10});
  Bytes two_opts = query(name, qtype::a, 0x0100, 1, 0, 0, 2);
  for (int i = 0; i < 2; ++i) two_opts.insert(two_opts.end(), {0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0});
  const std::vector<std::pair<const char*, Bytes>> cases = {
      {"compression pointer", pointer},
      {"pointer loop", loop},
      {"extended label type", ext_label},
      {"trailing garbage", trailing},
      {"response", query(name, qtype::a, 0x8100)},
      {"opcode NOTIFY", query(name, qtype::a, 0x2100)},
      {"no question", query({}, qtype::a, 0x0100, 0)},
      {"two questions", query(name, qtype::a, 0x0100, 2)},
      {"answer in query", query(name, qtype::a, 0x0100, 1, 1)},
      {"authority in query", query(name, qtype::a, 0x0100, 1, 0, 1)},
      {"additional without OPT", query(name, qtype::a, 0x0100, 1, 0, 0, 1)},
      {"OPT for a non-root name", opt_not_root},
      {"TSIG", tsig},
      {"OPT data overrun", opt_overrun},
      {"two OPT records", two_opts},
      {"question of type OPT", query(name, qtype::opt)},
      {"name without end", Bytes{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'}},
      {"label past the end", Bytes{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 9, 'a'}},
      {"header only", Bytes(12, 0)},
      {"empty", Bytes{}},
  };
  for (const auto& [what, bytes] : cases) {
    Result<DnsQuery> q = parse_dns_query(bytes);
    EXPECT_FALSE(q.ok()) << what;
    if (!q.ok()) {
      EXPECT_EQ(q.error().message.rfind("dns: ", 0), 0U) << q.error().message;
    }
  }
  EXPECT_FALSE(parse_dns_query(Bytes(kDnsMaxMessage + 1, 0)).ok());
}

TEST(DnsQuery, QtypeNames) {
  EXPECT_EQ(qtype_name(qtype::a), "A");
  EXPECT_EQ(qtype_name(qtype::aaaa), "AAAA");
  EXPECT_EQ(qtype_name(qtype::txt), "TXT");
  EXPECT_EQ(qtype_name(qtype::any), "ANY");
  EXPECT_EQ(qtype_name(qtype::null_rr), "NULL");
  EXPECT_EQ(qtype_name(qtype::https), "HTTPS");
  EXPECT_EQ(qtype_name(qtype::svcb), "SVCB");
  EXPECT_EQ(qtype_name(999), "TYPE999");
  EXPECT_EQ(to_string(Rcode::nxdomain), "NXDOMAIN");
}

TEST(DnsAnswer, AAnswersForTheQueriedName) {
  const DnsQuery q = parsed(kGlibcQuery);  // AAAA
  const std::array<uint8_t, 4> v4{192, 0, 2, 1};
  const std::array<uint8_t, 16> v6{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Bytes r = dns_answer(q, std::span(&v4, 1), std::span(&v6, 1), 60);
  EXPECT_EQ(get16(r, 0), 0xbeef);
  const uint16_t flags = get16(r, 2);
  EXPECT_TRUE(flags & 0x8000);            // QR
  EXPECT_TRUE(flags & 0x0400);            // AA
  EXPECT_TRUE(flags & 0x0100);            // RD echoed
  EXPECT_TRUE(flags & 0x0080);            // RA
  EXPECT_EQ(flags & 0x000f, 0);           // NOERROR
  EXPECT_EQ(get16(r, 4), 1);              // question
  EXPECT_EQ(get16(r, 6), 1);              // only the AAAA answer
  EXPECT_EQ(get16(r, 10), 0);             // no OPT: the query had none
  const size_t ans = sizeof kGlibcQuery;  // the answer follows the echoed question
  ASSERT_EQ(r.size(), ans + 2 + 2 + 2 + 4 + 2 + 16);
  EXPECT_EQ(Bytes(r.begin(), r.begin() + ans).size(), ans);
  EXPECT_TRUE(std::equal(r.begin() + 12, r.begin() + ans, kGlibcQuery + 12));
  EXPECT_EQ(get16(r, ans), 0xc00c);
  EXPECT_EQ(get16(r, ans + 2), qtype::aaaa);
  EXPECT_EQ(get16(r, ans + 8), 60);
  EXPECT_EQ(get16(r, ans + 10), 16);
  EXPECT_EQ(r[ans + 12], 0x20);
}

TEST(DnsAnswer, OtherTypesGetNoData) {
  const DnsQuery q = parsed(query(wire_name({"a", "example"}), qtype::txt));
  const std::array<uint8_t, 4> v4{192, 0, 2, 1};
  const Bytes r = dns_answer(q, std::span(&v4, 1), {}, 60);
  EXPECT_EQ(get16(r, 6), 0);
  EXPECT_EQ(get16(r, 2) & 0xf, 0);
}

TEST(DnsAnswer, EdnsQueryGetsOptAndTruncationAtItsLimit) {
  const DnsQuery q = parsed(kDigQuery);
  std::vector<std::array<uint8_t, 4>> many(200, std::array<uint8_t, 4>{198, 51, 100, 7});
  Bytes r = dns_answer(q, many, {}, 300);
  EXPECT_LE(r.size(), 1232U);
  EXPECT_TRUE(get16(r, 2) & 0x0200);  // TC
  EXPECT_EQ(get16(r, 10), 1);         // OPT
  EXPECT_EQ(r.size(), 12 + (sizeof kDigQuery - 12 - 23) + size_t{get16(r, 6)} * 16 + 11);
  // Over TCP everything fits.
  r = dns_answer(q, many, {}, 300, kDnsMaxMessage);
  EXPECT_FALSE(get16(r, 2) & 0x0200);
  EXPECT_EQ(get16(r, 6), 200);
  // A classic query is held to 512 bytes.
  const DnsQuery classic = parsed(query(wire_name({"a", "example"})));
  r = dns_answer(classic, many, {}, 300);
  EXPECT_LE(r.size(), 512U);
  EXPECT_TRUE(get16(r, 2) & 0x0200);
}

TEST(DnsError, EchoesIdAndQuestion) {
  const DnsQuery q = parsed(kDigQuery);
  for (Rcode rc : {Rcode::nxdomain, Rcode::refused, Rcode::servfail, Rcode::formerr}) {
    const Bytes r = dns_error(q, rc);
    EXPECT_EQ(get16(r, 0), 0x3a5c);
    EXPECT_EQ(get16(r, 2) & 0xf, static_cast<int>(rc));
    EXPECT_EQ(get16(r, 4), 1);
    EXPECT_EQ(get16(r, 6), 0);
    EXPECT_EQ(get16(r, 10), 1);
    EXPECT_EQ((get16(r, 2) & 0x0400) != 0, rc == Rcode::nxdomain);
    // The reply is itself a well-formed message: re-reading the question gives the name.
    Bytes as_query = r;
    as_query[2] &= 0x7f;      // clear QR
    as_query[3] &= 0x70;      // clear RA/rcode
    EXPECT_EQ(parsed(as_query).name, "www.example.com");
  }
}

TEST(DnsError, HeaderOnlyReplies) {
  Bytes garbage(kGlibcQuery, kGlibcQuery + 12);
  garbage.push_back(0xc0);  // a pointer: unparseable
  ASSERT_FALSE(parse_dns_query(garbage).ok());
  auto r = dns_header_reply_for(garbage);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->size(), 12U);
  EXPECT_EQ(get16(*r, 0), 0xbeef);
  EXPECT_EQ(get16(*r, 2), 0x8000 | 0x0100 | 0x0080 | 1);
  EXPECT_EQ(get16(*r, 4), 0);
  // Opcode other than 0: NOTIMP, opcode echoed.
  garbage[2] = 0x28;  // opcode 5 (UPDATE), RD clear
  r = dns_header_reply_for(garbage);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(get16(*r, 2), 0x8000 | 0x2800 | 0x0080 | 4);
  // Never reply to a response or to less than a header.
  garbage[2] = 0x80;
  EXPECT_FALSE(dns_header_reply_for(garbage).has_value());
  EXPECT_FALSE(dns_header_reply_for(Bytes(11, 0)).has_value());
}

TEST(DnsTcp, FramingRoundTrip) {
  Result<Bytes> framed = dns_tcp_frame(kGlibcQuery);
  ASSERT_TRUE(framed.ok());
  ASSERT_EQ(framed->size(), sizeof kGlibcQuery + 2);
  Bytes stream = *framed;
  stream.insert(stream.end(), {0, 5, 1});  // the start of the next frame
  DnsTcpFrame f = parse_dns_tcp_frame(stream);
  ASSERT_EQ(f.status, ParseStatus::complete);
  EXPECT_EQ(f.frame_size, framed->size());
  EXPECT_EQ(parsed(f.message).name, "api.openai.com");
  f = parse_dns_tcp_frame(std::span<const uint8_t>(stream).subspan(f.frame_size));
  EXPECT_EQ(f.status, ParseStatus::need_more);
  EXPECT_EQ(f.need, 7U);
  for (size_t n = 0; n < framed->size(); ++n) {
    f = parse_dns_tcp_frame(std::span<const uint8_t>(*framed).first(n));
    EXPECT_EQ(f.status, ParseStatus::need_more) << n;
    EXPECT_EQ(f.need, n < 2 ? 2 : framed->size());
  }
  EXPECT_EQ(parse_dns_tcp_frame(Bytes{0, 0, 1}).status, ParseStatus::invalid);
  EXPECT_FALSE(dns_tcp_frame(Bytes{}).ok());
  EXPECT_FALSE(dns_tcp_frame(Bytes(kDnsMaxMessage + 1, 0)).ok());
}

}  // namespace
}  // namespace soyaos::network
