#include "network/dns_answer.h"

#include <algorithm>

#include "network/dns_message.h"

namespace soyaos::network {
namespace {

constexpr uint16_t kFlagQr = 0x8000, kFlagAa = 0x0400, kFlagTc = 0x0200, kFlagRd = 0x0100;
constexpr uint16_t kQueryUdpPayload = 1232;
constexpr size_t kRecordFixed = 10;  // type, class, ttl, rdlength

uint16_t get16(std::span<const uint8_t> b, size_t at) { return static_cast<uint16_t>((b[at] << 8) | b[at + 1]); }

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? static_cast<uint8_t>(c - 'A' + 'a') : c; }

// Reads the (possibly compressed) name at `at` into lower-cased wire form. `end` is set to
// the offset just after the name where it starts (after its first pointer, if any). An
// empty string when fine, else why not.
std::string read_name(std::span<const uint8_t> m, size_t at, std::vector<uint8_t>& wire, size_t& end) {
  wire.clear();
  size_t pos = at;
  bool jumped = false;
  size_t jumps = 0;
  for (;;) {
    if (pos >= m.size()) return "name runs past the end of the message";
    const uint8_t len = m[pos];
    if ((len & 0xc0) == 0xc0) {
      if (pos + 1 >= m.size()) return "compression pointer runs past the end of the message";
      const size_t target = (static_cast<size_t>(len & 0x3f) << 8) | m[pos + 1];
      if (!jumped) end = pos + 2;
      // Backwards only, and never into the header: every jump then makes progress
      // towards the start, and the jump count bounds label/pointer cycles.
      if (target >= pos || target < kDnsHeaderSize) return "compression pointer does not point backwards";
      if (++jumps > kDnsMaxPointerJumps) return "too many compression pointers in one name";
      jumped = true;
      pos = target;
      continue;
    }
    if ((len & 0xc0) != 0) return "reserved label type " + std::to_string(len >> 6);
    if (wire.size() + 1 + len > kDnsMaxName) return "name longer than 255 bytes";
    if (len == 0) {
      wire.push_back(0);
      if (!jumped) end = pos + 1;
      return "";
    }
    if (pos + 1 + len > m.size()) return "label runs past the end of the message";
    wire.push_back(len);
    for (size_t i = 0; i < len; ++i) wire.push_back(lower(m[pos + 1 + i]));
    pos += 1 + len;
  }
}

std::vector<uint8_t> lowered(std::span<const uint8_t> wire) {
  std::vector<uint8_t> out(wire.begin(), wire.end());
  // Label length bytes are < 64, never in 'A'..'Z', so lower-casing every byte is exact.
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

DnsResponse fail(DnsResponseStatus status, std::string why, DnsResponse r = {}) {
  r.status = status;
  r.error = "dns: " + std::move(why);
  r.a.clear();
  r.aaaa.clear();
  return r;
}

struct Record {
  std::vector<uint8_t> owner;
  uint16_t type = 0;
  size_t rdata = 0;
  std::vector<uint8_t> cname;  // CNAME target, lower-cased wire
};

}  // namespace

Result<std::vector<uint8_t>> dns_name_wire(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return make_error("dns: empty name", EINVAL);
  if (name.size() > 253) return make_error("dns: name longer than 253 characters", EINVAL);
  std::vector<uint8_t> wire;
  wire.reserve(name.size() + 2);
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const std::string_view label = name.substr(start, dot - start);
    if (label.empty()) return make_error("dns: empty label in \"" + std::string(name) + "\"", EINVAL);
    if (label.size() > kDnsMaxLabel) return make_error("dns: label longer than 63 bytes", EINVAL);
    if (label.find('\\') != std::string_view::npos) return make_error("dns: escaped names are not supported", EINVAL);
    wire.push_back(static_cast<uint8_t>(label.size()));
    for (char c : label) wire.push_back(lower(static_cast<uint8_t>(c)));
    start = dot + 1;
  }
  wire.push_back(0);
  if (wire.size() > kDnsMaxName) return make_error("dns: name longer than 255 bytes", EINVAL);
  return wire;
}

Result<std::vector<uint8_t>> dns_build_query(uint16_t id, std::string_view name, uint16_t type) {
  auto wire = dns_name_wire(name);
  if (!wire) return wire.error();
  std::vector<uint8_t> out;
  out.reserve(kDnsHeaderSize + wire->size() + 4 + 11);
  put16(out, id);
  put16(out, kFlagRd);
  put16(out, 1);  // QDCOUNT
  put16(out, 0);
  put16(out, 0);
  put16(out, 1);  // ARCOUNT: the OPT record
  out.insert(out.end(), wire->begin(), wire->end());
  put16(out, type);
  put16(out, kDnsClassIn);
  out.push_back(0);  // OPT: root name
  put16(out, qtype::opt);
  put16(out, kQueryUdpPayload);
  put16(out, 0);  // extended rcode, version
  put16(out, 0);  // flags (no DO: we do not validate DNSSEC here)
  put16(out, 0);  // no options
  return out;
}

DnsResponse parse_dns_response(std::span<const uint8_t> m, uint16_t id, std::span<const uint8_t> qname_wire,
                               uint16_t type) {
  DnsResponse r;
  if (m.size() < kDnsHeaderSize) return fail(DnsResponseStatus::not_ours, "message shorter than a header");
  r.id = get16(m, 0);
  if (r.id != id) return fail(DnsResponseStatus::not_ours, "id " + std::to_string(r.id) + " is not the query's", r);
  if (m.size() > kDnsMaxMessage) return fail(DnsResponseStatus::malformed, "message over 65535 bytes", r);
  const uint16_t flags = get16(m, 2);
  if ((flags & kFlagQr) == 0) return fail(DnsResponseStatus::not_ours, "message is a query, not a response", r);
  if (((flags >> 11) & 0xf) != 0) return fail(DnsResponseStatus::not_ours, "opcode is not a standard query", r);
  r.rcode = static_cast<uint8_t>(flags & 0xf);
  r.truncated = (flags & kFlagTc) != 0;
  r.authoritative = (flags & kFlagAa) != 0;
  const uint16_t qdcount = get16(m, 4);
  const uint16_t ancount = get16(m, 6);
  if (qdcount != 1) {
    return fail(DnsResponseStatus::malformed, "response has " + std::to_string(qdcount) + " questions, not 1", r);
  }

  // The question must be ours: otherwise the datagram answers some other query.
  std::vector<uint8_t> name;
  size_t at = kDnsHeaderSize;
  if (std::string why = read_name(m, at, name, at); !why.empty()) {
    return fail(DnsResponseStatus::malformed, "question: " + why, r);
  }
  const std::vector<uint8_t> want = lowered(qname_wire);
  if (name != want) return fail(DnsResponseStatus::not_ours, "response is for another name", r);
  if (at + 4 > m.size()) return fail(DnsResponseStatus::malformed, "question runs past the end of the message", r);
  if (get16(m, at) != type || get16(m, at + 2) != kDnsClassIn) {
    return fail(DnsResponseStatus::not_ours, "response is for another type or class", r);
  }
  at += 4;
  // A truncated response is incomplete by definition: the caller asks again over TCP.
  if (r.truncated) {
    r.status = DnsResponseStatus::ok;
    return r;
  }

  std::vector<Record> records;
  records.reserve(std::min<size_t>(ancount, m.size() / (kRecordFixed + 1)));
  for (size_t i = 0; i < ancount; ++i) {
    Record rec;
    const std::string where = "answer " + std::to_string(i) + ": ";
    if (std::string why = read_name(m, at, rec.owner, at); !why.empty()) {
      return fail(DnsResponseStatus::malformed, where + why, r);
    }
    if (at + kRecordFixed > m.size()) return fail(DnsResponseStatus::malformed, where + "record runs past the end", r);
    rec.type = get16(m, at);
    const uint16_t klass = get16(m, at + 2);
    const size_t rdlength = get16(m, at + 8);
    at += kRecordFixed;
    if (at + rdlength > m.size()) return fail(DnsResponseStatus::malformed, where + "record data runs past the end", r);
    rec.rdata = at;
    if (klass == kDnsClassIn) {
      if (rec.type == qtype::a && rdlength != 4) {
        return fail(DnsResponseStatus::malformed, where + "A record of " + std::to_string(rdlength) + " bytes", r);
      }
      if (rec.type == qtype::aaaa && rdlength != 16) {
        return fail(DnsResponseStatus::malformed, where + "AAAA record of " + std::to_string(rdlength) + " bytes", r);
      }
      if (rec.type == qtype::cname) {
        size_t end = 0;
        // The target may point back into the message, but its own bytes stay in the RDATA.
        if (std::string why = read_name(m.first(at + rdlength), at, rec.cname, end); !why.empty()) {
          return fail(DnsResponseStatus::malformed, where + "CNAME target: " + why, r);
        }
        if (end != at + rdlength) return fail(DnsResponseStatus::malformed, where + "CNAME data longer than its name", r);
      }
    }
    at += rdlength;
    if (klass == kDnsClassIn && (rec.type == qtype::a || rec.type == qtype::aaaa || rec.type == qtype::cname)) {
      records.push_back(std::move(rec));
    }
  }

  // Names that stand for the question: the name itself and, hop by hop, CNAME targets
  // (in any order in the section; bounded by kDnsMaxCnameChain hops).
  std::vector<std::vector<uint8_t>> owners{want};
  for (size_t hop = 0; hop < kDnsMaxCnameChain; ++hop) {
    bool grew = false;
    for (const Record& rec : records) {
      if (rec.type != qtype::cname) continue;
      if (std::find(owners.begin(), owners.end(), rec.owner) == owners.end()) continue;
      if (std::find(owners.begin(), owners.end(), rec.cname) != owners.end()) continue;
      owners.push_back(rec.cname);
      grew = true;
      break;  // one hop per round: the bound is on the chain's length
    }
    if (!grew) break;
  }
  for (const Record& rec : records) {
    if (std::find(owners.begin(), owners.end(), rec.owner) == owners.end()) continue;
    if (rec.type == qtype::a && r.a.size() < kDnsMaxAddresses) {
      std::array<uint8_t, 4> addr{};
      std::copy_n(m.begin() + static_cast<std::ptrdiff_t>(rec.rdata), 4, addr.begin());
      if (std::find(r.a.begin(), r.a.end(), addr) == r.a.end()) r.a.push_back(addr);
    } else if (rec.type == qtype::aaaa && r.aaaa.size() < kDnsMaxAddresses) {
      std::array<uint8_t, 16> addr{};
      std::copy_n(m.begin() + static_cast<std::ptrdiff_t>(rec.rdata), 16, addr.begin());
      if (std::find(r.aaaa.begin(), r.aaaa.end(), addr) == r.aaaa.end()) r.aaaa.push_back(addr);
    }
  }
  r.status = DnsResponseStatus::ok;
  return r;
}

}  // namespace soyaos::network
