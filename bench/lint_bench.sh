#!/usr/bin/env bash
# Benchmark of `soyaos pack lint` (not a timed test): generates packs with 1k, 10k and
# 100k tools and as many egress entries (bench/gen_manifest.py), runs `soyaos pack lint`
# and `pack validate` on each under /usr/bin/time (wall time, peak RSS), and lint_bench,
# which times the lint engine alone on the same mix built in memory: packs over the
# parser's 4 MiB cap (kMaxManifestBytes) are refused by the CLI, so for them only
# lint_bench measures lint. Prints the growth ratio of lint time between sizes.
#
# Usage: bench/lint_bench.sh [BUILD_DIR]   (default: build; needs add_subdirectory(bench))
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
soyaos="$build/soyaos"
bench="$build/bench/lint_bench"
[[ -x "$soyaos" ]] || { echo "no $soyaos: build first (cmake -S . -B $build -G Ninja && ninja -C $build)" >&2; exit 2; }
[[ -x "$bench" ]] || { echo "no $bench: add add_subdirectory(bench) to CMakeLists.txt and build" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (GNU time)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
max_bytes=$((4 << 20))

# timed LABEL CMD...: prints "LABEL  WALL s PEAK KB  (exit N)"
timed() {
  local label="$1"; shift
  local rc=0
  /usr/bin/time -o "$work/time" -f '%e s %M KB' "$@" >/dev/null 2>&1 || rc=$?
  printf '  %-24s %s  (exit %s)\n' "$label" "$(tail -n1 "$work/time")" "$rc"
}

declare -A lint_ms
for n in 1000 10000 100000; do
  dir="$work/p$n"
  python3 "$here/gen_manifest.py" "$n" "$dir"
  bytes=$(stat -c %s "$dir/soyapack.yaml")
  echo "== $n tools + $n egress entries: soyapack.yaml $bytes bytes"
  if (( bytes <= max_bytes )); then
    timed "pack validate" "$soyaos" pack validate "$dir"
    timed "pack lint" "$soyaos" pack lint "$dir"
    timed "pack lint --strict" "$soyaos" pack lint "$dir" --strict
    timed "pack lint --format json" "$soyaos" pack lint "$dir" --format json
  else
    echo "  pack validate/lint       skipped: over the parser's 4 MiB cap (kMaxManifestBytes)"
  fi
  line="$("$bench" "$n")"
  echo "  lint_bench               $line"
  timed "lint_bench" "$bench" "$n"
  echo "  lint_bench --strict      $("$bench" "$n" --strict)"
  lint_ms[$n]="$(sed -E 's/.*lint ([0-9.]+) ms.*/\1/' <<<"$line")"
done

echo "== growth of lint time (engine only, best of 5)"
awk -v a="${lint_ms[1000]}" -v b="${lint_ms[10000]}" -v c="${lint_ms[100000]}" 'BEGIN {
  printf "  1k -> 10k: x%.1f   10k -> 100k: x%.1f   (x10 = linear)\n", (a > 0 ? b / a : 0), (b > 0 ? c / b : 0) }'
