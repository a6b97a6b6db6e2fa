#!/usr/bin/env bash
# Result cache benchmark (issue #6): the latency of `soyaos run` of a read-only pack when
# it runs in a Comet (--no-cache, the cold path) and when it is replayed from the cache
# (a hit), median of N runs each, and their ratio. The pack writes a line of stdout, a
# line of stderr and a 64 KiB file under /workdir/out, so a hit replays all three.
#   bench/cache_bench.sh [BUILD_DIR]        RUNS=N (default 30)
# Each hit stores a `cache_hit` event durably in the Moon (E4: one fsynced transaction),
# so the hit latency is bound by the disk's fsync latency as much as by the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SOYAOS=${SOYAOS:-$PWD/$BUILD/soyaos}
RUNS=${RUNS:-30}
work=$(mktemp -d /tmp/soyaos-cache-bench-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
export SOYAOS_HOME="$work/home"

mkdir -p "$work/pack"
cat > "$work/pack/main.py" <<'PY'
import sys
print("summary: 42 lines")
print("note: cached", file=sys.stderr)
with open("/workdir/out/report.bin", "wb") as f:
    f.write(bytes(range(256)) * 256)
PY
cat > "$work/pack/soyapack.yaml" <<'YAML'
soyapack: v0
name: cache-bench
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress: []
  fs: {read: [/workdir], write: [/workdir/out]}
  determinism_tier: read-only
YAML
cd "$work"

now_us() { echo $(( $(date +%s%N) / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2] + a[NR/2+1]) / 2)}'; }

# Prime: the interpreter's digest is computed once, and the entry stored.
"$SOYAOS" run pack >/dev/null 2>&1

: > cold.txt
for _ in $(seq "$RUNS"); do
  t0=$(now_us); "$SOYAOS" run --no-cache pack >/dev/null 2>&1; t1=$(now_us)
  echo $((t1 - t0)) >> cold.txt
done
: > hit.txt
for _ in $(seq "$RUNS"); do
  t0=$(now_us); "$SOYAOS" run pack >/dev/null 2>&1; t1=$(now_us)
  echo $((t1 - t0)) >> hit.txt
done
# A hit really is a hit (one cache_hit per replay), and a replay is byte-identical.
hits=$("$SOYAOS" scope query --type cache_hit --limit 0 --format json | wc -l)
"$SOYAOS" run --no-cache pack --out cold-out >cold.stdout 2>cold.stderr
"$SOYAOS" run pack --out hit-out >hit.stdout 2>hit.stderr
grep -v '^replayed from cache: run ' hit.stderr > hit.stderr.agent  # C10: the replay says so on stderr
cmp -s cold.stdout hit.stdout && cmp -s cold.stderr hit.stderr.agent && cmp -s cold-out/report.bin hit-out/report.bin \
  || { echo "replay differs from the run" >&2; exit 1; }
# A version that does nothing but start: the floor under both paths.
: > version.txt
for _ in $(seq "$RUNS"); do
  t0=$(now_us); "$SOYAOS" version >/dev/null; t1=$(now_us)
  echo $((t1 - t0)) >> version.txt
done

cold=$(median < cold.txt); hit=$(median < hit.txt); floor=$(median < version.txt)
printf 'runs per path        %d (hits recorded: %d)\n' "$RUNS" "$hits"
printf 'cold run (--no-cache) %8.2f ms (median)\n' "$(echo "$cold / 1000" | bc -l)"
printf 'cache hit             %8.2f ms (median)\n' "$(echo "$hit / 1000" | bc -l)"
printf 'soyaos version        %8.2f ms (median: process start floor)\n' "$(echo "$floor / 1000" | bc -l)"
printf 'cold / hit            %8.1fx\n' "$(echo "$cold / $hit" | bc -l)"
printf 'load average          %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
