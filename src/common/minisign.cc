// Minisign-compatible signatures: Ed25519 with libsodium, scrypt with OpenSSL (minisign.h). BLAKE2b is implemented here
// (RFC 7693): minisign's key checksum is BLAKE2b-256, an output length OpenSSL 3.0's
// BLAKE2B-512 digest cannot produce (a shorter BLAKE2b is not a truncated longer one).
#include "common/minisign.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "common/base64.h"
#include "common/libcrypto.h"
#include "common/wipe.h"

namespace soyaos::minisign {
namespace {

constexpr std::string_view kUntrustedPrefix = "untrusted comment: ";
constexpr std::string_view kTrustedPrefix = "trusted comment: ";
// No minisign file comes near this; a bound before anything is split or decoded.
constexpr size_t kMaxFileBytes = size_t{64} * 1024;
constexpr size_t kSecretKeyFileBytes = 2 + 2 + 2 + 32 + 8 + 8 + 104;

// ---- BLAKE2b (RFC 7693, section 3 and appendix C) ----
constexpr std::array<uint64_t, 8> kIv = {0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL,
                                         0xA54FF53A5F1D36F1ULL, 0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL,
                                         0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL};
constexpr std::array<std::array<uint8_t, 16>, 12> kSigma = {{
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
}};

uint64_t rotr64(uint64_t x, unsigned n) { return (x >> n) | (x << (64 - n)); }

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

class Blake2b {
 public:
  explicit Blake2b(size_t out_bytes) : out_(out_bytes) {
    h_ = kIv;
    h_[0] ^= 0x01010000ULL ^ static_cast<uint64_t>(out_bytes);
  }
  void update(std::string_view data) {
    for (char ch : data) {
      if (fill_ == buf_.size()) {
        count(fill_);
        compress(false);
        fill_ = 0;
      }
      buf_[fill_++] = static_cast<uint8_t>(ch);
    }
  }
  std::string finish() {
    count(fill_);
    std::fill(buf_.begin() + static_cast<std::ptrdiff_t>(fill_), buf_.end(), 0);
    compress(true);
    std::string out(out_, '\0');
    for (size_t i = 0; i < out_; ++i) out[i] = static_cast<char>(h_[i / 8] >> (8 * (i % 8)));
    return out;
  }

 private:
  void count(size_t n) {
    t_[0] += n;
    if (t_[0] < n) ++t_[1];
  }
  void compress(bool last) {
    std::array<uint64_t, 16> v{};
    std::array<uint64_t, 16> m{};
    for (size_t i = 0; i < 8; ++i) {
      v[i] = h_[i];
      v[i + 8] = kIv[i];
    }
    v[12] ^= t_[0];
    v[13] ^= t_[1];
    if (last) v[14] = ~v[14];
    for (size_t i = 0; i < 16; ++i) m[i] = load_le64(buf_.data() + 8 * i);
    auto g = [&v](size_t a, size_t b, size_t c, size_t d, uint64_t x, uint64_t y) {
      v[a] = v[a] + v[b] + x;
      v[d] = rotr64(v[d] ^ v[a], 32);
      v[c] = v[c] + v[d];
      v[b] = rotr64(v[b] ^ v[c], 24);
      v[a] = v[a] + v[b] + y;
      v[d] = rotr64(v[d] ^ v[a], 16);
      v[c] = v[c] + v[d];
      v[b] = rotr64(v[b] ^ v[c], 63);
    };
    for (const auto& s : kSigma) {
      g(0, 4, 8, 12, m[s[0]], m[s[1]]);
      g(1, 5, 9, 13, m[s[2]], m[s[3]]);
      g(2, 6, 10, 14, m[s[4]], m[s[5]]);
      g(3, 7, 11, 15, m[s[6]], m[s[7]]);
      g(0, 5, 10, 15, m[s[8]], m[s[9]]);
      g(1, 6, 11, 12, m[s[10]], m[s[11]]);
      g(2, 7, 8, 13, m[s[12]], m[s[13]]);
      g(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (size_t i = 0; i < 8; ++i) h_[i] ^= v[i] ^ v[i + 8];
  }
  std::array<uint64_t, 8> h_{};
  std::array<uint64_t, 2> t_{};
  std::array<uint8_t, 128> buf_{};
  size_t fill_ = 0;
  size_t out_;
};

// ---- Ed25519 (libsodium's, issue #16: no libcrypto in a process that verifies a pack's
// signature; Ed25519 is deterministic, MinisignTest compares the signatures with OpenSSL's,
// and minisign itself signs and verifies with libsodium) ----
Result<std::array<uint8_t, kSignatureBytes>> ed25519_sign(const SecretKey& key, std::string_view message) {
  if (sodium_init() < 0) return make_error("Ed25519 signing: libsodium cannot be initialised");
  std::array<uint8_t, crypto_sign_ed25519_PUBLICKEYBYTES> pk{};
  std::array<uint8_t, crypto_sign_ed25519_SECRETKEYBYTES> sk{};  // seed || public key
  const WipeOnExit wipe_sk(sk);
  std::array<uint8_t, kSignatureBytes> sig{};
  unsigned long long len = 0;
  if (crypto_sign_ed25519_seed_keypair(pk.data(), sk.data(), key.seed.data()) != 0 ||
      crypto_sign_ed25519_detached(sig.data(), &len, reinterpret_cast<const unsigned char*>(message.data()),
                                   message.size(), sk.data()) != 0 ||
      len != sig.size()) {
    return make_error("Ed25519 signing failed (libsodium)");
  }
  return sig;
}

bool ed25519_verify(const PublicKey& key, const std::array<uint8_t, kSignatureBytes>& sig, std::string_view message) {
  if (sodium_init() < 0) return false;
  return crypto_sign_ed25519_verify_detached(sig.data(), reinterpret_cast<const unsigned char*>(message.data()),
                                             message.size(), key.key.data()) == 0;
}

Result<std::array<uint8_t, kPublicKeyBytes>> public_from_seed(const std::array<uint8_t, kSeedBytes>& seed) {
  if (sodium_init() < 0) return make_error("Ed25519: libsodium cannot be initialised");
  std::array<uint8_t, kPublicKeyBytes> pk{};
  std::array<uint8_t, crypto_sign_ed25519_SECRETKEYBYTES> sk{};
  const WipeOnExit wipe_sk(sk);
  if (crypto_sign_ed25519_seed_keypair(pk.data(), sk.data(), seed.data()) != 0)
    return make_error("Ed25519: cannot derive the public key (libsodium)");
  return pk;
}

// ---- text ----
std::string_view as_view(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

// The file's lines without their "\n" (and a "\r" before it); a last line without "\n" counts.
Result<std::vector<std::string_view>> split_lines(std::string_view text, const char* what) {
  if (text.size() > kMaxFileBytes)
    return make_error(std::string(what) + ": larger than " + std::to_string(kMaxFileBytes) + " bytes");
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  // Blank lines at the end (an editor's extra newline) are not part of the format.
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

Result<std::string> comment_of(std::string_view line, std::string_view prefix, size_t max, const char* what) {
  if (line.substr(0, prefix.size()) != prefix)
    return make_error(std::string(what) + ": a line must start with \"" + std::string(prefix) + "\"");
  line.remove_prefix(prefix.size());
  if (line.size() > max)
    return make_error(std::string(what) + ": comment longer than " + std::to_string(max) + " bytes");
  if (line.find('\0') != std::string_view::npos) return make_error(std::string(what) + ": NUL byte in a comment");
  return std::string(line);
}

Result<std::string> decode_exact(std::string_view line, size_t bytes, const char* what) {
  auto raw = base64_decode(line);
  if (!raw) return make_error(std::string(what) + ": " + raw.error().message);
  if (raw->size() != bytes) {
    const size_t got = raw->size();
    wipe(*raw);  // it may be (a part of) a secret key
    return make_error(std::string(what) + ": " + std::to_string(got) + " bytes where " + std::to_string(bytes) +
                      " were expected");
  }
  return raw;
}

template <size_t N>
void copy_into(std::array<uint8_t, N>& out, std::string_view bytes) {
  std::memcpy(out.data(), bytes.data(), N);
}

// The 104 bytes XORed with the scrypt stream of `password` (encryption and decryption).
Status scrypt_xor(std::array<uint8_t, 104>& data, std::string_view password, const std::array<uint8_t, 32>& salt,
                  uint64_t opslimit, uint64_t memlimit) {
  const ScryptParams p = scrypt_params(opslimit, memlimit);
  if (p.memory_bytes() > kMaxScryptBytes)
    return make_error("the key's scrypt parameters need " + std::to_string(p.memory_bytes() >> 20) +
                      " MiB of memory (more than the " + std::to_string(kMaxScryptBytes >> 20) + " MiB allowed)");
  // scrypt is OpenSSL's (an encrypted key is used only to sign): libcrypto is loaded here.
  if (auto s = load_libcrypto(); !s) return make_error("decrypt or encrypt a secret key with scrypt: " + s.error().message, s.error().err);
  std::array<uint8_t, 104> stream{};
  if (EVP_PBE_scrypt(password.data(), password.size(), salt.data(), salt.size(), uint64_t{1} << p.n_log2, p.r, p.p,
                     p.memory_bytes() + (uint64_t{1} << 20), stream.data(), stream.size()) != 1)
    return make_error("scrypt failed (OpenSSL: out of memory or parameters refused)");
  for (size_t i = 0; i < data.size(); ++i) data[i] ^= stream[i];
  sodium_memzero(stream.data(), stream.size());
  return {};
}

std::string checksum(const std::array<uint8_t, 104>& keynum_sk) {
  Blake2b h(32);
  h.update("Ed");
  h.update(as_view(keynum_sk.data(), kKeyIdBytes + 64));
  return h.finish();
}

}  // namespace

SecretKey::~SecretKey() { sodium_memzero(seed.data(), seed.size()); }
SecretKeyFile::~SecretKeyFile() { sodium_memzero(keynum_sk.data(), keynum_sk.size()); }

std::string key_id_hex(const KeyId& id) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (size_t i = id.size(); i-- > 0;) {
    out += kHex[id[i] >> 4];
    out += kHex[id[i] & 0xF];
  }
  return out;
}

std::string blake2b(std::string_view data, size_t out_bytes) {
  Blake2b h(std::clamp<size_t>(out_bytes, 1, 64));
  h.update(data);
  return h.finish();
}

uint64_t ScryptParams::memory_bytes() const {
  if (n_log2 >= 63 || r == 0) return UINT64_MAX;
  const uint64_t n = uint64_t{1} << n_log2;
  const uint64_t per = uint64_t{128} * r;
  if (n + 2 > UINT64_MAX / per) return UINT64_MAX;
  const uint64_t v = per * (n + 2);
  const uint64_t b = per * p;
  return v > UINT64_MAX - b ? UINT64_MAX : v + b;
}

ScryptParams scrypt_params(uint64_t opslimit, uint64_t memlimit) {
  // libsodium's pickparams (crypto_pwhash/scryptsalsa208sha256/pwhash_scryptsalsa208sha256.c).
  ScryptParams p;
  opslimit = std::max<uint64_t>(opslimit, 32768);
  p.r = 8;
  uint64_t max_n = 0;
  if (opslimit < memlimit / 32) {
    p.p = 1;
    max_n = opslimit / (uint64_t{p.r} * 4);
    for (p.n_log2 = 1; p.n_log2 < 63; ++p.n_log2) {
      if ((uint64_t{1} << p.n_log2) > max_n / 2) break;
    }
  } else {
    max_n = memlimit / (uint64_t{p.r} * 128);
    for (p.n_log2 = 1; p.n_log2 < 63; ++p.n_log2) {
      if ((uint64_t{1} << p.n_log2) > max_n / 2) break;
    }
    uint64_t max_rp = (opslimit / 4) / (uint64_t{1} << p.n_log2);
    max_rp = std::min<uint64_t>(max_rp, 0x3fffffff);
    p.p = static_cast<uint32_t>(max_rp) / p.r;
  }
  return p;
}

Result<PublicKey> parse_public_key(std::string_view text) {
  auto lines = split_lines(text, "public key");
  if (!lines) return lines.error();
  std::string_view b64;
  if (lines->size() == 1) {
    b64 = (*lines)[0];
  } else if (lines->size() == 2) {
    if (auto c = comment_of((*lines)[0], kUntrustedPrefix, kMaxCommentBytes, "public key"); !c) return c.error();
    b64 = (*lines)[1];
  } else {
    return make_error("public key: expected an \"untrusted comment:\" line and a base64 line, found " +
                      std::to_string(lines->size()) + " lines");
  }
  auto raw = decode_exact(b64, 2 + kKeyIdBytes + kPublicKeyBytes, "public key");
  if (!raw) return raw.error();
  if (raw->substr(0, 2) != "Ed") return make_error("public key: unsupported algorithm (not Ed25519 \"Ed\")");
  PublicKey key;
  copy_into(key.key_id, std::string_view(*raw).substr(2, kKeyIdBytes));
  copy_into(key.key, std::string_view(*raw).substr(2 + kKeyIdBytes));
  return key;
}

Result<SecretKeyFile> parse_secret_key(std::string_view text) {
  auto lines = split_lines(text, "secret key");
  if (!lines) return lines.error();
  if (lines->size() != 2)
    return make_error("secret key: expected an \"untrusted comment:\" line and a base64 line, found " +
                      std::to_string(lines->size()) + " lines");
  if (auto c = comment_of((*lines)[0], kUntrustedPrefix, kMaxCommentBytes, "secret key"); !c) return c.error();
  auto raw = decode_exact((*lines)[1], kSecretKeyFileBytes, "secret key");
  if (!raw) return raw.error();
  const WipeOnExit wipe_raw(*raw);  // the secret key itself when not encrypted
  const std::string_view r = *raw;
  if (r.substr(0, 2) != "Ed") return make_error("secret key: unsupported signature algorithm (not Ed25519 \"Ed\")");
  SecretKeyFile f;
  const std::string_view kdf = r.substr(2, 2);
  if (kdf == "Sc") {
    f.encrypted = true;
  } else if (kdf != std::string_view("\0\0", 2)) {
    return make_error("secret key: unsupported key derivation (neither scrypt \"Sc\" nor none)");
  }
  if (r.substr(4, 2) != "B2") return make_error("secret key: unsupported checksum algorithm (not BLAKE2b \"B2\")");
  copy_into(f.salt, r.substr(6, 32));
  f.opslimit = load_le64(reinterpret_cast<const uint8_t*>(r.data()) + 38);
  f.memlimit = load_le64(reinterpret_cast<const uint8_t*>(r.data()) + 46);
  copy_into(f.keynum_sk, r.substr(54));
  return f;
}

Result<Signature> parse_signature(std::string_view text) {
  auto lines = split_lines(text, "signature");
  if (!lines) return lines.error();
  if (lines->size() != 4)
    return make_error("signature: expected 4 lines (untrusted comment, signature, trusted comment, global "
                      "signature), found " + std::to_string(lines->size()));
  Signature sig;
  auto untrusted = comment_of((*lines)[0], kUntrustedPrefix, kMaxCommentBytes, "signature");
  if (!untrusted) return untrusted.error();
  sig.untrusted_comment = std::move(*untrusted);
  auto raw = decode_exact((*lines)[1], 2 + kKeyIdBytes + kSignatureBytes, "signature");
  if (!raw) return raw.error();
  const std::string_view alg = std::string_view(*raw).substr(0, 2);
  if (alg == "ED") {
    sig.algorithm = Algorithm::prehashed;
  } else if (alg == "Ed") {
    sig.algorithm = Algorithm::legacy;
  } else {
    return make_error("signature: unsupported algorithm (neither \"ED\" nor \"Ed\")");
  }
  copy_into(sig.key_id, std::string_view(*raw).substr(2, kKeyIdBytes));
  copy_into(sig.signature, std::string_view(*raw).substr(2 + kKeyIdBytes));
  auto trusted = comment_of((*lines)[2], kTrustedPrefix, kMaxTrustedCommentBytes, "signature");
  if (!trusted) return trusted.error();
  sig.trusted_comment = std::move(*trusted);
  auto global = decode_exact((*lines)[3], kSignatureBytes, "signature (global signature)");
  if (!global) return global.error();
  copy_into(sig.global_signature, *global);
  return sig;
}

Result<SecretKey> decrypt(const SecretKeyFile& file, std::string_view password) {
  std::array<uint8_t, 104> data = file.keynum_sk;
  const WipeOnExit wipe_data(data);
  if (file.encrypted) {
    if (auto s = scrypt_xor(data, password, file.salt, file.opslimit, file.memlimit); !s) return s.error();
  }
  const std::string sum = checksum(data);
  // minisign 0.11 writes an unencrypted (-W) key with an all-zero checksum and does not
  // check it; the public half derived from the seed (below) still guards such a key.
  const uint8_t* stored = data.data() + kKeyIdBytes + 64;
  const bool unset = !file.encrypted && std::all_of(stored, stored + 32, [](uint8_t b) { return b == 0; });
  if (!unset && sodium_memcmp(sum.data(), stored, 32) != 0) {
    return make_error(file.encrypted ? "wrong password (the key's checksum does not match)"
                                     : "secret key: corrupt (its checksum does not match)");
  }
  SecretKey key;
  std::memcpy(key.key_id.data(), data.data(), kKeyIdBytes);
  std::memcpy(key.seed.data(), data.data() + kKeyIdBytes, kSeedBytes);
  std::memcpy(key.public_key.data(), data.data() + kKeyIdBytes + kSeedBytes, kPublicKeyBytes);
  // The stored public half must be the seed's: a key that signs with one and names the
  // other would make signatures nobody can verify.
  auto derived = public_from_seed(key.seed);
  if (!derived) return derived.error();
  if (*derived != key.public_key) return make_error("secret key: its public half does not match its seed");
  return key;
}

Result<SecretKey> generate() {
  SecretKey key;
  // The kernel's CSPRNG through libsodium (getrandom(2)).
  if (sodium_init() < 0) return make_error("generate a key: libsodium cannot be initialised");
  randombytes_buf(key.seed.data(), key.seed.size());
  randombytes_buf(key.key_id.data(), key.key_id.size());
  auto pk = public_from_seed(key.seed);
  if (!pk) return pk.error();
  key.public_key = *pk;
  return key;
}

std::string format_public_key(const PublicKey& key) {
  std::string raw = "Ed";
  raw += as_view(key.key_id.data(), key.key_id.size());
  raw += as_view(key.key.data(), key.key.size());
  return std::string(kUntrustedPrefix) + "minisign public key " + key_id_hex(key.key_id) + "\n" + base64_encode(raw) +
         "\n";
}

Result<std::string> format_secret_key(const SecretKey& key, std::string_view password, uint64_t opslimit,
                                      uint64_t memlimit) {
  SecretKeyFile f;
  f.encrypted = !password.empty();
  std::memcpy(f.keynum_sk.data(), key.key_id.data(), kKeyIdBytes);
  std::memcpy(f.keynum_sk.data() + kKeyIdBytes, key.seed.data(), kSeedBytes);
  std::memcpy(f.keynum_sk.data() + kKeyIdBytes + kSeedBytes, key.public_key.data(), kPublicKeyBytes);
  const std::string sum = checksum(f.keynum_sk);
  std::memcpy(f.keynum_sk.data() + kKeyIdBytes + 64, sum.data(), 32);
  if (f.encrypted) {
    if (sodium_init() < 0) return make_error("secret key: libsodium cannot be initialised");
    randombytes_buf(f.salt.data(), f.salt.size());
    f.opslimit = opslimit;
    f.memlimit = memlimit;
    if (auto s = scrypt_xor(f.keynum_sk, password, f.salt, opslimit, memlimit); !s) return s.error();
  }
  std::string raw = "Ed";
  raw += f.encrypted ? std::string("Sc") : std::string("\0\0", 2);
  raw += "B2";
  raw += as_view(f.salt.data(), f.salt.size());
  std::array<uint8_t, 16> limits{};
  store_le64(limits.data(), f.opslimit);
  store_le64(limits.data() + 8, f.memlimit);
  raw += as_view(limits.data(), limits.size());
  raw += as_view(f.keynum_sk.data(), f.keynum_sk.size());
  std::string text = std::string(kUntrustedPrefix) +
                     (f.encrypted ? "minisign encrypted secret key" : "minisign secret key") + "\n" +
                     base64_encode(raw) + "\n";
  sodium_memzero(raw.data(), raw.size());
  sodium_memzero(f.keynum_sk.data(), f.keynum_sk.size());
  return text;
}

Result<std::string> sign(const SecretKey& key, std::string_view message, std::string_view trusted_comment,
                         std::string_view untrusted_comment) {
  auto one_line = [](std::string_view s) {
    return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
  };
  if (!one_line(trusted_comment) || trusted_comment.size() > kMaxTrustedCommentBytes)
    return make_error("sign: the trusted comment must be one line of at most " +
                      std::to_string(kMaxTrustedCommentBytes) + " bytes");
  if (!one_line(untrusted_comment) || untrusted_comment.size() > kMaxCommentBytes)
    return make_error("sign: the untrusted comment must be one line of at most " + std::to_string(kMaxCommentBytes) +
                      " bytes");
  auto sig = ed25519_sign(key, blake2b(message, 64));
  if (!sig) return sig.error();
  std::string global_message(as_view(sig->data(), sig->size()));
  global_message += trusted_comment;
  auto global = ed25519_sign(key, global_message);
  if (!global) return global.error();
  std::string raw = "ED";
  raw += as_view(key.key_id.data(), key.key_id.size());
  raw += as_view(sig->data(), sig->size());
  return std::string(kUntrustedPrefix) + std::string(untrusted_comment) + "\n" + base64_encode(raw) + "\n" +
         std::string(kTrustedPrefix) + std::string(trusted_comment) + "\n" +
         base64_encode(as_view(global->data(), global->size())) + "\n";
}

Status verify(const PublicKey& key, const Signature& sig, std::string_view message) {
  if (sig.key_id != key.key_id)
    return make_error("signature made by key " + key_id_hex(sig.key_id) + ", not by key " + key_id_hex(key.key_id));
  const bool ok = sig.algorithm == Algorithm::prehashed ? ed25519_verify(key, sig.signature, blake2b(message, 64))
                                                        : ed25519_verify(key, sig.signature, message);
  if (!ok) return make_error("signature verification failed (the content is not what key " + key_id_hex(key.key_id) +
                             " signed)");
  std::string global_message(as_view(sig.signature.data(), sig.signature.size()));
  global_message += sig.trusted_comment;
  if (!ed25519_verify(key, sig.global_signature, global_message))
    return make_error("signature verification failed (the trusted comment was altered)");
  return {};
}

}  // namespace soyaos::minisign
