// common/minisign.h: BLAKE2b against RFC 7693 and OpenSSL, key and signature files
// round-trip, every tampering fails verification, malformed files are clear errors, and
// interop with Debian's `minisign` both ways (scripts/setup.sh installs it).
#include "common/minisign.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/base64.h"
#include "moon_test_util.h"

namespace soyaos::minisign {
namespace {

using soyaos::moon::testing::read_file;
using soyaos::moon::testing::TmpDir;
using soyaos::moon::testing::write_file;

std::string hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out += kHex[static_cast<uint8_t>(c) >> 4];
    out += kHex[static_cast<uint8_t>(c) & 0xF];
  }
  return out;
}

std::string openssl_blake2b512(std::string_view data) {
  std::string out(64, '\0');
  unsigned len = 0;
  EXPECT_EQ(EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()), &len, EVP_blake2b512(),
                       nullptr),
            1);
  return out;
}

// Runs a shell command; its exit status.
int sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());  // NOLINT(cert-env33-c): test helper, fixed commands
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool have_minisign() { return sh("command -v minisign >/dev/null 2>&1") == 0; }

TEST(Minisign, Blake2bMatchesRfc7693AndOpenSsl) {
  // RFC 7693 appendix A: BLAKE2b-512("abc").
  EXPECT_EQ(hex(blake2b("abc", 64)),
            "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
            "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923");
  // Every length across block boundaries, against OpenSSL's BLAKE2b-512.
  std::string data;
  for (size_t n = 0; n < 300; ++n) {
    EXPECT_EQ(blake2b(data, 64), openssl_blake2b512(data)) << n;
    data += static_cast<char>(n * 7 + 1);
  }
  // BLAKE2b-256 is its own function (the output length is hashed in), not a prefix.
  EXPECT_EQ(hex(blake2b("", 32)), "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
}

TEST(Minisign, Base64IsStrict) {
  EXPECT_EQ(base64_encode("Ed"), "RWQ=");
  EXPECT_EQ(base64_decode("RWQ=").value(), "Ed");
  EXPECT_EQ(base64_decode("").value(), "");
  EXPECT_FALSE(base64_decode("RWQ"));      // length
  EXPECT_FALSE(base64_decode("RW=Q"));     // padding inside
  EXPECT_FALSE(base64_decode("RWR="));     // non-canonical: stray bits
  EXPECT_FALSE(base64_decode("RW Q="));    // space
  EXPECT_FALSE(base64_decode("RWQ=RWQ="));  // padding before the end
}

TEST(Minisign, ScryptParametersAreLibsodiums) {
  // minisign -G: opslimit 33554432, memlimit 1073741824 → N = 2^20, r = 8, p = 1 (1 GiB).
  const ScryptParams p = scrypt_params(33554432, 1073741824);
  EXPECT_EQ(p.n_log2, 20u);
  EXPECT_EQ(p.r, 8u);
  EXPECT_EQ(p.p, 1u);
  EXPECT_LE(p.memory_bytes(), kMaxScryptBytes);
  // Small limits: the opslimit branch.
  const ScryptParams q = scrypt_params(32768, 16u << 20);
  EXPECT_EQ(q.n_log2, 10u);
  EXPECT_EQ(q.p, 1u);
}

TEST(Minisign, SignAndVerifyRoundTrip) {
  auto key = generate();
  ASSERT_TRUE(key) << key.error().describe();
  auto text = sign(*key, "the manifest", "digest:sha256:00", "signature from soyaos");
  ASSERT_TRUE(text) << text.error().describe();
  auto sig = parse_signature(*text);
  ASSERT_TRUE(sig) << sig.error().describe();
  EXPECT_EQ(sig->algorithm, Algorithm::prehashed);
  EXPECT_EQ(sig->trusted_comment, "digest:sha256:00");
  auto pub = parse_public_key(format_public_key(key->public_part()));
  ASSERT_TRUE(pub) << pub.error().describe();
  EXPECT_TRUE(verify(*pub, *sig, "the manifest"));

  // Another message, another key, an altered trusted comment, an altered signature.
  auto v = verify(*pub, *sig, "the manifest!");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("signature verification failed"), std::string::npos);
  auto other = generate();
  ASSERT_TRUE(other);
  v = verify(other->public_part(), *sig, "the manifest");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("signature made by key " + key_id_hex(key->key_id)), std::string::npos);
  PublicKey same_id = other->public_part();
  same_id.key_id = key->key_id;  // a key claiming the signer's id
  EXPECT_FALSE(verify(same_id, *sig, "the manifest"));
  Signature altered = *sig;
  altered.trusted_comment = "digest:sha256:01";
  v = verify(*pub, altered, "the manifest");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("trusted comment"), std::string::npos);
  altered = *sig;
  altered.signature[5] ^= 1;
  EXPECT_FALSE(verify(*pub, altered, "the manifest"));

  // Comments that would break the file's lines are refused.
  EXPECT_FALSE(sign(*key, "m", "two\nlines", "u"));
  EXPECT_FALSE(sign(*key, "m", "t", "two\nlines"));
  EXPECT_FALSE(sign(*key, "m", std::string(kMaxTrustedCommentBytes + 1, 'x'), "u"));
}

// Ed25519 is libsodium's (issue #16: verifying a pack's signature loads no libcrypto):
// deterministic, so the public key derived from a seed and both signatures of a minisign
// file must be exactly OpenSSL's for the same seed.
TEST(Minisign, Ed25519IsOpenSslsForTheSameSeed) {
  auto key = generate();
  ASSERT_TRUE(key) << key.error().describe();
  EVP_PKEY* pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, key->seed.data(), key->seed.size());
  ASSERT_NE(pkey, nullptr);
  std::array<uint8_t, kPublicKeyBytes> pk{};
  size_t pk_len = pk.size();
  ASSERT_EQ(EVP_PKEY_get_raw_public_key(pkey, pk.data(), &pk_len), 1);
  EXPECT_EQ(pk, key->public_key);
  auto openssl_sign = [&](std::string_view m) {
    std::string sig(kSignatureBytes, '\0');
    size_t len = sig.size();
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EXPECT_EQ(EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, pkey), 1);
    EXPECT_EQ(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                             reinterpret_cast<const unsigned char*>(m.data()), m.size()),
              1);
    EVP_MD_CTX_free(ctx);
    return sig;
  };
  for (const std::string& message : {std::string(), std::string("the manifest"), std::string(100000, 'm')}) {
    auto text = sign(*key, message, "digest:sha256:00", "u");
    ASSERT_TRUE(text) << text.error().describe();
    auto sig = parse_signature(*text);
    ASSERT_TRUE(sig) << sig.error().describe();
    const std::string s(reinterpret_cast<const char*>(sig->signature.data()), sig->signature.size());
    EXPECT_EQ(s, openssl_sign(openssl_blake2b512(message)));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(sig->global_signature.data()), sig->global_signature.size()),
              openssl_sign(s + sig->trusted_comment));
    EXPECT_TRUE(verify(key->public_part(), *sig, message));
  }
  EVP_PKEY_free(pkey);
}

TEST(Minisign, SecretKeysRoundTripEncryptedAndNot) {
  auto key = generate();
  ASSERT_TRUE(key);
  auto plain = format_secret_key(*key, "", 0, 0);
  ASSERT_TRUE(plain) << plain.error().describe();
  auto f = parse_secret_key(*plain);
  ASSERT_TRUE(f) << f.error().describe();
  EXPECT_FALSE(f->encrypted);
  auto back = decrypt(*f, "ignored");
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->seed, key->seed);
  EXPECT_EQ(back->key_id, key->key_id);

  // Cheap scrypt parameters keep the test fast; minisign reads them from the file.
  auto enc = format_secret_key(*key, "correct horse", 32768, 16u << 20);
  ASSERT_TRUE(enc) << enc.error().describe();
  f = parse_secret_key(*enc);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->encrypted);
  back = decrypt(*f, "correct horse");
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->seed, key->seed);
  auto wrong = decrypt(*f, "battery staple");
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("wrong password"), std::string::npos);

  // Parameters that would need more memory than allowed are refused before scrypt runs.
  f->memlimit = uint64_t{64} << 30;
  f->opslimit = uint64_t{1} << 40;
  auto huge = decrypt(*f, "correct horse");
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("MiB of memory"), std::string::npos);
}

TEST(Minisign, MalformedFilesAreClearErrors) {
  auto key = generate();
  ASSERT_TRUE(key);
  const std::string pub = format_public_key(key->public_part());
  const std::string line = pub.substr(pub.find('\n') + 1);
  EXPECT_TRUE(parse_public_key(line));  // the base64 line alone, as minisign -P takes it
  EXPECT_FALSE(parse_public_key(""));
  EXPECT_FALSE(parse_public_key("comment\n" + line));                              // no prefix
  EXPECT_FALSE(parse_public_key("untrusted comment: x\nRWQ=\n"));                  // too short
  EXPECT_FALSE(parse_public_key("untrusted comment: x\n" + line + line));          // joined lines
  EXPECT_FALSE(parse_public_key(std::string(100000, 'A')));                        // oversized
  std::string other_alg = base64_decode(line.substr(0, line.size() - 1)).value();
  other_alg[1] = 'X';
  auto e = parse_public_key(base64_encode(other_alg));
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("algorithm"), std::string::npos);

  auto text = sign(*key, "m", "t", "u");
  ASSERT_TRUE(text);
  EXPECT_FALSE(parse_signature(text->substr(0, text->rfind("trusted comment"))));
  std::string no_prefix = *text;
  no_prefix.replace(no_prefix.find("trusted comment: t"), 18, "trusted: t");
  EXPECT_FALSE(parse_signature(no_prefix));
  EXPECT_FALSE(parse_secret_key(pub));  // a public key is not a secret key
  EXPECT_FALSE(parse_secret_key("untrusted comment: x\n"));
}

// ---- interop with Debian's minisign 0.11 ----

class MinisignInterop : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(have_minisign()) << "minisign is not installed (scripts/setup.sh installs it)";
    dir_ = tmp_.path().string();
  }
  std::string path(const char* name) const { return dir_ + "/" + name; }
  TmpDir tmp_;
  std::string dir_;
};

TEST_F(MinisignInterop, MinisignVerifiesWhatWeSignWithItsUnencryptedKey) {
  ASSERT_EQ(sh("minisign -G -W -p " + path("k.pub") + " -s " + path("k.key") + " >/dev/null"), 0);
  auto f = parse_secret_key(read_file(path("k.key")));
  ASSERT_TRUE(f) << f.error().describe();
  EXPECT_FALSE(f->encrypted);
  auto key = decrypt(*f, "");
  ASSERT_TRUE(key) << key.error().describe();
  auto pub = parse_public_key(read_file(path("k.pub")));
  ASSERT_TRUE(pub) << pub.error().describe();
  EXPECT_EQ(pub->key, key->public_key);
  EXPECT_EQ(pub->key_id, key->key_id);
  // minisign writes the key id in its comment as %PRIX64, without leading zeros (a key id
  // whose top nibble is 0, one key in 16, has 15 digits there).
  std::string id = key_id_hex(key->key_id);
  id.erase(0, std::min(id.find_first_not_of('0'), id.size() - 1));
  EXPECT_NE(read_file(path("k.pub")).find("minisign public key " + id + "\n"), std::string::npos) << id;

  const std::string message = "{\"schemaVersion\":2}\n";
  write_file(path("m.json"), message);
  auto sig = sign(*key, message, "soyaos pack demo@1.0.0\tdigest:sha256:ab", "signature from soyaos");
  ASSERT_TRUE(sig) << sig.error().describe();
  write_file(path("m.json.minisig"), *sig);
  EXPECT_EQ(sh("minisign -V -q -p " + path("k.pub") + " -m " + path("m.json")), 0);
  // Prehashed, as minisign -H requires.
  EXPECT_EQ(sh("minisign -V -H -q -p " + path("k.pub") + " -m " + path("m.json")), 0);
  // minisign refuses it for other content.
  write_file(path("m.json"), message + " ");
  EXPECT_NE(sh("minisign -V -q -p " + path("k.pub") + " -m " + path("m.json") + " 2>/dev/null"), 0);
}

TEST_F(MinisignInterop, WeVerifyWhatMinisignSignsPrehashedAndLegacy) {
  ASSERT_EQ(sh("minisign -G -W -p " + path("k.pub") + " -s " + path("k.key") + " >/dev/null"), 0);
  write_file(path("m"), "pack manifest bytes");
  ASSERT_EQ(sh("minisign -S -s " + path("k.key") + " -m " + path("m") + " -t 'a trusted comment' >/dev/null"), 0);
  ASSERT_EQ(sh("minisign -S -l -s " + path("k.key") + " -m " + path("m") + " -x " + path("legacy.sig") + " >/dev/null"),
            0);
  auto pub = parse_public_key(read_file(path("k.pub")));
  ASSERT_TRUE(pub);
  auto sig = parse_signature(read_file(path("m.minisig")));
  ASSERT_TRUE(sig) << sig.error().describe();
  EXPECT_EQ(sig->algorithm, Algorithm::prehashed);
  EXPECT_EQ(sig->trusted_comment, "a trusted comment");
  EXPECT_TRUE(verify(*pub, *sig, "pack manifest bytes"));
  EXPECT_FALSE(verify(*pub, *sig, "pack manifest bytez"));
  auto legacy = parse_signature(read_file(path("legacy.sig")));
  ASSERT_TRUE(legacy) << legacy.error().describe();
  EXPECT_EQ(legacy->algorithm, Algorithm::legacy);
  EXPECT_TRUE(verify(*pub, *legacy, "pack manifest bytes"));
  EXPECT_FALSE(verify(*pub, *legacy, "pack manifest bytez"));
}

TEST_F(MinisignInterop, MinisignSignsWithTheEncryptedKeysWeWrite) {
  // minisign -G encrypts with 1 GiB scrypt parameters (tens of seconds on a loaded
  // machine); the file carries its parameters, so a key we encrypt with cheap ones proves
  // the same derivation (libsodium's scrypt and pickparams) in seconds.
  auto key = generate();
  ASSERT_TRUE(key);
  auto enc = format_secret_key(*key, "s3cret", 32768, 16u << 20);
  ASSERT_TRUE(enc);
  write_file(path("k.key"), *enc);
  write_file(path("k.pub"), format_public_key(key->public_part()));
  write_file(path("m"), "payload");
  ASSERT_EQ(sh("printf 's3cret\\n' | minisign -S -s " + path("k.key") + " -m " + path("m") + " >/dev/null 2>&1"), 0);
  EXPECT_EQ(sh("minisign -V -q -p " + path("k.pub") + " -m " + path("m")), 0);
  auto sig = parse_signature(read_file(path("m.minisig")));
  ASSERT_TRUE(sig);
  EXPECT_TRUE(verify(key->public_part(), *sig, "payload"));
  // A wrong password is refused by minisign too: the checksum we wrote is checked.
  EXPECT_NE(sh("printf 'nope\\n' | minisign -S -s " + path("k.key") + " -m " + path("m") + " -x " + path("x.sig") +
               " >/dev/null 2>&1"),
            0);
}

}  // namespace
}  // namespace soyaos::minisign
