// libFuzzer target for the DNS stub's message code (STYLE.md: fuzz every parser).
// parse_dns_query and parse_dns_tcp_frame promise: never crash, bounded time and memory.
// Invariants checked (violations trap): a parsed query's name fits the limits, and
// re-serialising it (as a query, and as each reply) and re-parsing gives the same
// id, name and type; replies respect their size limit.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "network/dns_message.h"

namespace {

using namespace soyaos::network;

void check_query(const DnsQuery& q, size_t input_size) {
  if (q.qname_wire.empty() || q.qname_wire.size() > kDnsMaxName) __builtin_trap();
  if (kDnsHeaderSize + q.qname_wire.size() + 4 > input_size) __builtin_trap();
  if (q.label_count > 127) __builtin_trap();
  if (q.name.empty() != (q.label_count == 0)) __builtin_trap();
  for (char c : q.name) {
    if (c >= 'A' && c <= 'Z') __builtin_trap();
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) __builtin_trap();
  }

  // The same question as a fresh query.
  std::vector<uint8_t> again = {static_cast<uint8_t>(q.id >> 8), static_cast<uint8_t>(q.id), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  again.insert(again.end(), q.qname_wire.begin(), q.qname_wire.end());
  again.insert(again.end(), {static_cast<uint8_t>(q.qtype >> 8), static_cast<uint8_t>(q.qtype),
                             static_cast<uint8_t>(q.qclass >> 8), static_cast<uint8_t>(q.qclass)});
  const soyaos::Result<DnsQuery> r = parse_dns_query(again);
  if (!r || r->name != q.name || r->qtype != q.qtype || r->id != q.id || r->name_unusual != q.name_unusual) {
    __builtin_trap();
  }

  // Replies: well-formed, within their limits, and their question re-parses.
  const std::array<uint8_t, 4> v4{192, 0, 2, 1};
  const std::array<uint8_t, 16> v6{0x20, 0x01, 0x0d, 0xb8};
  const std::vector<std::array<uint8_t, 4>> many_v4(300, v4);
  const std::vector<std::array<uint8_t, 16>> many_v6(300, v6);
  const std::vector<std::vector<uint8_t>> replies = {
      dns_answer(q, many_v4, many_v6, 60), dns_answer(q, std::span(&v4, 1), std::span(&v6, 1), 0),
      dns_error(q, Rcode::nxdomain), dns_error(q, Rcode::refused)};
  for (const std::vector<uint8_t>& reply : replies) {
    if (reply.size() > 4096 || reply.size() < kDnsHeaderSize + q.qname_wire.size() + 4) __builtin_trap();
    const size_t answers = static_cast<size_t>((reply[6] << 8) | reply[7]);
    if (answers > 0 && q.qtype != qtype::a && q.qtype != qtype::aaaa) __builtin_trap();
    // As a query again: clear QR/AA/TC/RA/rcode and drop the answers.
    std::vector<uint8_t> as_query(reply.begin(), reply.begin() + static_cast<std::ptrdiff_t>(kDnsHeaderSize + q.qname_wire.size() + 4));
    as_query[2] &= 0x79;
    as_query[3] &= 0x10;
    as_query[6] = as_query[7] = as_query[10] = as_query[11] = 0;
    const soyaos::Result<DnsQuery> back = parse_dns_query(as_query);
    if (!back || back->name != q.name || back->qtype != q.qtype || back->id != q.id) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  const soyaos::Result<DnsQuery> q = parse_dns_query(in);
  if (q) {
    check_query(q.value(), size);
    // Counts must account for every byte: no strict prefix is a query.
    if (parse_dns_query(in.first(size - 1)).ok()) __builtin_trap();
  }
  if (!q && q.error().message.empty()) __builtin_trap();

  if (const auto reply = dns_header_reply_for(in)) {
    if (reply->size() != kDnsHeaderSize || ((*reply)[2] & 0x80) == 0) __builtin_trap();
  }

  // The same bytes as a DNS-over-TCP stream.
  const DnsTcpFrame f = parse_dns_tcp_frame(in);
  switch (f.status) {
    case ParseStatus::complete:
      if (f.frame_size > size || f.frame_size != f.message.size() + 2 || f.message.empty()) __builtin_trap();
      if (const soyaos::Result<DnsQuery> inner = parse_dns_query(f.message)) check_query(inner.value(), f.message.size());
      break;
    case ParseStatus::need_more:
      if (f.need <= size) __builtin_trap();
      break;
    case ParseStatus::invalid: break;
  }
  return 0;
}
