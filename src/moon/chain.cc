#include "moon/chain.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sodium.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/digest.h"
#include "common/libcrypto.h"
#include "common/secret_bytes.h"
#include "common/unique_fd.h"
#include "common/wipe.h"

namespace soyaos::moon::chain {

namespace fs = std::filesystem;

namespace {

constexpr const char* kHeadFormat = "soyaos-scope-head-v1";
constexpr size_t kMaxKeyFileBytes = size_t{64} * 1024;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Bio = std::unique_ptr<BIO, BioFree>;

Result<std::string> read_small(const fs::path& p, int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read " + p.string());
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxKeyFileBytes) return make_error(p.string() + " is too large to be a key or head file", EFBIG);
  }
  return out;
}

Status write_all(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("write " + path.string());
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Status fsync_dir(const fs::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno_error("open " + dir.string());
  if (::fsync(fd.get()) != 0) return errno_error("fsync " + dir.string());
  return {};
}

// A new file in `dir` holding `content`, fsynced, with `mode`; its path.
Result<fs::path> write_temp(const fs::path& dir, const std::string& stem, std::string_view content, mode_t mode) {
  std::string tmpl = (dir / ("." + stem + ".tmp.XXXXXX")).string();
  UniqueFd fd(::mkstemp(tmpl.data()));
  if (!fd) return errno_error("create a temporary file in " + dir.string());
  const fs::path tmp = tmpl;
  Status s = ::fchmod(fd.get(), mode) == 0 ? Status() : errno_error("chmod " + tmp.string());
  if (s) s = write_all(fd.get(), content, tmp);
  if (s && ::fsync(fd.get()) != 0) s = errno_error("fsync " + tmp.string());
  if (!s) {
    (void)::unlink(tmp.c_str());
    return s.error();
  }
  return tmp;
}

using RawKey = std::array<unsigned char, 32>;

constexpr unsigned char kPkcs8[] = {0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06,
                                    0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20};
constexpr unsigned char kSpki[] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};

// The PEM text of an Ed25519 key, byte for byte what OpenSSL's PEM_write_bio_PrivateKey /
// PEM_write_bio_PUBKEY write (RFC 8410's fixed DER prefix and the 32 raw bytes, one base64
// line: ChainTest cross-checks it against OpenSSL). The caller wipes a private key's text.
std::string pem_of(const RawKey& raw, bool private_half) {
  std::array<unsigned char, sizeof kPkcs8 + 32> der{};
  const WipeOnExit wipe_der(der);
  const size_t prefix = private_half ? sizeof kPkcs8 : sizeof kSpki;
  std::memcpy(der.data(), private_half ? kPkcs8 : kSpki, prefix);
  std::memcpy(der.data() + prefix, raw.data(), raw.size());
  std::string body = base64_encode(std::string_view(reinterpret_cast<const char*>(der.data()), prefix + raw.size()));
  const WipeOnExit wipe_body(body);
  std::string out = private_half ? "-----BEGIN PRIVATE KEY-----\n" : "-----BEGIN PUBLIC KEY-----\n";
  out.reserve(out.size() + body.size() + 32);
  out += body;
  out += private_half ? "\n-----END PRIVATE KEY-----\n" : "\n-----END PUBLIC KEY-----\n";
  return out;
}

// The one layout OpenSSL writes for an Ed25519 key (RFC 8410): the PEM armour around one
// base64 line of a fixed DER prefix (PKCS#8 for the private half, SubjectPublicKeyInfo for
// the public one) and the 32 raw key bytes (the private seed, or the public key). Read
// directly, that is a base64 decode; OpenSSL's PEM reader first enumerates every decoder of
// every provider, ~2 ms of CPU for each of the two keys that every process that stores
// events loads (issue #16: docs/benchmarks-issue16-history.md, "After"). Anything else goes
// to OpenSSL's reader.
// The raw key goes to `out` (wiped by the caller): every copy of a seed is one more to wipe.
bool parse_canonical_ed25519(std::string_view pem, bool private_half, RawKey& out) {
  const std::string_view head = private_half ? "-----BEGIN PRIVATE KEY-----\n" : "-----BEGIN PUBLIC KEY-----\n";
  const std::string_view tail = private_half ? "\n-----END PRIVATE KEY-----\n" : "\n-----END PUBLIC KEY-----\n";
  const std::string_view text(pem);
  if (text.size() <= head.size() + tail.size() || text.substr(0, head.size()) != head ||
      text.substr(text.size() - tail.size()) != tail) {
    return false;
  }
  // Canonical base64 only (one text per key: what OpenSSL writes), into a fixed buffer.
  std::array<unsigned char, sizeof kPkcs8 + 32> der{};
  const WipeOnExit wipe_der(der);
  auto n = base64_decode_into(text.substr(head.size(), text.size() - head.size() - tail.size()), der);
  const unsigned char* prefix = private_half ? kPkcs8 : kSpki;
  const size_t prefix_size = private_half ? sizeof kPkcs8 : sizeof kSpki;
  if (!n || *n != prefix_size + out.size() || std::memcmp(der.data(), prefix, prefix_size) != 0) return false;
  std::memcpy(out.data(), der.data() + prefix_size, out.size());
  return true;
}

// The raw key bytes (the private seed, or the public key) of `key` into `out` (wiped by the
// caller).
bool raw_of(EVP_PKEY* key, bool private_half, RawKey& out) {
  size_t len = out.size();
  const int ok = private_half ? EVP_PKEY_get_raw_private_key(key, out.data(), &len)
                              : EVP_PKEY_get_raw_public_key(key, out.data(), &len);
  return ok == 1 && len == out.size();
}

// The 32 raw bytes of an Ed25519 PEM key into `out` (wiped by the caller): the seed of a
// private key, or a public key. Only a key in another layout than the canonical one loads
// libcrypto, so that no valid key is refused.
Status parse_pem(std::string_view pem, bool private_half, const fs::path& where, RawKey& out) {
  if (parse_canonical_ed25519(pem, private_half, out)) return {};
  if (auto s = load_libcrypto(); !s) {
    return make_error("read " + where.string() + " (not in the canonical Ed25519 layout): " + s.error().message,
                      s.error().err);
  }
  Bio mem(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!mem) return make_error("read " + where.string() + ": out of memory", ENOMEM);
  Pkey key(private_half ? PEM_read_bio_PrivateKey(mem.get(), nullptr, nullptr, nullptr)
                        : PEM_read_bio_PUBKEY(mem.get(), nullptr, nullptr, nullptr));
  if (!key) return make_error(where.string() + " is not a PEM " + (private_half ? "private" : "public") + " key");
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) return make_error(where.string() + " is not an Ed25519 key");
  if (!raw_of(key.get(), private_half, out)) return make_error(where.string() + ": OpenSSL did not give the raw Ed25519 key");
  return {};
}

std::string key_id_of(const RawKey& public_key) {
  return "ed25519:" + sha256_hex(std::string_view(reinterpret_cast<const char*>(public_key.data()), public_key.size()))
                          .substr(0, 16);
}

// Opens an existing key file, refusing one that is not ours alone (it signs the record); its
// text is read straight into wiped, unswappable pages.
Result<SecretBytes> read_private_file(const fs::path& p) {
  // O_NONBLOCK: a FIFO in its place is refused below, not waited on (regular files ignore it).
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return errno_error("open " + p.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + p.string());
  if (!S_ISREG(st.st_mode)) return make_error(p.string() + " is not a regular file", EINVAL);
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return make_error(p.string() + " must be owned by uid " + std::to_string(::geteuid()) +
                          " and readable by its owner only (mode 0600): it signs the Scope record",
                      EPERM);
  }
  return SecretBytes::read_all(fd.get(), p.string());
}

// The ids of a public PEM file and its raw key; nullopt when absent.
Result<std::optional<std::string>> read_public_file(const fs::path& p) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::optional<std::string>();
    return errno_error("open " + p.string());
  }
  auto text = read_small(p, fd.get());
  if (!text) return text.error();
  return std::optional<std::string>(std::move(text.value()));
}

}  // namespace

std::string event_hash(int64_t seq, std::string_view prev_hash, std::string_view json) {
  Sha256 h;
  const std::string head = std::to_string(seq) + "\n";
  h.update(head);
  h.update(prev_hash);
  h.update(std::string_view("\n", 1));
  h.update(json);
  return h.hex();
}

std::string checkpoint_message(int64_t seq, std::string_view hash, std::string_view time) {
  std::string m = "soyaos-scope-checkpoint-v1\n" + std::to_string(seq) + "\n";
  m.append(hash).append("\n").append(time).append("\n");
  return m;
}

// Ed25519 is libsodium's (issue #16): OpenSSL signs only through EVP, whose first use in a
// process initialises its providers and name maps, ~6 M instructions (~2.5 ms of CPU) in
// every process that stores an event, and linking libcrypto cost every process ~1.3 ms.
// Ed25519 is deterministic (RFC 8032): the same key and message give the same signature
// either way (ChainTest compares them with OpenSSL's), and a third party verifies with any
// implementation (docs/events.md).
struct MoonKey::Impl {
  RawKey public_key{};
  std::array<unsigned char, crypto_sign_ed25519_SECRETKEYBYTES> secret{};  // seed || public key
  bool has_private = false;
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { sodium_memzero(secret.data(), secret.size()); }
};

namespace {

// The key pair of a private seed (libsodium's own key derivation) into a MoonKey::Impl.
template <class KeyImpl>
Status set_private(KeyImpl& impl, const RawKey& seed) {
  // Idempotent and thread-safe; -1 only when libsodium cannot run at all.
  if (sodium_init() < 0) return make_error("initialise libsodium for the Moon's signing key");
  const int rc = crypto_sign_ed25519_seed_keypair(impl.public_key.data(), impl.secret.data(), seed.data());
  if (rc != 0) return make_error("derive the Moon's Ed25519 key pair: libsodium refused");
  impl.has_private = true;
  return {};
}

}  // namespace

MoonKey::MoonKey(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), id_(key_id_of(impl_->public_key)) {}
MoonKey::MoonKey(MoonKey&&) noexcept = default;
MoonKey& MoonKey::operator=(MoonKey&&) noexcept = default;
MoonKey::~MoonKey() = default;

Result<MoonKey> MoonKey::load_or_create(const fs::path& home) {
  const fs::path key_file = home / "moon.key";
  const fs::path pub_file = home / "moon.pub";
  auto impl = std::make_unique<Impl>();
  auto existing = read_private_file(key_file);
  if (!existing && existing.error().err != ENOENT) return existing.error();
  // The seed, in this one buffer, wiped on every way out (the PEM text is a SecretBytes,
  // wiped as it dies; libsodium's key pair lives in Impl, wiped by its destructor).
  RawKey seed{};
  const WipeOnExit wipe_seed(seed);
  if (existing) {
    if (auto s = parse_pem(existing->view(), true, key_file, seed); !s) return s.error();
    if (auto s = set_private(*impl, seed); !s) return s.error();
  } else {
    // A fresh seed from the kernel's CSPRNG (libsodium's randombytes: getrandom(2)).
    if (sodium_init() < 0) return make_error("initialise libsodium for the Moon's signing key");
    randombytes_buf(seed.data(), seed.size());
    if (auto s = set_private(*impl, seed); !s) return s.error();
    std::string pem = pem_of(seed, true);
    const WipeOnExit wipe_pem(pem);
    auto tmp = write_temp(home, "moon.key", pem, 0600);
    if (!tmp) return tmp.error();
    // link(2) never replaces: when another process created the key meanwhile, use theirs.
    const int rc = ::link(tmp->c_str(), key_file.c_str());
    const int link_errno = errno;
    (void)::unlink(tmp->c_str());
    if (rc != 0) {
      if (link_errno != EEXIST) return make_error("create " + key_file.string(), link_errno);
      return load_or_create(home);
    }
    if (auto s = fsync_dir(home); !s) return s.error();
  }
  // moon.pub is what verifiers read: it must be this key's public half.
  auto pub = read_public_file(pub_file);
  if (!pub) return pub.error();
  if (*pub) {
    RawKey k{};
    if (auto s = parse_pem(**pub, false, pub_file, k); !s) return s.error();
    if (k != impl->public_key) {
      return make_error(pub_file.string() + " is not the public half of " + key_file.string() +
                        ": one of them was replaced", EINVAL);
    }
  } else {
    // Only a key created now or a moon.pub deleted since.
    const std::string pub_pem = pem_of(impl->public_key, false);
    auto tmp = write_temp(home, "moon.pub", pub_pem, 0644);
    if (!tmp) return tmp.error();
    if (::rename(tmp->c_str(), pub_file.c_str()) != 0) {
      Error e = errno_error("rename " + tmp->string() + " to " + pub_file.string());
      (void)::unlink(tmp->c_str());
      return e;
    }
    if (auto s = fsync_dir(home); !s) return s.error();
  }
  return MoonKey(std::move(impl));
}

Result<std::optional<MoonKey>> MoonKey::load_public(const fs::path& home) {
  const fs::path pub_file = home / "moon.pub";
  auto pub = read_public_file(pub_file);
  if (!pub) return pub.error();
  if (!*pub) return std::optional<MoonKey>();
  auto impl = std::make_unique<Impl>();
  if (auto s = parse_pem(**pub, false, pub_file, impl->public_key); !s) return s.error();
  return std::optional<MoonKey>(MoonKey(std::move(impl)));
}

Result<MoonKey> MoonKey::public_from_file(const fs::path& pem) {
  auto text = read_public_file(pem);
  if (!text) return text.error();
  if (!*text) return make_error("open " + pem.string(), ENOENT);
  auto impl = std::make_unique<Impl>();
  if (auto s = parse_pem(**text, false, pem, impl->public_key); !s) return s.error();
  return MoonKey(std::move(impl));
}

Result<Checkpoint> MoonKey::sign(int64_t seq, const std::string& hash, const std::string& time) const {
  if (!impl_->has_private) return make_error("sign a checkpoint: only the Moon's public key is loaded");
  const std::string msg = checkpoint_message(seq, hash, time);
  std::array<unsigned char, crypto_sign_ed25519_BYTES> sig{};
  unsigned long long len = 0;
  if (crypto_sign_ed25519_detached(sig.data(), &len, reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                                   impl_->secret.data()) != 0 ||
      len != sig.size()) {
    return make_error("sign a Scope checkpoint with the Moon's key: libsodium refused");
  }
  return Checkpoint{seq, hash, time, id_,
                    base64_encode(std::string_view(reinterpret_cast<const char*>(sig.data()), sig.size()))};
}

bool MoonKey::verify(const Checkpoint& cp) const {
  auto sig = base64_decode(cp.signature);
  if (!sig) return false;
  const std::string msg = checkpoint_message(cp.seq, cp.hash, cp.time);
  if (sig->size() != crypto_sign_ed25519_BYTES || sodium_init() < 0) return false;
  return crypto_sign_ed25519_verify_detached(reinterpret_cast<const unsigned char*>(sig->data()),
                                             reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                                             impl_->public_key.data()) == 0;
}

fs::path head_path(const fs::path& home) { return home / "scope.head"; }

Result<std::optional<Checkpoint>> read_head(const fs::path& home) {
  const fs::path p = head_path(home);
  auto text = read_public_file(p);
  if (!text) return text.error();
  if (!*text) return std::optional<Checkpoint>();
  auto j = nlohmann::json::parse(**text, nullptr, false);
  try {
    if (j.is_discarded() || !j.is_object() || j.value("format", "") != kHeadFormat) throw std::invalid_argument("");
    Checkpoint cp;
    cp.seq = j.at("seq").get<int64_t>();
    cp.hash = j.at("hash").get<std::string>();
    cp.time = j.at("time").get<std::string>();
    cp.key_id = j.at("key_id").get<std::string>();
    cp.signature = j.at("signature").get<std::string>();
    return std::optional<Checkpoint>(std::move(cp));
  } catch (const std::exception&) {
    return make_error(p.string() + " is not a Scope head file (" + kHeadFormat + ")", EBADMSG);
  }
}

Status write_head(const fs::path& home, const Checkpoint& cp) {
  const fs::path lock_path = home / "scope.head.lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock) return errno_error("open " + lock_path.string());
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return errno_error("lock " + lock_path.string());
  }
  // Two writers may finish out of order: the head only moves forward. A head that does
  // not parse is replaced (moon check reports a bad head before that happens).
  auto current = read_head(home);
  if (current && *current && (*current)->seq >= cp.seq) return {};
  const bool first_head = current && !*current;  // no head file yet
  nlohmann::ordered_json j = {{"format", kHeadFormat}, {"seq", cp.seq},       {"hash", cp.hash},
                              {"time", cp.time},       {"key_id", cp.key_id}, {"signature", cp.signature}};
  auto tmp = write_temp(home, "scope.head", j.dump() + "\n", 0644);
  if (!tmp) return tmp.error();
  const fs::path target = head_path(home);
  if (::rename(tmp->c_str(), target.c_str()) != 0) {
    Error e = errno_error("rename " + tmp->string() + " to " + target.string());
    (void)::unlink(tmp->c_str());
    return e;
  }
  // No directory fsync once a head exists (issue #16: one fsync pair per run was the
  // head's): rename() swaps the name atomically, so after a crash the head is the new one or
  // the previous one, both complete (each was fsynced before its rename). A previous head
  // only names an earlier end of the chain, which moon check accepts; the store's own
  // commits are durable regardless (E4). The first head of a home is synced into its
  // directory: lost in a crash while the events survive, moon check would report the head
  // missing, a false alarm of deletion.
  if (first_head) {
    if (auto s = fsync_dir(home); !s) return s.error();
  }
  return {};
}

}  // namespace soyaos::moon::chain
