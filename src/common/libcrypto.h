// libcrypto, loaded with dlopen() where it is used (issue #16). Linking it made every soyaos
// process relocate and initialise it at start (3 377 symbol bindings, ~2.6 M instructions,
// ~1.3 ms of CPU) — `soyaos version`, a cache hit, every run — although what those need
// (Ed25519, random bytes, base64, constant-time compare, wiping) is libsodium's, which is
// linked anyway, and SHA-256 is Nettle's (common/digest.cc). libcrypto is used for: TLS interception (C11:
// certificates, with libssl, common/libssl.h), the OCI client's extra CA certificates, a
// registry CA file's check, encrypted minisign keys (scrypt), Ed25519 PEM keys in a layout
// other than the canonical one (moon/chain.cc).
//
// libcrypto_lazy.cc defines each libcrypto function soyaos calls, with the declaration of
// OpenSSL's headers (the compiler checks every signature against it), forwarding to the
// library's own; all are resolved when the library is loaded (common/dl_library.h), so a
// libcrypto lacking one is refused by load_libcrypto() itself. Callers that need it call
// load_libcrypto() first and fail cleanly with its error (exit 125 for a run, naming the
// library); a forwarder reached without it loads the library itself, and if that fails it
// prints the error and exits 125 (never continuing without what it asked for).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/result.h"

namespace soyaos {

// Loads libcrypto.so.3 once per process (thread-safe); later calls return the same result.
// Not in a Comet's child after clone3 (no dlopen there).
Status load_libcrypto();

// Whether load_libcrypto() (or a forwarder) has loaded libcrypto, without loading it. (A
// libcrypto mapped as libssl's or libcurl's dependency, or linked into a test, does not
// count until then: tests ask this to check that a path never loaded it.)
bool libcrypto_loaded();

}  // namespace soyaos
