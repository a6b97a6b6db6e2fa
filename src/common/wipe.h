// Key material held in ordinary buffers (an Ed25519 seed in a std::array, a PEM private key
// in a std::string, its DER in a std::vector) is wiped before the buffer dies, on every path
// out of the scope that holds it, errors and early returns included: declare the buffer,
// then a WipeOnExit for it. (A value that lives longer, such as a secret handed to a run, is
// a SecretBytes, common/secret_bytes.h.)
#pragma once

#include <string.h>  // explicit_bzero

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace soyaos {

// explicit_bzero: the compiler may not drop the wipe of memory about to be freed. Strings and
// vectors are wiped up to their capacity (the bytes past size() may hold an earlier, longer
// value) and left empty.
template <class T, std::size_t N>
void wipe(std::array<T, N>& a) noexcept {
  explicit_bzero(a.data(), sizeof(T) * N);
}
inline void wipe(std::string& s) noexcept {
  s.resize(s.capacity());  // within the capacity: no allocation
  explicit_bzero(s.data(), s.size());
  s.clear();
}
template <class T>
void wipe(std::vector<T>& v) noexcept {
  v.resize(v.capacity());  // within the capacity: no allocation
  explicit_bzero(v.data(), sizeof(T) * v.size());
  v.clear();
}

template <class Buffer>
class [[nodiscard]] WipeOnExit {
 public:
  explicit WipeOnExit(Buffer& b) noexcept : b_(b) {}
  WipeOnExit(const WipeOnExit&) = delete;
  WipeOnExit& operator=(const WipeOnExit&) = delete;
  ~WipeOnExit() { wipe(b_); }

 private:
  Buffer& b_;
};

}  // namespace soyaos
