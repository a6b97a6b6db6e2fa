// libFuzzer target for the egress gateway's ClientHello parser (STYLE.md: fuzz every
// parser). parse_client_hello promises: never crash, bounded time and memory.
// Invariants checked (violations trap): a complete parse used no more than the input,
// gives the same result on exactly the bytes it used, its strict prefixes are need_more
// (asking for no more than the whole), and any SNI is a plain lower-case
// host name; need_more asks for more than was given; invalid says why.
#include <cstddef>
#include <cstdint>
#include <span>

#include "network/tls_client_hello.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soyaos::network;
  const std::span<const uint8_t> in(data, size);
  const ClientHelloParse p = parse_client_hello(in);
  switch (p.status) {
    case ParseStatus::complete: {
      const ClientHello& h = p.hello;
      if (h.consumed > size || h.consumed < kTlsRecordHeader + 4 + 38) __builtin_trap();
      if (h.records == 0 || h.records > kTlsMaxHelloRecords) __builtin_trap();
      if (h.cipher_suites.empty()) __builtin_trap();
      if (h.server_name) {
        const std::string& s = *h.server_name;
        if (s.empty() || s.size() > 253 || s.back() == '.' || s.front() == '.') __builtin_trap();
        for (char c : s) {
          const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
          if (!ok) __builtin_trap();
        }
        if (s.find("..") != std::string::npos) __builtin_trap();
      }
      for (const std::string& a : h.alpn) {
        if (a.empty() || a.size() > 255) __builtin_trap();
      }
      const ClientHelloParse again = parse_client_hello(in.first(h.consumed));
      if (again.status != ParseStatus::complete || again.hello.server_name != h.server_name ||
          again.hello.alpn != h.alpn || again.hello.consumed != h.consumed) {
        __builtin_trap();
      }
      // Every strict prefix is need_more (checked at two points: one byte short, half).
      for (const size_t n : {h.consumed - 1, h.consumed / 2}) {
        const ClientHelloParse prefix = parse_client_hello(in.first(n));
        if (prefix.status != ParseStatus::need_more || prefix.need <= n || prefix.need > h.consumed) __builtin_trap();
      }
      break;
    }
    case ParseStatus::need_more:
      if (p.need <= size) __builtin_trap();
      break;
    case ParseStatus::invalid:
      if (p.reason.empty()) __builtin_trap();
      break;
  }
  return 0;
}
