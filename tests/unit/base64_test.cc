// The one base64 codec (common/base64.h): RFC 4648's vectors, OpenSSL's encoder as the
// reference for every length, the texts each caller meets (minisign lines, PEM bodies,
// checkpoint signatures, Docker `auth` entries), and refusals that wipe what they decoded.
#include "common/base64.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace soyaos {
namespace {

// The decoding, or "refused: " and the error.
std::string decoded(const Result<std::string>& r) { return r ? r.value() : "refused: " + r.error().message; }

TEST(Base64, Rfc4648Vectors) {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},        {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [bytes, text] : vectors) {
    EXPECT_EQ(base64_encode(bytes), text);
    EXPECT_EQ(decoded(base64_decode(text)), bytes);
    EXPECT_EQ(decoded(base64_decode_lenient(text)), bytes);
  }
}

// Every length up to 3 full quads and past, every byte value: OpenSSL's EVP_EncodeBlock (what
// the Moon's PEM keys and signatures were written with) writes the same text, which decodes back.
TEST(Base64, EncodesAsOpenSslAndRoundTrips) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    std::string want(4 * ((bytes.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(want.data()),
                                  reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
    want.resize(static_cast<size_t>(n));
    const std::string text = base64_encode(bytes);
    ASSERT_EQ(text, want) << i;
    ASSERT_EQ(decoded(base64_decode(text)), bytes) << i;
    ASSERT_EQ(decoded(base64_decode_lenient(text)), bytes) << i;
    bytes += static_cast<char>(i * 37 + 11);
  }
}

TEST(Base64, CanonicalDecodingRefusesEveryOtherText) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"Zm9", "length is not a multiple of 4"},
      {"Zm9vY", "length is not a multiple of 4"},
      {"Zm9v\n", "length is not a multiple of 4"},
      {"Zm 9", "unexpected character at 2"},
      {"Zm9v\nZm9", "unexpected character at 4"},  // no line breaks (a PEM body is one line)
      {"Zm-_", "unexpected character at 2"},       // the URL-safe alphabet is not this one
      {std::string("Zm\0v", 4), "unexpected character at 2"},
      {"Zm9\x80", "unexpected character at 3"},  // libsodium 1.0.18 alone reads it as '/'
      {"Zm\xff\xff", "unexpected character at 2"},
      {"Z=9v", "unexpected character at 1"},  // padding inside
      {"Zg=v", "unexpected character at 3"},
      {"Zg==Zg==", "unexpected character at 2"},  // padding before the end
      {"Z===", "unexpected character at 1"},
      {"====", "unexpected character at 0"},
      {"Zm9v====", "unexpected character at 4"},
      {"Zh==", "non-canonical padding"},  // the bits padding the last byte set
      {"Zm9=", "non-canonical padding"},
      {"Zg=", "length is not a multiple of 4"},
      {"Zm8", "length is not a multiple of 4"},  // padding missing
  };
  for (const auto& [text, why] : refused) {
    auto r = base64_decode(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().message, "not base64 (" + why + ")") << text;
  }
  EXPECT_EQ(decoded(base64_decode("RWQ=")), "Ed");  // minisign's key prefix
}

// Docker's `auth`, as Go's base64.StdEncoding decodes it: padding bits ignored, CR and LF
// skipped, nothing else forgiven.
TEST(Base64, LenientDecodingIsGosStdEncoding) {
  EXPECT_EQ(decoded(base64_decode_lenient("Zh==")), "f");
  EXPECT_EQ(decoded(base64_decode_lenient("Zv==")), "f");
  EXPECT_EQ(decoded(base64_decode_lenient("Zm9=")), "fo");
  EXPECT_EQ(decoded(base64_decode_lenient("Zm/=")), "fo");
  EXPECT_EQ(decoded(base64_decode_lenient("Zm9v\r\nYmFy\n")), "foobar");
  EXPECT_EQ(decoded(base64_decode_lenient("\nZm9vYg=\r\n=")), "foob");
  for (const char* text : {"Zm9", "Zm 9v", " Zm9v", "Zm9v    ", "Zm9v----", "Z=9v", "Zg==Zg==", "Z===", "====",
                           "Zm9v====", "Zm-_", "Zm9v\t"}) {
    auto r = base64_decode_lenient(text);
    EXPECT_FALSE(r) << text << " -> " << decoded(r);
    if (!r) {
      EXPECT_EQ(r.error().message.rfind("not base64 (", 0), 0U) << r.error().message;
    }
  }
}

// What a refused text decoded before the character that stopped it may be a part of a key: the
// whole buffer is zeroed, not only left unreported.
TEST(Base64, ARefusalZeroesTheBuffer) {
  for (const std::string text : {"c2VjcmV0IGtleQ!!", "c2VjcmV0IGtleQ==Zg==", "c2VjcmV0IGtleR==", "c2VjcmV0IGtleQ"}) {
    std::array<unsigned char, 32> buf{};
    buf.fill(0xAA);
    EXPECT_FALSE(base64_decode_into(text, buf)) << text;
    for (const unsigned char b : buf) ASSERT_EQ(b, 0) << text;
  }
  std::array<unsigned char, 9> small{};
  small.fill(0xAA);
  auto r = base64_decode_into("c2VjcmV0IGtleQ==", small);  // 10 bytes
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "not base64 (more than 9 bytes)");
  for (const unsigned char b : small) ASSERT_EQ(b, 0);
  std::array<unsigned char, 10> exact{};
  auto n = base64_decode_into("c2VjcmV0IGtleQ==", exact);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(exact.data()), *n), "secret key");
}

}  // namespace
}  // namespace soyaos
