// SHA-256 from two libraries (issue #16, common/digest.cc), when the CPU has no SHA extensions: libsodium's for the first
// kSha256OpenSslAbove bytes a process hashes, OpenSSL's after. Both must give OpenSSL's
// digest at every size — around SHA-256's 64-byte blocks and its 56-byte padding edge, and
// around the switch, in one piece or in odd chunks — and a process that hashes little must
// not load libcrypto.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/libcrypto.h"
#include "common/sha256_hw.h"

namespace soyaos {
namespace {

std::string openssl_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXPECT_EQ(EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr), 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761U + 1;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return s;
}

std::vector<size_t> sizes() {
  std::vector<size_t> v = {0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096, 65535, 65536};
  for (size_t n : {kSha256OpenSslAbove - 64, kSha256OpenSslAbove - 1, kSha256OpenSslAbove, kSha256OpenSslAbove + 1,
                   kSha256OpenSslAbove + 64, 2 * kSha256OpenSslAbove + 17}) {
    v.push_back(n);
  }
  return v;
}

// libsodium's function itself, at every size, against OpenSSL's.
TEST(DigestLibs, LibsodiumSha256IsOpenSslsAtEverySize) {
  ASSERT_GE(sodium_init(), 0);
  for (size_t n : sizes()) {
    const std::string data = bytes(n, static_cast<uint32_t>(n));
    unsigned char md[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(md, reinterpret_cast<const unsigned char*>(data.data()), data.size());
    std::string hex;
    for (unsigned char b : md) {
      static constexpr char kHex[] = "0123456789abcdef";
      hex += kHex[b >> 4];
      hex += kHex[b & 15];
    }
    EXPECT_EQ(hex, openssl_hex(data)) << n;
  }
}

// The hasher, across the switch: the first bytes of this process go to libsodium (counted),
// libcrypto is loaded only once more than kSha256OpenSslAbove would have been hashed by
// libsodium, and every digest, in one piece or in chunks that straddle blocks and the switch,
// is OpenSSL's.
TEST(DigestLibs, TheHasherSwitchesToOpenSslPastTheThresholdWithTheSameDigests) {
  // The library paths, also on a CPU with SHA extensions (sha256_hw_test.cc); on again after.
  set_sha256_hw_enabled(false);
  struct HwBackOn {
    ~HwBackOn() { set_sha256_hw_enabled(true); }
  } hw_back_on;
  if (libcrypto_loaded() || sha256_libsodium_bytes() != 0) {
    GTEST_SKIP() << "needs a process of its own (ctest runs each test in one): this one hashed already";
  }
  // (OpenSSL's digests are taken afterwards: EVP_sha256 is one of the functions soyaos forwards,
  // common/libcrypto_lazy.cc, and would load libcrypto itself.)
  const std::string small = bytes(1000, 7);
  const std::string small_digest = sha256_hex(small);
  EXPECT_EQ(sha256_libsodium_bytes(), 1000u);
  EXPECT_FALSE(libcrypto_loaded()) << "1000 bytes loaded libcrypto";

  // Under what is left before the switch: still libsodium, in chunks of 1000.
  const std::string under = bytes(kSha256OpenSslAbove - 6000, 8);
  Sha256 h;
  for (size_t at = 0; at < under.size(); at += 1000) h.update(std::string_view(under).substr(at, 1000));
  const std::string under_digest = h.hex();
  EXPECT_EQ(sha256_libsodium_bytes(), uint64_t{kSha256OpenSslAbove - 5000});
  EXPECT_FALSE(libcrypto_loaded());

  // A hasher that crosses the switch in the middle of its input (odd chunks: 1, 63, 187,
  // ...) loads libcrypto and hands OpenSSL what it held; libsodium hashes nothing more.
  const std::string across = bytes(20000, 9);
  Sha256 chunked;
  for (size_t at = 0, step = 1; at < across.size(); step = step * 2 + 61) {
    const size_t take = std::min(step, across.size() - at);
    chunked.update(std::string_view(across).substr(at, take));
    at += take;
  }
  const std::string across_digest = chunked.hex();
  EXPECT_TRUE(libcrypto_loaded());
  EXPECT_EQ(sha256_libsodium_bytes(), uint64_t{kSha256OpenSslAbove - 5000});

  EXPECT_EQ(small_digest, openssl_hex(small));
  EXPECT_EQ(under_digest, openssl_hex(under));
  EXPECT_EQ(across_digest, openssl_hex(across));

  // OpenSSL's path from now on, at every size, in one piece or in odd chunks.
  for (size_t n : sizes()) {
    const std::string data = bytes(n, static_cast<uint32_t>(n) + 1);
    Sha256 odd;
    for (size_t at = 0, step = 1; at < data.size(); step = step * 2 + 61) {
      const size_t take = std::min(step, data.size() - at);
      odd.update(std::string_view(data).substr(at, take));
      at += take;
    }
    EXPECT_EQ(odd.hex(), openssl_hex(data)) << n;
    EXPECT_EQ(sha256_hex(data), openssl_hex(data)) << n;
  }
  EXPECT_EQ(sha256_libsodium_bytes(), uint64_t{kSha256OpenSslAbove - 5000}) << "libsodium went on past the switch";
}

}  // namespace
}  // namespace soyaos
