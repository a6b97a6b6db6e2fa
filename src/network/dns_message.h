// DNS messages for the Comet's DNS stub (SPEC.md C6, RFC 1035, RFC 6891): a strict
// parser for the one kind of message the stub accepts, a standard query with one
// question, and builders for the only replies it sends. Pure functions over bytes: no
// I/O, time and memory linear in the input, never crash on any input.
// docs/network-parsers.md explains what is refused and why.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "network/parse_status.h"

namespace soyaos::network {

// Largest DNS message (TCP length prefix is 16 bits); also the parser's input bound.
inline constexpr size_t kDnsMaxMessage = 65535;
inline constexpr size_t kDnsHeaderSize = 12;
inline constexpr size_t kDnsMaxLabel = 63;     // RFC 1035 2.3.4
inline constexpr size_t kDnsMaxName = 255;     // wire length, length bytes included
inline constexpr size_t kDnsClassicUdp = 512;  // UDP reply size without EDNS0

// Query types by number (IANA "Resource Record (RR) TYPEs").
namespace qtype {
inline constexpr uint16_t a = 1, ns = 2, cname = 5, soa = 6, null_rr = 10, ptr = 12, hinfo = 13,
                          mx = 15, txt = 16, aaaa = 28, srv = 33, naptr = 35, opt = 41, ds = 43,
                          rrsig = 46, dnskey = 48, svcb = 64, https = 65, ixfr = 251, axfr = 252,
                          any = 255, caa = 257;
}  // namespace qtype
inline constexpr uint16_t kDnsClassIn = 1;

// "A", "AAAA", "TXT", ... or "TYPE<n>" (RFC 3597) for a number without a name.
std::string qtype_name(uint16_t type);

enum class Rcode : uint8_t {
  noerror = 0,
  formerr = 1,
  servfail = 2,
  nxdomain = 3,
  notimp = 4,
  refused = 5,
};
std::string_view to_string(Rcode r);

// The fixed 12-byte header, decoded.
struct DnsHeader {
  uint16_t id = 0;
  bool qr = false;          // true in responses
  uint8_t opcode = 0;       // 0 = standard query
  bool rd = false;          // recursion desired
  bool cd = false;          // checking disabled (RFC 4035)
  uint16_t qdcount = 0, ancount = 0, nscount = 0, arcount = 0;
};

// The EDNS0 OPT pseudo-record of a query (RFC 6891); its options are skipped unread.
struct Edns {
  uint16_t udp_payload_size = 0;  // the requester's UDP buffer size (the OPT CLASS)
  uint8_t version = 0;
  bool dnssec_ok = false;
};

// A standard query with exactly one question, as accepted by parse_dns_query.
struct DnsQuery {
  uint16_t id = 0;
  bool rd = false;
  bool cd = false;
  // The name in presentation form: lower-cased, no trailing dot, "" for the root. Bytes
  // that would make the text ambiguous are escaped as in zone files (RFC 4343): '.' and
  // '\' inside a label become "\." and "\\", bytes outside 0x21..0x7e become "\DDD", so
  // the text names exactly one wire name and never matches a differently labelled one.
  std::string name;
  // True when some label holds a byte outside [a-z0-9-_] (after lower-casing): such a
  // name is no host name, whatever the policy says; the stub can report it as such.
  bool name_unusual = false;
  size_t label_count = 0;
  std::vector<uint8_t> qname_wire;  // the QNAME exactly as received (echoed in replies)
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  std::optional<Edns> edns;
};

// Decodes the header of any message of at least 12 bytes.
Result<DnsHeader> parse_dns_header(std::span<const uint8_t> message);

// Parses a standard query: QR clear, opcode 0, QDCOUNT 1, ANCOUNT and NSCOUNT 0,
// ARCOUNT 0 or 1 (and then the record is an EDNS0 OPT for the root name), no compression
// pointers, labels <= 63 bytes, name <= 255 bytes, and nothing after the records the
// counts announce. Anything else is an error whose message says what was wrong.
Result<DnsQuery> parse_dns_query(std::span<const uint8_t> message);

// The reply to `query`: NOERROR, AA and RA set, RD echoed, the question echoed, then the
// addresses of `a` (only when the query's type is A) or `aaaa` (only for AAAA) as answers
// for the query's own name, with `ttl`. For any other type the answer section is empty
// (NODATA). An OPT record is added when the query had one. Answers that would not fit in
// `max_size` bytes are left out and TC is set; max_size 0 means the query's UDP limit
// (512, or its EDNS0 buffer size clamped to 512..4096). Over TCP pass kDnsMaxMessage.
std::vector<uint8_t> dns_answer(const DnsQuery& query, std::span<const std::array<uint8_t, 4>> a,
                                std::span<const std::array<uint8_t, 16>> aaaa, uint32_t ttl,
                                size_t max_size = 0);

// An error reply to a parsed query (NXDOMAIN, REFUSED, SERVFAIL, FORMERR, NOTIMP): id and
// question echoed, no records but an OPT when the query had one. AA is set for NXDOMAIN
// (the stub is the authority on what the sandbox may resolve), RA always.
std::vector<uint8_t> dns_error(const DnsQuery& query, Rcode rcode);

// A header-only reply (12 bytes, all counts 0) for a message whose question could not be
// parsed: id, opcode and RD echoed, QR and RA set. Use FORMERR, or NOTIMP for an opcode
// other than 0. Callers must not reply to a message whose QR bit is set (that would let
// two responders bounce replies forever): dns_header_reply_for returns nothing then, and
// nothing for a message shorter than a header.
std::vector<uint8_t> dns_header_reply(const DnsHeader& header, Rcode rcode);
std::optional<std::vector<uint8_t>> dns_header_reply_for(std::span<const uint8_t> message);

// DNS over TCP (RFC 1035 4.2.2, RFC 7766): each message has a 2-byte big-endian length.
struct DnsTcpFrame {
  ParseStatus status = ParseStatus::need_more;
  std::span<const uint8_t> message;  // complete: the message, without its prefix
  size_t frame_size = 0;             // complete: 2 + message size, the bytes to consume
  size_t need = 0;                   // need_more: total bytes needed for this frame
};
// Reads the frame at the start of `stream`. A zero length is invalid.
DnsTcpFrame parse_dns_tcp_frame(std::span<const uint8_t> stream);
// Prefixes `message` with its length; an error when it is empty or over 65535 bytes.
Result<std::vector<uint8_t>> dns_tcp_frame(std::span<const uint8_t> message);

}  // namespace soyaos::network
