// SHA-256 with the CPU's SHA extensions (common/sha256_hw.h, issue #16): the same digest as
// libsodium's at every size — every length up to four blocks, around the 56-byte padding edge,
// large inputs — in one piece and in odd chunks that straddle blocks; the hasher of
// common/digest.cc uses it and then never loads libcrypto, however much it hashes.
#include <gtest/gtest.h>
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

std::string hex(const unsigned char* md) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 32; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string sodium_hex(std::string_view data) {
  unsigned char md[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(md, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return hex(md);
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
  std::vector<size_t> v;
  for (size_t n = 0; n <= 260; ++n) v.push_back(n);
  for (size_t n : {1000, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, (1 << 20) + 55}) v.push_back(n);
  return v;
}

std::string hw_hex(std::string_view data, bool chunked) {
  Sha256Hw h;
  if (!chunked) {
    h.update(data.data(), data.size());
  } else {
    for (size_t at = 0, step = 1; at < data.size(); step = step * 2 + 61) {
      const size_t take = std::min(step % 4099, data.size() - at);
      h.update(data.data() + at, take);
      at += take;
    }
  }
  unsigned char md[32];
  h.final(md);
  return hex(md);
}

TEST(Sha256Hw, TheKnownAnswers) {
  if (!sha256_hw_enabled()) GTEST_SKIP() << "this CPU has no SHA extensions";
  EXPECT_EQ(hw_hex("", false), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hw_hex("abc", false), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hw_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", false),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hw_hex(std::string(1000000, 'a'), true),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Hw, IsLibsodiumsAtEverySizeWholeAndInChunks) {
  if (!sha256_hw_enabled()) GTEST_SKIP() << "this CPU has no SHA extensions";
  ASSERT_GE(sodium_init(), 0);
  for (size_t n : sizes()) {
    const std::string data = bytes(n, static_cast<uint32_t>(n) + 3);
    const std::string want = sodium_hex(data);
    EXPECT_EQ(hw_hex(data, false), want) << n;
    EXPECT_EQ(hw_hex(data, true), want) << n;
  }
}

// The process's hasher takes the hardware path: the same digests, no library loaded for
// however many bytes (libsodium's path would have switched to libcrypto past
// kSha256OpenSslAbove).
TEST(Sha256Hw, TheHasherUsesItAndNeverLoadsLibcrypto) {
  if (!sha256_hw_enabled()) GTEST_SKIP() << "this CPU has no SHA extensions";
  if (libcrypto_loaded()) GTEST_SKIP() << "needs a process of its own (ctest runs each test in one)";
  const uint64_t sodium_before = sha256_libsodium_bytes();
  const std::string big = bytes(3 * kSha256OpenSslAbove + 5, 11);
  Sha256 h;
  for (size_t at = 0; at < big.size(); at += 1000) h.update(std::string_view(big).substr(at, 1000));
  EXPECT_EQ(h.hex(), sodium_hex(big));
  EXPECT_EQ(sha256_hex(big), sodium_hex(big));
  EXPECT_FALSE(libcrypto_loaded());
  EXPECT_EQ(sha256_libsodium_bytes(), sodium_before);
}

}  // namespace
}  // namespace soyaos
