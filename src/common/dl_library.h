// A shared library that soyaos loads only where it is used (issue #16: libcurl for a
// registry, libssl and libcrypto for TLS interception and what else needs OpenSSL,
// common/libcrypto.h), loaded and resolved in one step, before the work that needs it starts.
//
// Every function is resolved when the library is loaded, not at its first call: RTLD_NOW
// binds only the library's own references, so a function that we call and the library does
// not would otherwise be looked up at first use — in a thread of a running Comet, where a
// missing one could only kill the run after its agent started. Each is looked up by its
// symbol version when one is given (the ABI our headers describe, as the linker would have
// recorded it), and every missing one is named in the error. A failure is an error for the
// caller to refuse with (exit 125 for a run), never a crash mid-run. The handle is never
// closed: the functions stay valid for the life of the process.
#pragma once

#include <string>

namespace soyaos {

class DlLibrary {
 public:
  // dlopen(soname, RTLD_NOW | RTLD_LOCAL). `package` names the Debian package in the error;
  // `version` is the symbol version every function is looked up with (dlvsym), or nullptr
  // for unversioned lookups (dlsym).
  DlLibrary(const char* soname, const char* package, const char* version);

  // Resolves `name` into `out` (nullptr, and named in error(), when missing).
  template <typename F>
  void function(const char* name, F& out) {
    // dlsym returns an object pointer; the conversion to a function pointer is what POSIX
    // specifies for dlsym.
    out = reinterpret_cast<F>(symbol(name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  }

  // Empty when the library loaded and every function asked for so far resolved; else why
  // not: "cannot load SONAME (the PACKAGE package): dlerror" or "SONAME lacks a, b
  // (version V)".
  [[nodiscard]] std::string error() const;

 private:
  void* symbol(const char* name);

  void* handle_ = nullptr;
  const char* soname_;
  const char* version_;
  std::string load_error_;
  std::string missing_;
};

}  // namespace soyaos
