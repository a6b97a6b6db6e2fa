#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzzer.cc) with clang, ASan and UBSan in
# ./build-fuzz (or in FUZZ_BUILD_DIR, e.g. build-asan once scripts/sanitize.sh configured it:
# CI builds the fuzzed libraries once for both) and runs each for ${FUZZ_SECONDS:-60} seconds on a copy of its seed corpus
# (fuzz/corpus/NAME/, NAME = the target without "_fuzzer"), so the checked-in corpus is
# never modified, two fuzzers at a time (FUZZ_PARALLEL). Exits non-zero when a fuzzer found a
# crash, leak, timeout or out-of-memory (its log's tail is printed); the reproducer is left
# in build-fuzz/artifacts/NAME/.
#   FUZZ_SECONDS=600 scripts/fuzz.sh            # all fuzzers, 10 minutes each
#   scripts/fuzz.sh manifest                    # one fuzzer
#   FUZZ_JOBS=2 scripts/fuzz.sh                 # parallel workers per fuzzer
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_FUZZER=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-1}
PARALLEL=${FUZZ_PARALLEL:-2}
# -O1 with line tables: what libFuzzer's documentation builds with; -O2 -g took about twice
# as long to compile for no gain in a bounded run. NDEBUG as in the release build. The fuzzed
# libraries add -fsanitize=fuzzer-no-link themselves (fuzz/CMakeLists.txt).
SAN_FLAGS="-O1 -gline-tables-only -DNDEBUG -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=None -DSOYAOS_WERROR=ON -DSOYAOS_FUZZ=ON \
    -DCMAKE_C_FLAGS="$SAN_FLAGS" -DCMAKE_CXX_FLAGS="$SAN_FLAGS" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
elif ! grep -q '^SOYAOS_FUZZ:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  echo "fuzz: $BUILD_DIR is not configured with -DSOYAOS_FUZZ=ON (scripts/sanitize.sh configures build-asan so)" >&2
  exit 2
fi

targets=()
if (($#)); then
  for name in "$@"; do targets+=("${name%_fuzzer}_fuzzer"); done
else
  for src in fuzz/*_fuzzer.cc; do targets+=("$(basename "$src" .cc)"); done
fi
ninja -C "$BUILD_DIR" "${targets[@]}"

# One fuzzer per CPU at a time (FUZZ_PARALLEL, default 2): each run is single-threaded.
run_one() {
  local target=$1 name=${1%_fuzzer}
  local work="$BUILD_DIR/fuzz-work/$name" artifacts="$BUILD_DIR/artifacts/$name"
  rm -rf "$work"
  mkdir -p "$work" "$artifacts"
  if [[ -d "fuzz/corpus/$name" ]]; then cp -r "fuzz/corpus/$name/." "$work/"; fi
  local args=(-max_total_time="$SECONDS_PER_FUZZER" -max_len=65536 -timeout=10 -rss_limit_mb=2048
              -artifact_prefix="$artifacts/" -print_final_stats=1)
  if [[ -f "fuzz/$name.dict" ]]; then args+=(-dict="fuzz/$name.dict"); fi
  if ((JOBS > 1)); then args+=(-jobs="$JOBS" -workers="$JOBS"); fi
  local log="$BUILD_DIR/fuzz-work/$name.log"
  if UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
      "$BUILD_DIR/fuzz/$target" "${args[@]}" "$work" >"$log" 2>&1; then
    echo "fuzz: $target ${SECONDS_PER_FUZZER}s ok: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$') inputs"
  else
    tail -n 60 "$log" >&2
    echo "fuzz: $target FAILED; reproducer in $artifacts/, log $log" >&2
    # A CI machine's files are gone after the run: its log is all that is left, so the
    # reproducer is printed there too (base64; decode with `base64 -d > crash`).
    local unit
    unit=$(grep -o "Test unit written to [^ ]*" "$log" | tail -n 1 | sed 's/^Test unit written to //')
    if [[ -n "$unit" && -f "$unit" && $(stat -c %s "$unit") -le 16384 ]]; then
      echo "fuzz: $target reproducer ($(stat -c %s "$unit") bytes), base64:" >&2
      base64 -w 100 "$unit" >&2
    fi
    return 1
  fi
}

status=0
pids=()
for target in "${targets[@]}"; do
  run_one "$target" &
  pids+=($!)
  if ((${#pids[@]} >= PARALLEL)); then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
