#!/usr/bin/env bash
# Startup and observation benchmarks for the Comet (issue #3), side by side in one run:
#   1. startup: `soyaos run` of a python3 pack that does nothing, against bare
#      `/usr/bin/python3 -c pass` and bubblewrap with comparable namespaces;
#   2. observation: `import json, ssl, socket, urllib.request` (hundreds of path
#      syscalls) with and without path observation (SOYAOS_BENCH_UNOBSERVED=1);
#   3. each layer's setup cost and the supervisor's peak memory, from run_finished.
# Prints medians and ratios. Needs hyperfine and bubblewrap (scripts/setup.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
SOYAOS=${SOYAOS:-$PWD/build/soyaos}
RUNS=${RUNS:-40}
work=$(mktemp -d /tmp/soyaos-bench-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

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

echo "== startup: python3 pack that does nothing ($RUNS runs each, median wall time)"
hf startup "/usr/bin/python3 -c pass" "$BWRAP /usr/bin/python3 -c pass" "$SOYAOS run --no-cache $work/noop --out $work/out"
bare=$(median_ms "$work/startup.json" 0); bw=$(median_ms "$work/startup.json" 1); sy=$(median_ms "$work/startup.json" 2)
printf '  %-28s %8s ms\n' "bare python3" "$bare" "bwrap" "$bw" "soyaos run" "$sy"
python3 -c "import sys; b,w,s=map(float,sys.argv[1:]); print('  soyaos/bwrap = %.2fx   soyaos/bare = %.2fx   (target: soyaos/bwrap <= 1.5x)' % (s/w, s/b))" "$bare" "$bw" "$sy"

echo "== observation: $IMPORTS"
hf observe "/usr/bin/python3 -c '$IMPORTS'" "$SOYAOS run --no-cache $work/imports --out $work/out" \
  "env SOYAOS_BENCH_UNOBSERVED=1 $SOYAOS run --no-cache $work/imports --out $work/out"
bare=$(median_ms "$work/observe.json" 0); obs=$(median_ms "$work/observe.json" 1); un=$(median_ms "$work/observe.json" 2)
printf '  %-28s %8s ms\n' "bare python3" "$bare" "soyaos, observed" "$obs" "soyaos, unobserved" "$un"
python3 -c "import sys; o,u=map(float,sys.argv[1:]); print('  observed/unobserved = %.2fx   (target <= 1.20x)' % (o/u))" "$obs" "$un"

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
