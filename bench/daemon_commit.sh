#!/usr/bin/env bash
# Daemon group commit (issue #16, E4): N (default 50) concurrent `soyaos run --no-cache` of
# a python3 pack that does nothing, every run's events going through one `soyaos moon serve`
# (SOYAOS_MOON_SOCKET), ROUNDS (default 3) batches. The daemon runs under
# `strace -f --seccomp-bpf -e trace=fsync,fdatasync` (only those two syscalls stop it), so
# the script counts the daemon's fsyncs during each batch and prints fsyncs per run, the
# batch's wall time and the daemon's own group-commit line (transactions for batches).
# Checks that nothing is lost: every run has run_started and run_finished stored, and
# `soyaos moon check` passes on the daemon's home.
#   bench/daemon_commit.sh                 N=50 ROUNDS=3
#   BEFORE=old/soyaos bench/daemon_commit.sh   the old binary (client and daemon) in the same
#                                          rounds, alternating, each with a home of its own
source "$(dirname "$0")/lib.sh" daemon-commit
N=${N:-50}
ROUNDS=${ROUNDS:-3}
noop_pack "$work/noop"

python3 - "$SOYAOS" "${BEFORE:-}" "$work" "$N" "$ROUNDS" <<'PY'
import json, os, signal, statistics, subprocess, sys, time
from benchlib import alternating, spawn_batch
after, before, work, n, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
bins = [("after", after)] + ([("before", before)] if before else [])

def env_for(name):
    e = dict(os.environ)
    e["SOYAOS_HOME"] = os.path.join(work, name, "client-home")
    e["SOYAOS_MOON_SOCKET"] = os.path.join(work, name, "moon.sock")
    return e

def start_daemon(name, binary):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, SOYAOS_HOME=os.path.join(d, "home"))
    env.pop("SOYAOS_MOON_SOCKET", None)
    trace = os.path.join(d, "strace.%d" % time.monotonic_ns())
    log = open(os.path.join(d, "daemon.log"), "a")
    p = subprocess.Popen(["strace", "-f", "--seccomp-bpf", "-ttt", "-e", "trace=fsync,fdatasync", "-o", trace,
                          binary, "moon", "serve", "--socket", os.path.join(d, "moon.sock")],
                         env=env, stdout=log, stderr=log)
    for _ in range(500):
        st = subprocess.run([binary, "moon", "status", "--format", "json"], env=env_for(name), capture_output=True,
                            text=True)
        if st.returncode == 0:
            return p, trace, json.loads(st.stdout)["pid"]
        time.sleep(0.02)
    sys.exit("the daemon did not answer: " + open(os.path.join(d, "daemon.log")).read())

def batch(name, binary):
    # Wall-clock time: compared with strace's -ttt timestamps.
    return spawn_batch([binary, "run", "--no-cache", os.path.join(work, "noop")], env_for(name), n, clock=time.time)

daemons = {}
for name, binary in bins:
    daemons[name] = start_daemon(name, binary)
    subprocess.run([binary, "run", "--no-cache", os.path.join(work, "noop")], env=env_for(name),
                   capture_output=True, check=True)  # warm: the Moon's tables and key exist
load0 = open("/proc/loadavg").read().split()[:3]
res = alternating(rounds, bins, batch)
load1 = open("/proc/loadavg").read().split()[:3]

print(f"== {n} concurrent runs through one `moon serve`, {rounds} batches, load average {' '.join(load0)} -> {' '.join(load1)}")
bad = False
for name, binary in bins:
    p, trace, pid = daemons[name]
    os.kill(pid, signal.SIGTERM)  # the daemon itself (strace would only detach), then strace ends with it
    p.wait(timeout=60)
    stamps = []
    for line in open(trace):
        parts = line.split()
        if len(parts) > 2 and ("fsync(" in line or "fdatasync(" in line) and "resumed" not in line:
            stamps.append(float(parts[1]))
    per_run = [sum(1 for s in stamps if t0 <= s <= t1) / n for t0, t1, _ in res[name]]
    walls = [(t1 - t0) * 1000 for t0, t1, _ in res[name]]
    failed = sum(f for _, _, f in res[name])
    home = os.path.join(work, name, "home")
    henv = dict(os.environ, SOYAOS_HOME=home, SOYAOS_MOON_SOCKET="")
    q = subprocess.run([binary, "scope", "query", "--type", "run_started", "--type", "run_finished", "--limit", "0",
                        "--format", "json"], env=henv, capture_output=True, text=True, check=True)
    by_run = {}
    for line in q.stdout.splitlines():
        if line.startswith("{"):
            e = json.loads(line)
            by_run.setdefault(e["data"]["run_id"], []).append(e["type"])
    expected = n * rounds + 1
    complete = sum(1 for t in by_run.values() if sorted(t) == ["run_finished", "run_started"])
    check = subprocess.run([binary, "moon", "check"], env=henv, capture_output=True, text=True)
    gc = [l.split("group commit: ", 1)[1].strip() for l in open(os.path.join(work, name, "daemon.log"))
          if "group commit: " in l]
    print(f"  {name:7} daemon fsync+fdatasync per run: {statistics.median(per_run):5.2f} (batches: "
          f"{', '.join('%.2f' % x for x in per_run)}); batch wall {statistics.median(walls):7.0f} ms median; "
          f"failed runs {failed}")
    print(f"          runs recorded complete: {complete} of {expected}; moon check: "
          f"{'ok' if check.returncode == 0 else 'FAILED: ' + (check.stdout + check.stderr)[-300:]}")
    if gc:
        print(f"          group commit: {gc[-1]}")
    bad |= complete != expected or check.returncode != 0 or failed > 0
sys.exit(1 if bad else 0)
PY
