#!/usr/bin/env bash
# Many at once (issue #16): N (default 50) concurrent `soyaos run --no-cache` of a python3
# pack that does nothing, against N concurrent bubblewrap runs of the same command with
# comparable namespaces; ROUNDS (default 3) batches of each, alternating. Prints runs per
# second (N / the time until the last of the batch is reaped), the whole tree's CPU per
# run (cpuacct, as bench/startup.sh), lost events (every run must have exactly one
# run_started and one run_finished in the Moon, and `soyaos moon check` must pass), and
# the supervisor's peak memory per run (run_finished.supervisor_peak_rss_kb).
#   bench/concurrent.sh            N=50 ROUNDS=3
#   GUARD=1 bench/concurrent.sh    also exit 1 when soyaos takes more than 2.5x bubblewrap's
#                                  time per batch (a gross regression only: see docs/benchmarks.md)
source "$(dirname "$0")/lib.sh" concurrent
N=${N:-50}
ROUNDS=${ROUNDS:-3}
export SOYAOS_HOME="$work/home"
noop_pack "$work/noop"
"$SOYAOS" run --no-cache "$work/noop" >/dev/null  # the Moon exists before the first batch

python3 - "$SOYAOS" "$work" "$N" "$ROUNDS" "${GUARD:-0}" <<'PY'
import json, os, statistics, subprocess, sys
from benchlib import alternating, spawn_batch
soyaos, work, n, rounds, guard = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
bwrap = ["/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
         "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
         "/usr/bin/python3", "-c", "pass"]
soy = [soyaos, "run", "--no-cache", os.path.join(work, "noop")]

cg = None  # cpuacct group for whole-tree CPU, when we can (root, cgroup v1 cpuacct)
base = "/sys/fs/cgroup/cpuacct"
if os.geteuid() == 0 and os.path.isfile(os.path.join(base, "cpuacct.usage")):
    try:
        cg = os.path.join(base, "soyaos-concurrent-%d" % os.getpid())
        os.mkdir(cg)
        open(os.path.join(cg, "cgroup.procs"), "w").write(str(os.getpid()))
    except OSError:
        cg = None
def cpu():
    return int(open(os.path.join(cg, "cpuacct.usage")).read()) if cg else None

def batch(name, argv):
    c0 = cpu()
    t0, t1, failed = spawn_batch(argv, os.environ, n)
    c1 = cpu()
    return t1 - t0, (c1 - c0) / n if c0 is not None else None, failed

load0 = open("/proc/loadavg").read().split()[:3]
res = alternating(rounds, [("soyaos", soy), ("bwrap", bwrap)], batch)
load1 = open("/proc/loadavg").read().split()[:3]
if cg:
    open(os.path.join(base, "cgroup.procs"), "w").write(str(os.getpid()))
    os.rmdir(cg)

print(f"== {n} concurrent runs, {rounds} batches each, load average {' '.join(load0)} -> {' '.join(load1)}")
for name in ("bwrap", "soyaos"):
    t = statistics.median(x[0] for x in res[name])
    c = [x[1] for x in res[name] if x[1] is not None]
    f = sum(x[2] for x in res[name])
    print(f"  {name:8} {n / t:7.1f} runs/s  (batch {t * 1000:7.0f} ms median)" +
          (f"  CPU {statistics.median(c) / 1e6:6.1f} ms per run" if c else "") + f"  failed runs: {f}")
ratio = statistics.median(x[0] for x in res["soyaos"]) / statistics.median(x[0] for x in res["bwrap"])
print(f"  soyaos/bwrap time per batch = {ratio:.2f}x")

# No lost events: every run that soyaos started has run_started and run_finished stored.
q = subprocess.run([soyaos, "scope", "query", "--type", "run_started", "--type", "run_finished", "--limit", "0",
                    "--format", "json"], capture_output=True, text=True, check=True)
by_run, rss = {}, []
for line in q.stdout.splitlines():
    if not line.startswith("{"):
        continue
    e = json.loads(line)
    d = e["data"]
    by_run.setdefault(d["run_id"], []).append(e["type"])
    if e["type"] == "run_finished" and "supervisor_peak_rss_kb" in d:
        rss.append(d["supervisor_peak_rss_kb"])
expected = n * rounds + 1
complete = sum(1 for t in by_run.values() if sorted(t) == ["run_finished", "run_started"])
check = subprocess.run([soyaos, "moon", "check"], capture_output=True, text=True)
print(f"  runs recorded complete: {complete} of {expected}; lost events: {2 * expected - sum(len(t) for t in by_run.values())}; "
      f"moon check: {'ok' if check.returncode == 0 else 'FAILED: ' + (check.stdout + check.stderr)[-500:]}")
print(f"  supervisor peak RSS per run: median {statistics.median(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB")
bad = complete != expected or check.returncode != 0 or any(x[2] for x in res["soyaos"])
if guard and ratio > 2.5:
    print("GUARD: soyaos took more than 2.5x bubblewrap's time per batch", file=sys.stderr)
    bad = True
sys.exit(1 if bad else 0)
PY
