#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in ./build-asan.
# The sandbox tests run the sanitized soyaos as supervisor (the agents are the system's
# interpreters, not instrumented).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null   # packages
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSOYAOS_SANITIZE=ON -DSOYAOS_COMPAT_TESTS=OFF \
  ${CMAKE_ARGS:-} >/dev/null
# Without the compat corpus (SOYAOS_COMPAT_TESTS=OFF): it runs third-party interpreters against
# the supervisor code paths the integration suite already covers here; scripts/test.sh runs it
# in the normal build.
cmake --build build-asan -j2
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j2 "$@"
