#include "common/result.h"

#include <cstring>

namespace soyaos {

std::string Error::describe() const {
  if (err == 0) return message;
  return message + ": " + std::strerror(err);
}

Error errno_error(std::string message) { return Error{errno, std::move(message)}; }

Error make_error(std::string message, int err) { return Error{err, std::move(message)}; }

}  // namespace soyaos
