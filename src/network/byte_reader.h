// A bounds-checked reader over one span, shared by the TLS parsers: every read fails
// (returns false) instead of running past the end. Internal to src/network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace soyaos::network {

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
  [[nodiscard]] size_t left() const { return b_.size() - at_; }
  [[nodiscard]] bool empty() const { return at_ == b_.size(); }
  bool u8(uint8_t& v) {
    if (left() < 1) return false;
    v = b_[at_++];
    return true;
  }
  bool u16(uint16_t& v) {
    if (left() < 2) return false;
    v = static_cast<uint16_t>((b_[at_] << 8) | b_[at_ + 1]);
    at_ += 2;
    return true;
  }
  bool bytes(size_t n, std::span<const uint8_t>& out) {
    if (left() < n) return false;
    out = b_.subspan(at_, n);
    at_ += n;
    return true;
  }
  // A vector with a 1- or 2-byte length prefix.
  bool vec8(std::span<const uint8_t>& out) {
    uint8_t n = 0;
    return u8(n) && bytes(n, out);
  }
  bool vec16(std::span<const uint8_t>& out) {
    uint16_t n = 0;
    return u16(n) && bytes(n, out);
  }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

}  // namespace soyaos::network
