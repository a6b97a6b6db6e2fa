#include "network/dns_message.h"

#include <algorithm>

namespace soyaos::network {
namespace {

constexpr uint16_t kFlagQr = 0x8000, kFlagAa = 0x0400, kFlagTc = 0x0200, kFlagRd = 0x0100,
                   kFlagRa = 0x0080, kFlagCd = 0x0010;
constexpr size_t kOptRecordSize = 11;      // root name, type, class, ttl, rdlength 0
constexpr uint16_t kReplyUdpPayload = 1232;  // what the stub advertises (DNS flag day 2020)

uint16_t get16(std::span<const uint8_t> b, size_t at) {
  return static_cast<uint16_t>((b[at] << 8) | b[at + 1]);
}

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v >> 16));
  put16(out, static_cast<uint16_t>(v));
}

bool plain_label_byte(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Appends one (lower-cased) label byte in presentation form.
void append_presentation(std::string& out, uint8_t c) {
  if (c == '.' || c == '\\') {
    out += '\\';
    out += static_cast<char>(c);
  } else if (c < 0x21 || c > 0x7e) {
    out += '\\';
    out += static_cast<char>('0' + c / 100);
    out += static_cast<char>('0' + (c / 10) % 10);
    out += static_cast<char>('0' + c % 10);
  } else {
    out += static_cast<char>(c);
  }
}

// Header + echoed question, the start of every reply to a parsed query.
std::vector<uint8_t> reply_start(const DnsQuery& q, Rcode rcode, bool aa, bool tc, uint16_t ancount) {
  std::vector<uint8_t> out;
  out.reserve(kDnsHeaderSize + q.qname_wire.size() + 4 + kOptRecordSize);
  put16(out, q.id);
  uint16_t flags = kFlagQr | kFlagRa | static_cast<uint16_t>(rcode);
  if (aa) flags |= kFlagAa;
  if (tc) flags |= kFlagTc;
  if (q.rd) flags |= kFlagRd;
  if (q.cd) flags |= kFlagCd;
  put16(out, flags);
  put16(out, 1);
  put16(out, ancount);
  put16(out, 0);
  put16(out, q.edns ? 1 : 0);
  out.insert(out.end(), q.qname_wire.begin(), q.qname_wire.end());
  put16(out, q.qtype);
  put16(out, q.qclass);
  return out;
}

void append_opt(std::vector<uint8_t>& out) {
  out.push_back(0);  // root name
  put16(out, qtype::opt);
  put16(out, kReplyUdpPayload);
  put32(out, 0);  // extended rcode 0, version 0, no flags
  put16(out, 0);  // no options
}

}  // namespace

std::string qtype_name(uint16_t type) {
  switch (type) {
    case qtype::a: return "A";
    case qtype::ns: return "NS";
    case qtype::cname: return "CNAME";
    case qtype::soa: return "SOA";
    case qtype::null_rr: return "NULL";
    case qtype::ptr: return "PTR";
    case qtype::hinfo: return "HINFO";
    case qtype::mx: return "MX";
    case qtype::txt: return "TXT";
    case qtype::aaaa: return "AAAA";
    case qtype::srv: return "SRV";
    case qtype::naptr: return "NAPTR";
    case qtype::opt: return "OPT";
    case qtype::ds: return "DS";
    case qtype::rrsig: return "RRSIG";
    case qtype::dnskey: return "DNSKEY";
    case qtype::svcb: return "SVCB";
    case qtype::https: return "HTTPS";
    case qtype::ixfr: return "IXFR";
    case qtype::axfr: return "AXFR";
    case qtype::any: return "ANY";
    case qtype::caa: return "CAA";
    default: return "TYPE" + std::to_string(type);
  }
}

std::string_view to_string(Rcode r) {
  switch (r) {
    case Rcode::noerror: return "NOERROR";
    case Rcode::formerr: return "FORMERR";
    case Rcode::servfail: return "SERVFAIL";
    case Rcode::nxdomain: return "NXDOMAIN";
    case Rcode::notimp: return "NOTIMP";
    case Rcode::refused: return "REFUSED";
  }
  return "RCODE?";
}

Result<DnsHeader> parse_dns_header(std::span<const uint8_t> m) {
  if (m.size() < kDnsHeaderSize) {
    return make_error("dns: message of " + std::to_string(m.size()) + " bytes is shorter than a header");
  }
  DnsHeader h;
  h.id = get16(m, 0);
  const uint16_t flags = get16(m, 2);
  h.qr = (flags & kFlagQr) != 0;
  h.opcode = static_cast<uint8_t>((flags >> 11) & 0xf);
  h.rd = (flags & kFlagRd) != 0;
  h.cd = (flags & kFlagCd) != 0;
  h.qdcount = get16(m, 4);
  h.ancount = get16(m, 6);
  h.nscount = get16(m, 8);
  h.arcount = get16(m, 10);
  return h;
}

Result<DnsQuery> parse_dns_query(std::span<const uint8_t> m) {
  if (m.size() > kDnsMaxMessage) {
    return make_error("dns: message of " + std::to_string(m.size()) + " bytes is over 65535");
  }
  Result<DnsHeader> hr = parse_dns_header(m);
  if (!hr) return hr.error();
  const DnsHeader& h = *hr;
  if (h.qr) return make_error("dns: message is a response, not a query");
  if (h.opcode != 0) return make_error("dns: opcode " + std::to_string(h.opcode) + " is not a standard query");
  if (h.qdcount != 1) return make_error("dns: QDCOUNT is " + std::to_string(h.qdcount) + ", not 1");
  if (h.ancount != 0 || h.nscount != 0) return make_error("dns: a query with answer or authority records");
  if (h.arcount > 1) return make_error("dns: ARCOUNT is " + std::to_string(h.arcount) + ", at most one OPT record is accepted");

  DnsQuery q;
  q.id = h.id;
  q.rd = h.rd;
  q.cd = h.cd;
  size_t at = kDnsHeaderSize;
  // QNAME: a sequence of labels ending with the zero-length root label.
  for (;;) {
    if (at >= m.size()) return make_error("dns: question name runs past the end of the message");
    const uint8_t len = m[at];
    if ((len & 0xc0) == 0xc0) return make_error("dns: compression pointer in a query's question name");
    if ((len & 0xc0) != 0) return make_error("dns: reserved label type " + std::to_string(len >> 6));
    if (at + 1 + len - kDnsHeaderSize > kDnsMaxName) return make_error("dns: question name longer than 255 bytes");
    if (len == 0) {
      ++at;
      break;
    }
    if (at + 1 + len > m.size()) return make_error("dns: label runs past the end of the message");
    if (q.label_count > 0) q.name += '.';
    for (size_t i = 0; i < len; ++i) {
      uint8_t c = m[at + 1 + i];
      if (c >= 'A' && c <= 'Z') c = static_cast<uint8_t>(c - 'A' + 'a');
      if (!plain_label_byte(c)) q.name_unusual = true;
      append_presentation(q.name, c);
    }
    ++q.label_count;
    at += 1 + len;
  }
  q.qname_wire.assign(m.begin() + kDnsHeaderSize, m.begin() + static_cast<std::ptrdiff_t>(at));
  if (at + 4 > m.size()) return make_error("dns: question type and class run past the end of the message");
  q.qtype = get16(m, at);
  q.qclass = get16(m, at + 2);
  at += 4;
  if (q.qtype == qtype::opt) return make_error("dns: question of type OPT");

  if (h.arcount == 1) {
    // EDNS0 OPT (RFC 6891 6.1.2): root name, TYPE 41, CLASS = payload size, TTL = extended
    // rcode/version/flags, RDLENGTH + options, which are skipped.
    if (at + kOptRecordSize > m.size()) return make_error("dns: additional record runs past the end of the message");
    if (m[at] != 0) return make_error("dns: additional record is not an OPT record for the root name");
    if (get16(m, at + 1) != qtype::opt) {
      return make_error("dns: additional record of type " + qtype_name(get16(m, at + 1)) + ", only OPT is accepted");
    }
    Edns e;
    e.udp_payload_size = get16(m, at + 3);
    e.version = m[at + 6];
    e.dnssec_ok = (m[at + 7] & 0x80) != 0;
    const size_t rdlength = get16(m, at + 9);
    at += kOptRecordSize;
    if (at + rdlength > m.size()) return make_error("dns: OPT record data runs past the end of the message");
    at += rdlength;
    q.edns = e;
  }
  if (at != m.size()) {
    return make_error("dns: " + std::to_string(m.size() - at) + " bytes after the records the header announces");
  }
  return q;
}

std::vector<uint8_t> dns_answer(const DnsQuery& q, std::span<const std::array<uint8_t, 4>> a,
                                std::span<const std::array<uint8_t, 16>> aaaa, uint32_t ttl, size_t max_size) {
  if (max_size == 0) {
    max_size = kDnsClassicUdp;
    if (q.edns) max_size = std::clamp<size_t>(q.edns->udp_payload_size, kDnsClassicUdp, 4096);
  }
  max_size = std::min(max_size, kDnsMaxMessage);
  const bool want_a = q.qtype == qtype::a && q.qclass == kDnsClassIn;
  const bool want_aaaa = q.qtype == qtype::aaaa && q.qclass == kDnsClassIn;
  const size_t rdlen = want_a ? 4 : 16;
  const size_t available = want_a ? a.size() : want_aaaa ? aaaa.size() : 0;
  // Each answer: name pointer to the question (2), type, class, ttl, rdlength, rdata.
  const size_t record_size = 2 + 2 + 2 + 4 + 2 + rdlen;
  const size_t fixed = kDnsHeaderSize + q.qname_wire.size() + 4 + (q.edns ? kOptRecordSize : 0);
  size_t fit = max_size > fixed ? (max_size - fixed) / record_size : 0;
  fit = std::min({fit, available, size_t{0xffff}});
  const bool truncated = fit < available;

  std::vector<uint8_t> out = reply_start(q, Rcode::noerror, true, truncated, static_cast<uint16_t>(fit));
  for (size_t i = 0; i < fit; ++i) {
    put16(out, 0xc000 | kDnsHeaderSize);  // the question's name
    put16(out, q.qtype);
    put16(out, kDnsClassIn);
    put32(out, ttl);
    put16(out, static_cast<uint16_t>(rdlen));
    if (want_a) {
      out.insert(out.end(), a[i].begin(), a[i].end());
    } else {
      out.insert(out.end(), aaaa[i].begin(), aaaa[i].end());
    }
  }
  if (q.edns) append_opt(out);
  return out;
}

std::vector<uint8_t> dns_error(const DnsQuery& q, Rcode rcode) {
  std::vector<uint8_t> out = reply_start(q, rcode, rcode == Rcode::nxdomain, false, 0);
  if (q.edns) append_opt(out);
  return out;
}

std::vector<uint8_t> dns_header_reply(const DnsHeader& h, Rcode rcode) {
  std::vector<uint8_t> out;
  out.reserve(kDnsHeaderSize);
  put16(out, h.id);
  uint16_t flags = kFlagQr | kFlagRa | static_cast<uint16_t>(h.opcode << 11) | static_cast<uint16_t>(rcode);
  if (h.rd) flags |= kFlagRd;
  put16(out, flags);
  for (int i = 0; i < 4; ++i) put16(out, 0);
  return out;
}

std::optional<std::vector<uint8_t>> dns_header_reply_for(std::span<const uint8_t> message) {
  Result<DnsHeader> h = parse_dns_header(message);
  if (!h || h->qr) return std::nullopt;
  return dns_header_reply(*h, h->opcode == 0 ? Rcode::formerr : Rcode::notimp);
}

DnsTcpFrame parse_dns_tcp_frame(std::span<const uint8_t> stream) {
  DnsTcpFrame f;
  if (stream.size() < 2) {
    f.need = 2;
    return f;
  }
  const size_t len = get16(stream, 0);
  if (len == 0) {
    f.status = ParseStatus::invalid;
    return f;
  }
  if (stream.size() < 2 + len) {
    f.need = 2 + len;
    return f;
  }
  f.status = ParseStatus::complete;
  f.message = stream.subspan(2, len);
  f.frame_size = 2 + len;
  return f;
}

Result<std::vector<uint8_t>> dns_tcp_frame(std::span<const uint8_t> message) {
  if (message.empty() || message.size() > kDnsMaxMessage) {
    return make_error("dns: cannot frame a message of " + std::to_string(message.size()) + " bytes for TCP");
  }
  std::vector<uint8_t> out;
  out.reserve(2 + message.size());
  put16(out, static_cast<uint16_t>(message.size()));
  out.insert(out.end(), message.begin(), message.end());
  return out;
}

}  // namespace soyaos::network
