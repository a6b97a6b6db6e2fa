// SHA-256 (common/digest.h, Nettle's; issue #16): the same digest as OpenSSL's and libsodium's
// at every size — every length up to five blocks, around the 56-byte padding edge, large
// inputs — in one piece and in odd chunks that straddle blocks; the known answers of FIPS
// 180-2; and hashing, however much, never loads libcrypto.
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <sodium.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/libcrypto.h"

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

// OpenSSL's one-shot SHA256() (not forwarded by common/libcrypto_lazy.cc: the test program
// links libcrypto for it, so the hasher under test cannot be reaching OpenSSL).
std::string openssl_hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
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

std::string chunked_hex(std::string_view data) {
  Sha256 h;
  for (size_t at = 0, step = 1; at < data.size(); step = step * 2 + 61) {
    const size_t take = std::min(step % 4099, data.size() - at);
    h.update(data.substr(at, take));
    at += take;
  }
  return h.hex();
}

TEST(Sha256, TheKnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(chunked_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256 h;
  EXPECT_EQ(h.digest(), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, IsOpenSslsAndLibsodiumsAtEverySizeWholeAndInChunks) {
  ASSERT_GE(sodium_init(), 0);
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 320; ++n) sizes.push_back(n);
  for (size_t n : {1000, 4095, 4096, 4097, 65535, 65536, 65537, 262143, 262144, 262145, 1 << 20, (1 << 20) + 55}) {
    sizes.push_back(n);
  }
  for (size_t n : sizes) {
    const std::string data = bytes(n, static_cast<uint32_t>(n));
    const std::string want = openssl_hex(data);
    EXPECT_EQ(sha256_hex(data), want) << n;
    EXPECT_EQ(chunked_hex(data), want) << n;
    EXPECT_EQ(sodium_hex(data), want) << n;
  }
}

// A cache hit, `version` and a run that does not intercept TLS must not load libcrypto
// (CacheTest.ARunAHitAndVersionNeverLoadLibcrypto); hashing at any size is one of them.
TEST(Sha256, HashingAnySizeNeverLoadsLibcrypto) {
  if (libcrypto_loaded()) GTEST_SKIP() << "needs a process of its own (ctest runs each test in one)";
  const std::string big = bytes(3 << 20, 5);
  Sha256 h;
  for (size_t at = 0; at < big.size(); at += 100000) h.update(std::string_view(big).substr(at, 100000));
  const std::string got = h.hex();
  EXPECT_FALSE(libcrypto_loaded());
  EXPECT_EQ(got, openssl_hex(big));
}

}  // namespace
}  // namespace soyaos
