// Errors are values: Result<T> holds a T or an Error carrying errno and a message that
// names the failing operation and its argument ("open /etc/passwd: No such file...").
// Library code returns these; only the CLI and the supervisor print them.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace soyaos {

struct Error {
  int err = 0;          // errno, 0 when the failure is not a system call's
  std::string message;  // what was being done, with its argument

  // "message: strerror(err)" or just "message".
  [[nodiscard]] std::string describe() const;
};

// Builds an Error from the current errno.
Error errno_error(std::string message);
// Builds an Error with an explicit errno (0 for logic errors).
Error make_error(std::string message, int err = 0);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}      // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace soyaos
