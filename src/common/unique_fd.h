// The one owner type for file descriptors. Move-only; the destructor closes.
// Pass by value to hand over ownership, by `const UniqueFd&` or `.get()` to lend.
#pragma once

#include <unistd.h>

#include <utility>

namespace soyaos {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  void reset(int fd = -1) noexcept {
    int old = std::exchange(fd_, fd);
    // close() errors are not actionable here (the fd is gone either way, EINTR included).
    if (old >= 0) (void)::close(old);
  }

 private:
  int fd_ = -1;
};

}  // namespace soyaos
