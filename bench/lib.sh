# Shared by the shell benchmarks (bench/egress_bench.sh, bench/secrets.sh, bench/plain_http_bench.sh, bench/concurrent.sh,
# bench/daemon_commit.sh, bench/startup_guard.sh, bench/instructions.sh): sourced, not run.
# Sets SOYAOS (the binary; override with SOYAOS=...), PY (the host's Debian python3), `work`
# (a fresh 0755 temporary directory named after NAME) and `pids` (background servers, killed
# with the directory removed on exit), and defines
#   comet ARGS...      soyaos run $work/pack -- ARGS with $work/home, events in $work/events.jsonl;
#                      prints the client's `RESULT ok` detail
#   median N...        the median of the numbers, formatted with $MEDIAN_FORMAT (default %.3f)
#   run_finished FIELD that field of the last run's run_finished event (0 when absent)
#   load_note          "load average X (Y cores)", to print beside the numbers
#   noop_pack DIR      writes the python3 pack that does nothing (start-up and concurrency)
# and, for the Python part of a benchmark, the module `benchlib` (on PYTHONPATH):
#   spawn_batch(argv, env, n, clock=time.monotonic)
#                                 n concurrent argv (stdio /dev/null), all reaped:
#                                 (clock() at the start, clock() at the end, failed runs)
#   alternating(rounds, contenders, measure)
#                                 the round loop: `rounds` rounds of every (name, what) in
#                                 contenders, the order reversed every other round (the
#                                 machine's load hits each alike); {name: [measure(name, what)]}
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

noop_pack() {
  mkdir -p "$1"
  echo pass > "$1/main.py"
  cat > "$1/soyapack.yaml" <<'YAML'
soyapack: v0
name: noop
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress: []
  fs: {read: [/workdir]}
  determinism_tier: read-only
YAML
}

mkdir -p "$work/.benchlib"
cat > "$work/.benchlib/benchlib.py" <<'PY'
import os, time

def spawn_batch(argv, env, n, clock=time.monotonic):
    fa = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0), (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
    t0 = clock()
    pids = [os.posix_spawn(argv[0], argv, env, file_actions=fa) for _ in range(n)]
    failed = 0
    for p in pids:
        _, st = os.waitpid(p, 0)
        failed += os.waitstatus_to_exitcode(st) != 0
    return t0, clock(), failed

def alternating(rounds, contenders, measure):
    res = {name: [] for name, _ in contenders}
    for r in range(rounds):
        for name, what in (contenders if r % 2 == 0 else list(reversed(contenders))):
            res[name].append(measure(name, what))
    return res
PY
export PYTHONPATH="$work/.benchlib${PYTHONPATH:+:$PYTHONPATH}"
