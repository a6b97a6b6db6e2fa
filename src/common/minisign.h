// Minisign-compatible Ed25519 signatures (SPEC.md C12; the format of
// https://jedisct1.github.io/minisign/), built on OpenSSL: keys written by `minisign -G`
// (scrypt-encrypted) and `minisign -G -W` (unencrypted) sign, and `minisign -V` verifies
// what we sign; we verify what `minisign -S` signs, prehashed ("ED", BLAKE2b-512 of the
// message, the default since minisign 0.8) and legacy ("Ed", the message itself).
//
// The files, each line ending in "\n":
//   public key   "untrusted comment: …" + base64("Ed" ‖ key id (8) ‖ Ed25519 public key (32))
//   secret key   "untrusted comment: …" + base64("Ed" ‖ kdf ("Sc" scrypt, or two zero bytes:
//                unencrypted) ‖ "B2" ‖ salt (32) ‖ opslimit (8, LE) ‖ memlimit (8, LE) ‖
//                [key id (8) ‖ Ed25519 secret key (64: seed ‖ public key) ‖ checksum (32)]),
//                the bracketed 104 bytes XORed with scrypt(password, salt) when encrypted;
//                checksum = BLAKE2b-256("Ed" ‖ key id ‖ secret key)
//   signature    "untrusted comment: …" + base64("ED"|"Ed" ‖ key id (8) ‖ signature (64))
//                + "trusted comment: TEXT" + base64(global signature (64))
//                global signature = Ed25519(signature ‖ TEXT): the trusted comment is signed.
// Library code: errors are values, nothing is printed; parsers take untrusted bytes (a
// fuzzer, fuzz/minisign_fuzzer.cc, covers them) and bound every length.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace soyaos::minisign {

inline constexpr size_t kKeyIdBytes = 8;
inline constexpr size_t kPublicKeyBytes = 32;
inline constexpr size_t kSeedBytes = 32;
inline constexpr size_t kSignatureBytes = 64;
// minisign's bounds: an untrusted comment of at most 1,024 bytes, a trusted one of 8,192.
inline constexpr size_t kMaxCommentBytes = 1024;
inline constexpr size_t kMaxTrustedCommentBytes = 8192;
// An encrypted key whose scrypt parameters need more memory than this is refused (minisign
// -G writes 1 GiB keys): bad input must not exhaust the host.
inline constexpr uint64_t kMaxScryptBytes = uint64_t{2} << 30;

using KeyId = std::array<uint8_t, kKeyIdBytes>;

// The key id as minisign prints it: the 8 bytes as a little-endian number, 16 upper-case
// hex digits ("untrusted comment: minisign public key 1B2C…").
std::string key_id_hex(const KeyId& id);

struct PublicKey {
  KeyId key_id{};
  std::array<uint8_t, kPublicKeyBytes> key{};
};

// A decrypted secret key. The seed is wiped when the object dies.
struct SecretKey {
  KeyId key_id{};
  std::array<uint8_t, kSeedBytes> seed{};
  std::array<uint8_t, kPublicKeyBytes> public_key{};
  SecretKey() = default;
  SecretKey(const SecretKey&) = default;
  SecretKey& operator=(const SecretKey&) = default;
  ~SecretKey();
  [[nodiscard]] PublicKey public_part() const { return {key_id, public_key}; }
};

// A secret key file as stored: parsing needs no password; decrypt() does.
struct SecretKeyFile {
  bool encrypted = false;                   // kdf "Sc"
  std::array<uint8_t, 32> salt{};
  uint64_t opslimit = 0;
  uint64_t memlimit = 0;
  std::array<uint8_t, 104> keynum_sk{};     // key id ‖ secret key ‖ checksum (XORed when encrypted)
  // keynum_sk is the secret key itself when the file is not encrypted: wiped when it dies.
  SecretKeyFile() = default;
  SecretKeyFile(const SecretKeyFile&) = default;
  SecretKeyFile& operator=(const SecretKeyFile&) = default;
  ~SecretKeyFile();
};

enum class Algorithm { prehashed, legacy };  // "ED" (BLAKE2b-512 of the message), "Ed"

struct Signature {
  Algorithm algorithm = Algorithm::prehashed;
  KeyId key_id{};
  std::array<uint8_t, kSignatureBytes> signature{};
  std::string untrusted_comment;            // without "untrusted comment: "
  std::string trusted_comment;              // without "trusted comment: "
  std::array<uint8_t, kSignatureBytes> global_signature{};
};

// ---- parsing (untrusted input) ----
// A public key file, or its base64 line alone (as `minisign -P KEY` takes it).
Result<PublicKey> parse_public_key(std::string_view text);
Result<SecretKeyFile> parse_secret_key(std::string_view text);
Result<Signature> parse_signature(std::string_view text);

// The scrypt parameters (log2 N, r, p) libsodium derives from minisign's opslimit and
// memlimit (crypto_pwhash_scryptsalsa208sha256's pickparams), and the bytes they need.
struct ScryptParams {
  uint32_t n_log2 = 0;
  uint32_t r = 0;
  uint32_t p = 0;
  [[nodiscard]] uint64_t memory_bytes() const;
};
ScryptParams scrypt_params(uint64_t opslimit, uint64_t memlimit);

// Decrypts (when encrypted; `password` is ignored otherwise) and checks the checksum: a
// wrong password is the error "wrong password (the key's checksum does not match)".
Result<SecretKey> decrypt(const SecretKeyFile& file, std::string_view password);

// ---- writing ----
// A new random key pair (RAND_bytes).
Result<SecretKey> generate();
std::string format_public_key(const PublicKey& key);
// The secret key file; encrypted with scrypt(opslimit, memlimit) when `password` is not
// empty (minisign -G uses 33554432 and 1073741824), else unencrypted like `minisign -W`.
Result<std::string> format_secret_key(const SecretKey& key, std::string_view password, uint64_t opslimit,
                                      uint64_t memlimit);

// A prehashed ("ED") signature of `message` as a .minisig file's text. `trusted_comment`
// must be one line of at most kMaxTrustedCommentBytes, `untrusted_comment` one of at most
// kMaxCommentBytes.
Result<std::string> sign(const SecretKey& key, std::string_view message, std::string_view trusted_comment,
                         std::string_view untrusted_comment);

// Checks that `sig` was made by `key` over `message`: the key ids match, the signature
// (prehashed or legacy) and the global signature over the trusted comment verify. The
// error says which check failed.
Status verify(const PublicKey& key, const Signature& sig, std::string_view message);

// ---- building blocks, exposed for tests ----
// BLAKE2b (RFC 7693) with an output of 1..64 bytes, unkeyed.
std::string blake2b(std::string_view data, size_t out_bytes);

}  // namespace soyaos::minisign
