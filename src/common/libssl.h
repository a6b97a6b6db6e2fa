// libssl, loaded with dlopen() the first time TLS is used (issue #16). Linking it made every
// soyaos process relocate it at start (~0.77 M instructions, ~0.33 ms of CPU: a cache hit,
// `version`, `scope`, and every run without TLS interception), although only a run that
// intercepts TLS (C11) and the OCI client (through libcurl, which loads it itself) use it.
//
// libssl_lazy.cc defines each libssl function soyaos calls, with the declaration of
// <openssl/ssl.h> (the compiler checks every signature against it), forwarding to the
// library's own. All of them are resolved when the library is loaded (common/dl_library.h),
// so a libssl that lacks one is refused by load_libssl() itself. soyaos itself therefore does not link libssl.so.3, nor
// libcrypto (loaded the same way where used, common/libcrypto.h: before libssl, which needs it).
//
// Callers that start TLS call load_libssl() first, in the main thread before any Comet is
// cloned, and fail cleanly with its error; a forwarder reached without it loads the
// library itself, and if that fails it prints the error and exits 125 (the run cannot go
// on without the layer it asked for; it never continues without it).
#pragma once

#include "common/result.h"

namespace soyaos {

// Loads libssl.so.3 once per process (thread-safe); later calls return the same result.
Status load_libssl();

}  // namespace soyaos
