#include "common/digest.h"

// SHA-256 with the CPU's SHA extensions when it has them (common/sha256_hw.h: no library,
// ~6x libsodium's speed, about OpenSSL's), else from two libraries (issue #16). libsodium's (linked: every process has it) for
// small inputs, so that a process that hashes little — a cache hit, `soyaos version`, a
// run of a small pack — never loads libcrypto (~1.3 ms of CPU in relocations and
// initialisers). libsodium's is portable C, ~5x slower than OpenSSL's (SHA-NI here:
// docs/benchmarks-issue16.md, session 9), so once a process has hashed kSha256OpenSslAbove bytes
// (or libcrypto is loaded anyway), the rest goes to OpenSSL's: a large pack or output is
// hashed at OpenSSL's speed as before. Both compute the same function; the bytes produced
// are identical (DigestTest cross-checks them around the switch). A libcrypto that cannot
// be loaded costs only speed: libsodium then hashes everything, streaming (never holding
// more than kSha256OpenSslAbove bytes: the supervisor hashes an agent's whole stdout).
//
// OpenSSL's low-level SHA-256: the EVP interface would load and query the provider
// machinery on first use (~5M instructions) for one fixed algorithm. The functions are
// deprecated in 3.0 but kept, and are the same implementation; the API level is pinned for
// this file only.
#define OPENSSL_API_COMPAT 10101
#include <openssl/sha.h>
#include <sodium.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>

#include "common/libcrypto.h"
#include "common/sha256_hw.h"
#include "common/unique_fd.h"

namespace soyaos {

namespace {

// Bytes hashed by libsodium in this process; past kSha256OpenSslAbove, OpenSSL takes over.
std::atomic<uint64_t>& sodium_bytes() {
  static std::atomic<uint64_t> n{0};
  return n;
}

// True when the next bytes should go to OpenSSL (loading libcrypto if it must and can).
bool use_openssl(size_t more) {
  if (libcrypto_loaded()) return load_libcrypto().ok();
  if (sodium_bytes().load(std::memory_order_relaxed) + more <= kSha256OpenSslAbove) return false;
  return load_libcrypto().ok();
}

}  // namespace

uint64_t sha256_libsodium_bytes() { return sodium_bytes().load(std::memory_order_relaxed); }

struct Sha256::Context {
  // The CPU's SHA extensions: every byte, no library.
  std::unique_ptr<Sha256Hw> hw;
  // Without them: the bytes are held in `pending` until the hasher knows which library finishes: libsodium
  // in one call at hex() when they stay small; OpenSSL's state once there is more (or
  // libcrypto is loaded anyway); libsodium's streaming state when there is more and
  // libcrypto cannot be loaded.
  std::string pending;  // bytes not hashed yet (at most kSha256OpenSslAbove)
  std::unique_ptr<SHA256_CTX> openssl;
  std::unique_ptr<crypto_hash_sha256_state> sodium;
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  if (sha256_hw_enabled()) {
    ctx_->hw = std::make_unique<Sha256Hw>();
  } else if (use_openssl(0)) {
    ctx_->openssl = std::make_unique<SHA256_CTX>();
    SHA256_Init(ctx_->openssl.get());
  }
}
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  Context& c = *ctx_;
  if (c.hw) {
    c.hw->update(data, size);
    return;
  }
  if (!c.openssl && !c.sodium && size > 0) {
    if (use_openssl(c.pending.size() + size)) {
      c.openssl = std::make_unique<SHA256_CTX>();
      SHA256_Init(c.openssl.get());
      SHA256_Update(c.openssl.get(), c.pending.data(), c.pending.size());
      std::string().swap(c.pending);
    } else if (c.pending.size() + size > kSha256OpenSslAbove) {
      // libcrypto could not be loaded: stream through libsodium rather than hold it all.
      c.sodium = std::make_unique<crypto_hash_sha256_state>();
      crypto_hash_sha256_init(c.sodium.get());
      crypto_hash_sha256_update(c.sodium.get(), reinterpret_cast<const unsigned char*>(c.pending.data()),
                                c.pending.size());
      sodium_bytes().fetch_add(c.pending.size(), std::memory_order_relaxed);
      std::string().swap(c.pending);
    }
  }
  if (c.openssl) {
    SHA256_Update(c.openssl.get(), data, size);
    return;
  }
  if (c.sodium) {
    crypto_hash_sha256_update(c.sodium.get(), static_cast<const unsigned char*>(data), size);
    sodium_bytes().fetch_add(size, std::memory_order_relaxed);
    return;
  }
  c.pending.append(static_cast<const char*>(data), size);
}

std::string Sha256::hex() {
  unsigned char md[crypto_hash_sha256_BYTES];
  Context& c = *ctx_;
  if (c.hw) {
    c.hw->final(md);
  } else if (c.openssl) {
    SHA256_Final(md, c.openssl.get());
  } else if (c.sodium) {
    crypto_hash_sha256_final(c.sodium.get(), md);
  } else {
    // Everything it was given, held until now (at most kSha256OpenSslAbove bytes): one call.
    crypto_hash_sha256(md, reinterpret_cast<const unsigned char*>(c.pending.data()), c.pending.size());
    sodium_bytes().fetch_add(c.pending.size(), std::memory_order_relaxed);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof md);
  for (unsigned char byte : md) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

namespace {

// A pack file's digest. read(2) into a buffer that is not zeroed first: a pack of small
// files touched one page per file instead of zeroing (and faulting in) 64 KiB for each, and
// std::ifstream's locale set-up per file (issue #16: a cache hit digests the pack).
Result<std::string> file_digest(const std::filesystem::path& p) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return make_error("read " + p.string(), errno);
  constexpr size_t kChunk = size_t{1} << 16;
  const auto buf = std::make_unique_for_overwrite<char[]>(kChunk);
  Sha256 h;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.get(), kChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("read " + p.string(), errno);
    }
    if (n == 0) break;
    h.update(buf.get(), static_cast<size_t>(n));
  }
  return h.hex();
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

Result<std::string> tree_digest(const std::filesystem::path& root) {
  auto tree = scan_pack(root);
  if (!tree) return tree.error();
  return tree_digest(root, *tree);
}

Result<std::string> tree_digest(const std::filesystem::path& root, const PackTree& tree) {
  Sha256 digest;
  for (const auto& e : tree.entries) {
    std::string line = e.rel + '\0';
    switch (e.type) {
      case PackEntry::Type::symlink:
        line += "symlink" + std::string(1, '\0') + e.target;
        break;
      case PackEntry::Type::dir:
        line += "dir";
        break;
      case PackEntry::Type::file: {
        auto d = file_digest(root / e.rel);
        if (!d) return d.error();
        line += std::string(e.exec ? "exec" : "file") + '\0' + *d;
        break;
      }
    }
    digest.update(line);
    digest.update(std::string_view("\n", 1));
  }
  return "sha256:" + digest.hex();
}

}  // namespace soyaos
