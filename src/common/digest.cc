#include "common/digest.h"

// SHA-256 is Nettle's (issue #16). Debian builds Nettle "fat": at start it asks the CPU which
// implementation to use, and with the SHA extensions (x86 SHA-NI, ARMv8 SHA2) it hashes at
// OpenSSL's speed (~1.2 GB/s here) without loading libcrypto (~1.3 ms of CPU in relocations
// and initialisers per process), where libsodium's portable C does ~0.2 GB/s (a cache hit
// verifies every blob it replays; the supervisor hashes an agent's whole output). One
// library at every size: no switch between two, no bytes held back, streaming throughout.
// Cross-checked against OpenSSL's and libsodium's at every size (tests/unit/sha256_test.cc).
#include <nettle/sha2.h>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "common/unique_fd.h"

namespace soyaos {

struct Sha256::Context {
  sha256_ctx state;
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) { sha256_init(&ctx_->state); }
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  sha256_update(&ctx_->state, size, static_cast<const uint8_t*>(data));
}

std::string Sha256::hex() {
  uint8_t md[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx_->state, sizeof md, md);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof md);
  for (uint8_t byte : md) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

namespace {

// A pack file's digest. read(2) into a buffer that is not zeroed first: a pack of small
// files touched one page per file instead of zeroing (and faulting in) 64 KiB for each, and
// std::ifstream's locale set-up per file (issue #16: a cache hit digests the pack).
// The entry was a regular file when the pack was scanned; one swapped since for a symlink (to
// anything outside the pack), or whose directory was swapped for one, or a FIFO (which would
// block the run forever) is refused, not followed or waited on: the path is resolved beneath
// the pack's root with no symbolic link in any component (openat2 RESOLVE_NO_SYMLINKS, Linux
// >= 5.6; the scan never descends through a link, so no entry's path holds one).
Result<std::string> file_digest(int root_fd, const std::filesystem::path& root, const std::string& rel) {
  const std::filesystem::path p = root / rel;
  struct open_how how {};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  // SAFETY: openat2(2) has no glibc wrapper in Debian 12; `how` is a complete struct.
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how)));
  if (!fd) {
    if (errno == ELOOP || errno == EXDEV) {
      return make_error("read " + p.string() + ": it or a directory above it became a symbolic link after the pack was scanned", ELOOP);
    }
    return make_error("read " + p.string(), errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error("stat " + p.string(), errno);
  if (!S_ISREG(st.st_mode)) {
    return make_error("read " + p.string() + ": no longer a regular file (changed after the pack was scanned)", EINVAL);
  }
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
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) return make_error("open " + root.string(), errno);
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
        auto d = file_digest(root_fd.get(), root, e.rel);
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
