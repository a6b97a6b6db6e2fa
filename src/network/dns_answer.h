// DNS on the other side of the Moon (SPEC.md C6, C6a): the A/AAAA queries the upstream
// resolver (src/supervisor/resolver.cc) sends to a configured dns.upstream server, and a
// strict, bounded parser for that server's responses. Pure functions over bytes: no I/O,
// time and memory linear in the input, never crash on any input (fuzz/dns_answer_fuzzer.cc).
//
// A response is only believed when it answers our question: same id, QR set, opcode 0,
// one question equal (case-insensitively, RFC 4343) to the name, type and class asked.
// Anything else is "not ours" (a late or spoofed datagram, ignored by the caller), while
// a response that is ours but cannot be read is malformed (the caller fails with EIO).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace soyaos::network {

// At most this many addresses of each type are kept from one response; the rest are
// ignored (a hostile server cannot make the gateway hold or try thousands of them).
inline constexpr size_t kDnsMaxAddresses = 32;
// At most this many CNAME hops are followed inside one answer section.
inline constexpr size_t kDnsMaxCnameChain = 8;
// At most this many compression pointers are followed while reading one name.
inline constexpr size_t kDnsMaxPointerJumps = 32;

// `name` (a DNS name in plain text: labels of 1..63 bytes separated by '.', optional
// trailing '.', at most 253 characters) as a wire-format QNAME, lower-cased. An error for
// an empty name, an empty or over-long label, or a name over 255 wire bytes. Escapes are
// not interpreted: a label holding '\' is refused.
Result<std::vector<uint8_t>> dns_name_wire(std::string_view name);

// A standard query for `name`: the given id, RD set, one question (qtype, class IN), and
// an EDNS0 OPT record advertising a 1232-byte UDP buffer (so most answers with both
// address types fit in one datagram, DNS flag day 2020).
Result<std::vector<uint8_t>> dns_build_query(uint16_t id, std::string_view name, uint16_t qtype);

enum class DnsResponseStatus {
  ok,         // a response to our question (look at rcode / truncated / addresses)
  not_ours,   // not a response to this query (wrong id, no QR, other question...): ignore
  malformed,  // a response with our id that cannot be read: `error` says why
};

struct DnsResponse {
  DnsResponseStatus status = DnsResponseStatus::malformed;
  std::string error;     // not_ours / malformed: why
  uint16_t id = 0;
  uint8_t rcode = 0;     // 0 NOERROR, 3 NXDOMAIN, ... (the 4-bit header RCODE)
  bool truncated = false;
  bool authoritative = false;
  // A (4 bytes) or AAAA (16 bytes) records of class IN whose owner is the question's name
  // or a name it reaches through the answer section's CNAME chain; in answer order,
  // duplicates kept out, at most kDnsMaxAddresses each. Other record types are skipped.
  std::vector<std::array<uint8_t, 4>> a;
  std::vector<std::array<uint8_t, 16>> aaaa;
};

// Parses `message` as the response to the query (id, qname_wire, qtype, class IN) built
// by dns_build_query. Every read is bounds-checked; compression pointers must point
// backwards and are followed at most kDnsMaxPointerJumps times per name; names over 255
// bytes, labels of the reserved types, records running past the end of the message, and
// A/AAAA records of the wrong length are malformed. The authority and additional
// sections are not read.
DnsResponse parse_dns_response(std::span<const uint8_t> message, uint16_t id,
                               std::span<const uint8_t> qname_wire, uint16_t qtype);

}  // namespace soyaos::network
