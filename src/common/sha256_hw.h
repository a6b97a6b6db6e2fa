// SHA-256 with the CPU's SHA extensions (x86 SHA-NI), for common/digest.cc (issue #16).
// A cache hit verifies every blob it replays by hashing it; libsodium's SHA-256 is portable C
// (~55 instructions a byte: 0.3 ms for a 64 KiB output file) and OpenSSL's costs loading
// libcrypto (~1.3 ms). The SHA extensions compute the same function ~6x faster than
// libsodium, with no library. Used only when CPUID says the CPU has them; the digests are
// checked against libsodium's and OpenSSL's at every size (tests/unit/sha256_hw_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace soyaos {

// Whether this CPU has the SHA extensions (and the SSSE3/SSE4.1 the code also uses), and
// they are not switched off by set_sha256_hw_enabled(false).
bool sha256_hw_enabled();

// Tests only: switch the hardware path off (or back on when the CPU has it), so that the
// library paths of common/digest.cc are tested on a CPU that has the extensions.
void set_sha256_hw_enabled(bool on);

// Incremental SHA-256 with the SHA extensions. Only when sha256_hw_enabled().
class Sha256Hw {
 public:
  Sha256Hw();
  void update(const void* data, size_t size);
  // The 32-byte digest; the object is finished afterwards.
  void final(unsigned char out[32]);

 private:
  uint32_t state_[8];
  unsigned char buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

}  // namespace soyaos
