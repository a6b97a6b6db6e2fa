// A secret value (C11: an API key the operator supplies for a run) held so that it never
// leaves memory we control: its own anonymous pages, excluded from core dumps
// (MADV_DONTDUMP), zeroed in any forked child (MADV_WIPEONFORK, where the kernel has it),
// locked against swap where RLIMIT_MEMLOCK allows (best effort), and wiped with
// explicit_bzero before the pages are unmapped. Move-only; no operator<<, no implicit
// conversion to std::string: a copy has to be spelled `view()` and is then the caller's
// responsibility (keep it out of events, logs and error messages).
#pragma once

#include <cstddef>
#include <string_view>

#include "common/result.h"

namespace soyaos {

class SecretBytes {
 public:
  // Values longer than this are refused: API keys, tokens and PEM keys are far smaller,
  // and a bound keeps `secret set < /dev/zero` from filling memory.
  static constexpr std::size_t kMaxBytes = std::size_t{64} * 1024;

  SecretBytes() = default;  // empty
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  SecretBytes(SecretBytes&& other) noexcept;
  SecretBytes& operator=(SecretBytes&& other) noexcept;
  ~SecretBytes();

  // A protected copy of `value` (at most kMaxBytes).
  static Result<SecretBytes> copy_of(std::string_view value);
  // Reads `fd` to its end (or, with `one_line`, up to and including the first newline: a
  // terminal in canonical mode) straight into protected pages, no intermediate std::string;
  // more than kMaxBytes is an error naming `what` (never the content).
  static Result<SecretBytes> read_all(int fd, std::string_view what, bool one_line = false);

  [[nodiscard]] std::string_view view() const noexcept {
    return {static_cast<const char*>(base_), size_};
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  // Drops one trailing "\n" (or "\r\n"): `echo KEY | soyaos secret set` and files written by
  // editors end with one that is not part of the value (C11).
  void drop_trailing_newline() noexcept;

 private:
  static Result<SecretBytes> allocate(std::size_t capacity);
  void release() noexcept;

  void* base_ = nullptr;
  std::size_t mapped_ = 0;  // bytes mapped (a whole number of pages), 0 when empty
  std::size_t size_ = 0;
};

}  // namespace soyaos
