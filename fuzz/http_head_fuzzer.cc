// libFuzzer target for the egress gateway's HTTP request head parser (STYLE.md: fuzz
// every parser). parse_http_head promises: never crash, look at no more than 16 KiB.
// Invariants checked (violations trap): a complete head is no longer than the input or
// 16 KiB, ends with CRLF CRLF, has a Host field (unless its target names the host) and at most 100 fields, parses the same on
// exactly its own bytes, and its strict prefixes are need_more; need_more asks for more
// than was given; invalid says why.
#include <cstddef>
#include <cstdint>
#include <span>

#include "network/http_head.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soyaos::network;
  const std::span<const uint8_t> in(data, size);
  const HttpHeadParse p = parse_http_head(in);
  switch (p.status) {
    case ParseStatus::complete: {
      const HttpHead& h = p.head;
      if (h.head_size > size || h.head_size > kHttpMaxHead || h.head_size < 4) __builtin_trap();
      if (data[h.head_size - 4] != '\r' || data[h.head_size - 3] != '\n' || data[h.head_size - 2] != '\r' ||
          data[h.head_size - 1] != '\n') {
        __builtin_trap();
      }
      // A Host field is required except for authority- and absolute-form targets, which
      // name their host themselves (C7: `CONNECT host:port HTTP/1.0` without Host).
      if (h.has_host == h.host.empty() || h.fields.size() > kHttpMaxFields) __builtin_trap();
      if (h.has_host && h.fields.empty()) __builtin_trap();
      if (!h.has_host && h.target_form != TargetForm::authority && h.target_form != TargetForm::absolute) {
        __builtin_trap();
      }
      if (h.method.empty() || h.target.empty()) __builtin_trap();
      if (h.minor_version != 0 && h.minor_version != 1) __builtin_trap();
      if (h.port && *h.port == 0) __builtin_trap();
      for (char c : h.host) {
        if (c >= 'A' && c <= 'Z') __builtin_trap();
      }
      const HttpHeadParse again = parse_http_head(in.first(h.head_size));
      if (again.status != ParseStatus::complete || again.head.host != h.host || again.head.port != h.port ||
          again.head.head_size != h.head_size || again.head.target != h.target) {
        __builtin_trap();
      }
      for (const size_t n : {h.head_size - 1, h.head_size / 2}) {
        const HttpHeadParse prefix = parse_http_head(in.first(n));
        if (prefix.status != ParseStatus::need_more || prefix.need <= n || prefix.need > h.head_size) __builtin_trap();
      }
      break;
    }
    case ParseStatus::need_more:
      if (p.need <= size || size >= kHttpMaxHead) __builtin_trap();
      break;
    case ParseStatus::invalid:
      if (p.reason.empty()) __builtin_trap();
      break;
  }
  return 0;
}
