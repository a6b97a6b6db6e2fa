# Shared by the shell benchmarks (bench/egress_bench.sh, bench/secrets.sh): sourced, not run.
# Sets SOYAOS (the binary; override with SOYAOS=...), PY (the host's Debian python3), `work`
# (a fresh 0755 temporary directory named after NAME) and `pids` (background servers, killed
# with the directory removed on exit), and defines
#   comet ARGS...      soyaos run $work/pack -- ARGS with $work/home, events in $work/events.jsonl;
#                      prints the client's `RESULT ok` detail
#   median N...        the median of the numbers, formatted with $MEDIAN_FORMAT (default %.3f)
#   run_finished FIELD that field of the last run's run_finished event (0 when absent)
#   load_note          "load average X (Y cores)", to print beside the numbers
# Usage: source "$(dirname "$0")/lib.sh" NAME
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SOYAOS=${SOYAOS:-$PWD/build/soyaos}
PY=/usr/bin/python3
work=$(mktemp -d "/tmp/soyaos-$1-bench-XXXXXX")
chmod 755 "$work"
pids=()
bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap bench_cleanup EXIT

comet() {
  rm -f "$work/events.jsonl"
  SOYAOS_HOME="$work/home" "$SOYAOS" run "$work/pack" --no-cache --out "$work/out" \
    --events "$work/events.jsonl" -- "$@" | sed -n 's/^RESULT ok //p'
}

median() {
  "$PY" -c 'import statistics,sys; print(sys.argv[1] % statistics.median(map(float, sys.argv[2:])))' \
    "${MEDIAN_FORMAT:-%.3f}" "$@"
}

run_finished() {
  "$PY" -c '
import json, sys
last = {}
for line in open(sys.argv[1]):
    if line.strip():
        e = json.loads(line)
        if e.get("type") == "run_finished":
            last = e["data"]
print(last.get(sys.argv[2], 0))' "$work/events.jsonl" "$1"
}

load_note() { echo "load average $(cut -d' ' -f1 /proc/loadavg) ($(nproc) cores)"; }
