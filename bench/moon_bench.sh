#!/usr/bin/env bash
# Benchmark of the Moon in embedded mode (not a timed test; numbers go to docs/moon.md):
#   1. `soyaos pack push` and `pack pull` of a 50 MB pack (MB/s, wall time)
#   2. durable event ingest through moon::EventStore, 1000 events per transaction
#      (events/s; target >= 20,000/s)
#   3. `soyaos scope query` over 1,000,000 stored events (target < 1 s): by run, by type
#      (--limit 1000), by pack, and the default query (the last 1000 events)
#
# Usage: bench/moon_bench.sh [BUILD_DIR]   (default: build)
set -euo pipefail

build="${1:-build}"
soyaos="$build/soyaos"
ingest="$build/bench/moon_ingest"
[[ -x "$soyaos" ]] || { echo "no $soyaos: build first (cmake -S . -B $build -G Ninja && ninja -C $build)" >&2; exit 2; }
[[ -x "$ingest" ]] || { echo "no $ingest: build the bench targets (ninja -C $build moon_ingest)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export SOYAOS_HOME="$work/home"

# secs CMD...: runs CMD (stdout discarded), prints its wall time in seconds.
secs() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
fmt() { printf '%.3f' "$1"; }

echo "== environment: $(nproc) CPUs, $(uname -r), filesystem of $work: $(stat -f -c %T "$work")"

# 1. push / pull of a 50 MB pack: 50 files of 1 MB of random bytes plus the manifest.
pack="$work/big"
mkdir -p "$pack/data"
cat >"$pack/soyapack.yaml" <<'YAML'
soyapack: v0
name: big
version: 1.0.0
agent:
  runtime: python3
  entrypoint: main.py
capabilities:
  egress: []
  fs:
    read: [/workdir]
    write: [/workdir/out]
  determinism_tier: read-only
YAML
echo "print('big')" >"$pack/main.py"
for i in $(seq 1 50); do head -c 1048576 /dev/urandom >"$pack/data/part$i"; done
bytes=$(du -sb "$pack" | cut -f1)
mb=$(echo "$bytes / 1000000" | bc -l)
sync
t=$(secs "$soyaos" pack push "$pack")
echo "== push  $(fmt "$mb") MB: $(fmt "$t") s, $(fmt "$(echo "$mb / $t" | bc -l)") MB/s (archive, sha256, fsync, index)"
t=$(secs "$soyaos" pack push "$pack")
echo "== push again (already pushed): $(fmt "$t") s"
t=$(secs "$soyaos" pack pull big@1.0.0 -o "$work/pulled")
echo "== pull  $(fmt "$mb") MB: $(fmt "$t") s, $(fmt "$(echo "$mb / $t" | bc -l)") MB/s (verify sha256 while extracting)"
diff -r "$pack" "$work/pulled" >/dev/null && echo "   pulled tree identical"

# 2. durable ingest: 100,000 events, 1000 per transaction, into a fresh store.
echo "== durable ingest (fresh store):"
"$ingest" "$work/ingest" 100000 1000 | head -1 | sed 's/^/   /'

# 3. 1,000,000 stored events, then queries through the CLI.
echo "== filling 1,000,000 events (1000 runs, 50 packs, 4 types):"
out=$("$ingest" "$SOYAOS_HOME" 1000000 1000 1000)
echo "$out" | head -1 | sed 's/^/   /'
run=$(echo "$out" | sed -n 's/^run_id //p')
echo "   moon.db: $(du -sh "$SOYAOS_HOME/moon.db" | cut -f1)"
q() {
  local label="$1"; shift
  local n t
  n=$("$soyaos" scope query "$@" | wc -l)
  t=$(secs "$soyaos" scope query "$@")
  printf '   %-44s %6d lines  %s s\n' "$label" "$n" "$(fmt "$t")"
}
echo "== scope query over 1,000,000 events (wall time of the whole command):"
q "--run RUN (1000 events)" --run "$run"
q "--run RUN --format json" --run "$run" --format json
q "--type dns_query (last 1000 of 250,000)" --type dns_query
q "--pack pack7 --limit 100" --pack pack7 --limit 100
q "--since 1h (last 1000)" --since 1h
q "(no filter: last 1000)"
q "--type egress_opened --limit 0 (all 250,000)" --type egress_opened --limit 0 --format json
