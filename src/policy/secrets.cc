#include "policy/secrets.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>

namespace soyaos::policy {

Result<std::string> new_placeholder() {
  std::array<uint8_t, kPlaceholderHexChars / 2> bytes{};
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("getrandom for a secret placeholder");
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = kPlaceholderPrefix;
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

}  // namespace soyaos::policy
