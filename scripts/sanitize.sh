#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer.
#
# ./build-asan holds soyaos and the libraries built with ASan+UBSan (Debug). The unit tests
# link those libraries, so they are built and run there. The sandbox suites (integration,
# escape) drive the soyaos binary from the outside: they run the normal build's test
# programs (./build, made by scripts/setup.sh) against the sanitized soyaos through
# SOYAOS_TEST_BIN, so the supervisor, the Moon and the gateway run under the sanitizers
# while the ~60 gtest files of those suites are not compiled a second time.
#
# Left out by default: the rootless and daemon-mode copies and the compat corpus (the same
# supervisor code paths again; scripts/test.sh runs them in the normal build). Extra
# arguments go to both ctest calls, e.g. `scripts/sanitize.sh -R Egress`.
# The sandbox tests' agents are the system's interpreters, not instrumented.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null   # packages, and ./build with the sandbox suites' test programs
# clang, Debug, line tables only: the sanitizers' reports name file:line. clang compiles this
# tree about twice as fast as gcc with ASan+UBSan at -O0 (cmd_pack_test.cc: 14-16 s of CPU
# against 26 s; soyaos + unit_tests: 870 s against ~1500 s), and is already installed for
# the fuzzers. The normal build stays gcc, so the suite still sees both compilers.
if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' build-asan/CMakeCache.txt; then
  rm -rf build-asan   # configured with gcc by an older sanitize.sh: the compiler cannot change in place
fi
# SOYAOS_FUZZ: the fuzzers are built here too (FUZZ_BUILD_DIR=build-asan scripts/fuzz.sh, as CI
# does), on the same sanitized libraries: compiled once for both passes.
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSOYAOS_SANITIZE=ON \
  -DSOYAOS_FUZZ=ON -DSOYAOS_COMPAT_TESTS=OFF -DCMAKE_CXX_FLAGS_DEBUG="-gline-tables-only" -DCMAKE_C_FLAGS_DEBUG="-gline-tables-only" \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build build-asan -j2 --target soyaos unit_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
ctest --test-dir build-asan --output-on-failure -j2 -L unit "$@" || status=1
sanitized_soyaos="$PWD/build-asan/soyaos"
[[ -x "$sanitized_soyaos" ]] || { echo "sanitize: $sanitized_soyaos was not built" >&2; exit 1; }
SOYAOS_TEST_BIN="$sanitized_soyaos" SOYAOS_TEST_SANITIZED=1 \
  ctest --test-dir build --output-on-failure -j2 -L 'integration|escape' -LE 'rootless|daemon|compat' "$@" || status=1
exit $status
