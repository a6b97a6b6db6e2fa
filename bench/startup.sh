#!/usr/bin/env bash
# Startup and observation benchmarks for the Comet (issues #3, #16), side by side in one run:
#   1. startup: `soyaos run --no-cache` of a python3 pack that does nothing, against bare
#      `/usr/bin/python3 -c pass` and bubblewrap with comparable namespaces, interleaved
#      round by round (bench/startup_phases.py): wall and CPU medians, ratios, and every
#      phase of the command named (SOYAOS_TRACE_PHASES=1, src/common/phase_trace.h), from
#      exec to exit, with the supervisor's CPU per phase;
#   2. what each command asks of the kernel (strace -f -c): syscalls, fsyncs, processes;
#   3. observation: `import json, ssl, socket, urllib.request` (hundreds of path
#      syscalls) with and without path observation (SOYAOS_BENCH_UNOBSERVED=1);
#   4. each layer's setup cost and the supervisor's peak memory, from run_finished.
# Prints medians and ratios. Needs hyperfine, bubblewrap and strace (scripts/setup.sh).
#   RUNS=N (default 40)   SECTIONS="startup syscalls observe layers" (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
SOYAOS=${SOYAOS:-$PWD/build/soyaos}
RUNS=${RUNS:-40}
SECTIONS=${SECTIONS:-startup syscalls observe layers}
work=$(mktemp -d /tmp/soyaos-bench-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
export SOYAOS_HOME="$work/home"  # a fresh Moon: nothing of the operator's is touched
want() { [[ " $SECTIONS " == *" $1 "* ]]; }

make_pack() {  # NAME CODE
  mkdir -p "$work/$1"
  printf '%s\n' "$2" > "$work/$1/main.py"
  cat > "$work/$1/soyapack.yaml" <<YAML
soyapack: v0
name: $1
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress: []
  fs: {read: [/workdir]}
  determinism_tier: read-only
YAML
}
make_pack noop "pass"
IMPORTS="import json, ssl, socket, urllib.request"
make_pack imports "$IMPORTS"

BWRAP="bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin --proc /proc --dev /dev"

hf() {  # NAME-OF-JSON COMMANDS...
  local out=$1; shift
  hyperfine -N --warmup 5 --runs "$RUNS" --export-json "$work/$out.json" "$@" >/dev/null 2>&1
}

median_ms() {  # JSON INDEX
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]; print("%.1f" % (r["median"]*1000))' "$1" "$2"
}

if want startup; then
  python3 bench/startup_phases.py --soyaos "$SOYAOS" --pack "$work/noop" --work "$work" --runs "$RUNS"
fi

if want syscalls; then
  echo "== what one run asks of the kernel (strace -f -c, every process and thread of the command)"
  count() {  # LABEL COMMAND...
    local label=$1; shift
    strace -f -qq -c -o "$work/strace.txt" "$@" >/dev/null 2>&1
    python3 - "$label" "$work/strace.txt" <<'PY'
import sys
label, path = sys.argv[1], sys.argv[2]
calls, total = {}, 0
for line in open(path):
    p = line.split()
    if len(p) >= 5 and p[-1] != "total" and p[3].isdigit():
        calls[p[-1]] = int(p[3])
    elif p and p[-1] == "total":
        total = int(p[3])
get = lambda *names: sum(calls.get(n, 0) for n in names)
print("  %-24s %6d syscalls  %3d fsync/fdatasync  %3d clone/clone3/fork  %3d execve  %4d openat  %3d mount" % (
    label, total, get("fsync", "fdatasync"), get("clone", "clone3", "fork", "vfork"), get("execve"),
    get("openat", "open"), get("mount", "mount_setattr", "move_mount")))
PY
  }
  "$SOYAOS" run --no-cache "$work/noop" --out "$work/out" >/dev/null 2>&1  # the Moon exists: a steady-state run
  count "direct python3" /usr/bin/python3 -c pass
  count "bwrap" $BWRAP /usr/bin/python3 -c pass
  count "soyaos run --no-cache" "$SOYAOS" run --no-cache "$work/noop" --out "$work/out"
fi

if want observe; then
echo "== observation: $IMPORTS"
hf observe "/usr/bin/python3 -c '$IMPORTS'" "$SOYAOS run --no-cache $work/imports --out $work/out" \
  "env SOYAOS_BENCH_UNOBSERVED=1 $SOYAOS run --no-cache $work/imports --out $work/out"
bare=$(median_ms "$work/observe.json" 0); obs=$(median_ms "$work/observe.json" 1); un=$(median_ms "$work/observe.json" 2)
printf '  %-28s %8s ms\n' "bare python3" "$bare" "soyaos, observed" "$obs" "soyaos, unobserved" "$un"
python3 -c "import sys; o,u=map(float,sys.argv[1:]); print('  observed/unobserved = %.2fx   (target <= 1.20x)' % (o/u))" "$obs" "$un"
fi

want layers || exit 0
echo "== per-layer setup cost and supervisor memory (median of 20 runs)"
for i in $(seq 20); do "$SOYAOS" run --no-cache "$work/imports" --out "$work/out" --events - | tail -1; done > "$work/events.jsonl"
python3 - "$work/events.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l)["data"] for l in open(sys.argv[1])]
steps = runs[0]["setup_us"].keys()
for s in steps:
    print("  %-28s %8.0f us" % (s, statistics.median(r["setup_us"][s] for r in runs)))
n = statistics.median(r["notifications"] for r in runs)
print("  %-28s %8.0f" % ("notifications per run", n))
print("  %-28s %8.0f KiB" % ("supervisor peak RSS", statistics.median(r["supervisor_peak_rss_kb"] for r in runs)))
PY
echo "  load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
