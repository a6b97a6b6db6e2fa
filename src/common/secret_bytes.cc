#include "common/secret_bytes.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace soyaos {

SecretBytes::SecretBytes(SecretBytes&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)),
      size_(std::exchange(other.size_, 0)) {}

SecretBytes& SecretBytes::operator=(SecretBytes&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SecretBytes::~SecretBytes() { release(); }

void SecretBytes::release() noexcept {
  if (base_ == nullptr) return;
  // explicit_bzero: the compiler may not drop the wipe of memory about to be unmapped.
  explicit_bzero(base_, mapped_);
  (void)::munlock(base_, mapped_);
  (void)::munmap(base_, mapped_);
  base_ = nullptr;
  mapped_ = 0;
  size_ = 0;
}

Result<SecretBytes> SecretBytes::allocate(std::size_t capacity) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t len = ((capacity + page - 1) / page) * page;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return errno_error("mmap for a secret value");
  SecretBytes s;
  s.base_ = p;
  s.mapped_ = len;
  // Not in a core dump of the supervisor: required, so a failure is an error.
  if (::madvise(p, len, MADV_DONTDUMP) != 0) return errno_error("madvise(MADV_DONTDUMP) for a secret value");
#ifdef MADV_WIPEONFORK
  // Zero in the Comet's process and any other child (Linux 4.14+; best effort before).
  (void)::madvise(p, len, MADV_WIPEONFORK);
#endif
  // Not written to swap where RLIMIT_MEMLOCK allows it (a rootless operator's limit may not).
  (void)::mlock(p, len);
  return s;
}

Result<SecretBytes> SecretBytes::copy_of(std::string_view value) {
  if (value.size() > kMaxBytes) {
    return make_error("secret value is longer than " + std::to_string(kMaxBytes) + " bytes", EFBIG);
  }
  if (value.empty()) return SecretBytes();
  auto s = allocate(value.size());
  if (!s) return s.error();
  std::memcpy(s->base_, value.data(), value.size());
  s->size_ = value.size();
  return s;
}

Result<SecretBytes> SecretBytes::read_all(int fd, std::string_view what, bool one_line) {
  // One spare byte tells "exactly kMaxBytes" from "more". A regular file gets pages for its
  // size only (a Moon key file is ~120 bytes: one page mapped, locked and wiped instead of 17,
  // ~60 us of every commit that signs, issue #16); if it grew since fstat, the buffer grows to
  // the full bound, so what is read and refused is the same as with the full buffer at once.
  const std::size_t limit = kMaxBytes + 1;
  std::size_t want = limit;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
      static_cast<std::size_t>(st.st_size) < kMaxBytes) {
    want = static_cast<std::size_t>(st.st_size) + 1;
  }
  auto s = allocate(want);
  if (!s) return s.error();
  std::size_t got = 0;
  while (got < limit) {
    if (got == s->mapped_) {
      auto bigger = allocate(limit);
      if (!bigger) return bigger.error();
      std::memcpy(bigger->base_, s->base_, got);
      *s = std::move(bigger.value());  // the smaller copy is wiped as it goes
    }
    auto* buf = static_cast<char*>(s->base_);
    const std::size_t room = std::min(s->mapped_, limit) - got;
    const ssize_t n = ::read(fd, buf + got, room);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read " + std::string(what));
    }
    if (n == 0) break;
    const bool newline = one_line && std::memchr(buf + got, '\n', static_cast<std::size_t>(n)) != nullptr;
    got += static_cast<std::size_t>(n);
    if (newline) break;
  }
  if (got > kMaxBytes) {
    return make_error(std::string(what) + ": a secret value is at most " + std::to_string(kMaxBytes) + " bytes",
                      EFBIG);
  }
  s->size_ = got;
  return s;
}

void SecretBytes::drop_trailing_newline() noexcept {
  if (size_ == 0) return;
  auto* buf = static_cast<char*>(base_);
  if (buf[size_ - 1] != '\n') return;
  buf[--size_] = '\0';
  if (size_ > 0 && buf[size_ - 1] == '\r') buf[--size_] = '\0';
}

}  // namespace soyaos
