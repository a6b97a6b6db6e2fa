// libFuzzer target for the upstream resolver's DNS code (STYLE.md: fuzz every parser).
// parse_dns_response promises: never crash, bounded time and memory, whatever the
// upstream server sends. The expected id is taken from the input itself (so the fuzzer
// gets past the id check) and the question is "example.com" A or AAAA (the seeds in
// fuzz/corpus/dns_answer/ ask for it). Invariants checked (violations trap): a result has
// a reason exactly when it is not ok, addresses only when ok, at most kDnsMaxAddresses
// each, none when truncated; dns_build_query of any name it accepts re-parses as a query
// for the same name.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "network/dns_answer.h"
#include "network/dns_message.h"

namespace {

using namespace soyaos::network;

void check(const DnsResponse& r) {
  if ((r.status == DnsResponseStatus::ok) != r.error.empty()) __builtin_trap();
  if (r.status != DnsResponseStatus::ok && (!r.a.empty() || !r.aaaa.empty())) __builtin_trap();
  if (r.a.size() > kDnsMaxAddresses || r.aaaa.size() > kDnsMaxAddresses) __builtin_trap();
  if (r.truncated && (!r.a.empty() || !r.aaaa.empty())) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  static const std::vector<uint8_t> kName = [] {
    auto w = dns_name_wire("example.com");
    return w.ok() ? w.value() : std::vector<uint8_t>{};
  }();
  const uint16_t id = size >= 2 ? static_cast<uint16_t>((data[0] << 8) | data[1]) : 0;
  check(parse_dns_response(in, id, kName, qtype::a));
  check(parse_dns_response(in, id, kName, qtype::aaaa));
  // Another id: never ours.
  if (size >= 12 && parse_dns_response(in, static_cast<uint16_t>(id + 1), kName, qtype::a).status !=
                        DnsResponseStatus::not_ours) {
    __builtin_trap();
  }

  // The input as a name to query for.
  const std::string_view name(reinterpret_cast<const char*>(data), std::min<size_t>(size, 300));
  if (auto q = dns_build_query(id, name, qtype::a)) {
    auto back = parse_dns_query(*q);
    if (!back || back->id != id || back->qtype != qtype::a) __builtin_trap();
    auto wire = dns_name_wire(name);
    if (!wire || back->qname_wire != *wire) __builtin_trap();
  }
  return 0;
}
