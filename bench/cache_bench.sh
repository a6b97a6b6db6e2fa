#!/usr/bin/env bash
# Result cache benchmark (issue #6): the latency of `soyaos run` of a read-only pack when
# it runs in a Comet (--no-cache, the cold path) and when it is replayed from the cache
# (a hit), median of N runs each, and their ratio. The pack writes a line of stdout, a
# line of stderr and a 64 KiB file under /workdir/out, so a hit replays all three.
#   bench/cache_bench.sh [BUILD_DIR]        RUNS=N (default 30)
#   BEFORE=OLD_BINARY bench/cache_bench.sh  also the old binary's hit, in the same rounds
# Each hit stores a `cache_hit` event durably in the Moon (E4: one fsynced transaction),
# so the hit latency is bound by the disk's fsync latency as much as by the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SOYAOS=${SOYAOS:-$PWD/$BUILD/soyaos}
RUNS=${RUNS:-30}
work=$(mktemp -d /tmp/soyaos-cache-bench-XXXXXX)
chmod 755 "$work"
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$work"' EXIT
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

# Interleaved rounds (the machine's load hits every path alike; the order reversed every other
# round): a cold run, a hit, and
# `soyaos version` (the process-start floor), and with BEFORE=OLD_BINARY the old binary's hit
# too (its own home, primed the same way). Wall time from spawn to reap, and the process's
# CPU (user + system from wait4: a hit starts no child), median of RUNS each.
# The cold runs have a home of their own: each adds ~30 WAL frames and a checkpoint every
# few runs to moon.db, and in the hit's home they made its hits open a larger WAL and
# checkpoint more often than BEFORE's (measured: the same binary's hit 0.2-1 ms CPU slower
# in the home shared with the cold runs).
# Prime: the interpreter's digest is computed once, and the entry stored.
"$SOYAOS" run pack >/dev/null 2>&1
SOYAOS_HOME="$work/home-cold" "$SOYAOS" run --no-cache pack >/dev/null 2>&1
if [[ -n "${BEFORE:-}" ]]; then
  SOYAOS_HOME="$work/home-before" "$BEFORE" run pack >/dev/null 2>&1
fi
python3 - "$SOYAOS" "${BEFORE:-}" "$RUNS" "$work" > times.txt <<'PY'
import os, statistics, sys, time, shutil
soyaos, before, runs, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
paths = [("cold", soyaos, ["run", "--no-cache", "pack"], "home-cold"), ("hit", soyaos, ["run", "pack"], "home"),
         ("version", soyaos, ["version"], "home")]
if before:
    paths.append(("hit-before", before, ["run", "pack"], "home-before"))
res = {p[0]: ([], []) for p in paths}
null = os.open("/dev/null", os.O_RDWR)
for r in range(runs):
    # The order reversed every other round: the path measured right after the cold run paid
    # 0.3-1 ms more CPU (its exit work still running), which favoured whichever came later.
    for name, binary, args, home in (paths if r % 2 == 0 else paths[::-1]):
        shutil.rmtree(os.path.join(work, "soyaos-out"), ignore_errors=True)
        env = dict(os.environ, SOYAOS_HOME=os.path.join(work, home))
        t0 = time.monotonic()
        pid = os.posix_spawn(binary, [binary] + args, env, file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                             (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
        _, status, ru = os.wait4(pid, 0)
        t1 = time.monotonic()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{name}: exit {os.waitstatus_to_exitcode(status)}")
        res[name][0].append((t1 - t0) * 1e3)
        res[name][1].append((ru.ru_utime + ru.ru_stime) * 1e3)
for name, _, _, _ in paths:
    print(name, statistics.median(res[name][0]), statistics.median(res[name][1]))
PY
# A hit really is a hit (one cache_hit per replay), and a replay is byte-identical.
hits=$("$SOYAOS" scope query --type cache_hit --limit 0 --format json 2>/dev/null | wc -l)  # its "cursor: N" goes to stderr
"$SOYAOS" run --no-cache pack --out cold-out >cold.stdout 2>cold.stderr
"$SOYAOS" run pack --out hit-out >hit.stdout 2>hit.stderr
grep -v '^replayed from cache: run ' hit.stderr > hit.stderr.agent  # C10: the replay says so on stderr
cmp -s cold.stdout hit.stdout && cmp -s cold.stderr hit.stderr.agent && cmp -s cold-out/report.bin hit-out/report.bin \
  || { echo "replay differs from the run" >&2; exit 1; }
wall() { awk -v n="$1" '$1 == n {print $2}' times.txt; }
cpu() { awk -v n="$1" '$1 == n {print $3}' times.txt; }
printf 'runs per path        %d (hits recorded: %d)\n' "$RUNS" "$hits"
printf 'cold run (--no-cache) %8.2f ms wall (median)\n' "$(wall cold)"
printf 'cache hit             %8.2f ms wall, %6.2f ms CPU (median)\n' "$(wall hit)" "$(cpu hit)"
if [[ -n "${BEFORE:-}" ]]; then
  printf 'cache hit, BEFORE     %8.2f ms wall, %6.2f ms CPU (median)\n' "$(wall hit-before)" "$(cpu hit-before)"
fi
printf 'soyaos version        %8.2f ms wall, %6.2f ms CPU (median: process start floor)\n' "$(wall version)" "$(cpu version)"
printf 'cold / hit            %8.1fx\n' "$(echo "$(wall cold) / $(wall hit)" | bc -l)"
printf 'load average          %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
