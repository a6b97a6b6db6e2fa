// libFuzzer target for host name canonicalisation (src/network/host_name.h), the gate every
// name passes before a policy check. Invariants (violations trap): an accepted name is
// already canonical (canonicalising it again gives itself), holds only [a-z0-9.-], no
// empty label, at most 253 bytes; its A-labels decode and encode back to themselves.
// Punycode decode/encode of arbitrary input never crash, and decode∘encode is the identity.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "network/host_name.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soyaos::network;
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  const auto r = canonical_host_name(raw);
  if (r.ok()) {
    const std::string& name = r.value();
    if (name.empty() || name.size() > kHostMaxName || name.front() == '.' || name.back() == '.') __builtin_trap();
    if (name.find("..") != std::string::npos) __builtin_trap();
    for (char c : name) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) __builtin_trap();
    }
    const auto again = canonical_host_name(name);
    if (!again.ok() || again.value() != name) __builtin_trap();
  } else if (r.error().message.empty()) {
    __builtin_trap();
  }
  if (auto decoded = punycode_decode(raw)) {
    const auto encoded = punycode_encode(*decoded);
    if (!encoded) __builtin_trap();
    const auto back = punycode_decode(*encoded);
    if (!back || *back != *decoded) __builtin_trap();
  }
  return 0;
}
