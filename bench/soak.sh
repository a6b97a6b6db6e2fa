#!/usr/bin/env bash
# The soak of issue #15 (not a ctest test): N concurrent hostile agents for D seconds, each slot
# starting a new Comet as soon as its last one ended, every agent flooding at once:
#   - violations: /etc/shadow over and over plus distinct long undeclared paths (fs, read);
#   - outputs: a stdout flood, and /workdir/out filled to its write_quota, emptied, refilled;
#   - connections: an allowed entry (soak.test:80, sent by egress.connect_to to a local
#     accept-and-close server) and undeclared destinations (TEST-NET addresses: refused in
#     the sandbox's own netns, they never leave it);
#   - DNS names: a new undeclared name per query (NXDOMAIN, a violation each);
#   - memory: every agent holds a quarter of its limit (heap + memfd); every fifth slot's agents
#     then grow a memfd past `memory` (as root the run's cgroup kills them: exit 137).
# Measured on the host while it runs (one sample per second, python, bench/soak.sh's own):
#   - MemAvailable (largest fall) and Shmem (largest rise) against the baseline, and what
#     is left of both 5 s after the last run;
#   - the supervisors' peak RSS: every run's run_finished.supervisor_peak_rss_kb, and the
#     VmHWM of every live `soyaos` process, sampled;
#   - responsiveness: the wall time of running /bin/true, once a second.
# Then checks that every run ended with its events stored: per run id, `soyaos scope query
# --run ID --type run_finished` finds exactly one event in the Moon. Exits 1 when a run has
# none, or when a run ended 124/125 (hung or could not start).
#
# Usage: bench/soak.sh [N=20] [D=300]   (e.g. bench/soak.sh 20 60 for a shorter pass)
# Env:   SOYAOS (binary, default build/soyaos), RUN_S (seconds per agent, default 30),
#        MEMORY (resources.memory, default 64Mi), QUOTA (write_quota, default 8Mi),
#        BASELINE_S (seconds sampled before the first Comet, default 10), KEEP=1 keeps the
#        work directory.
# Only loopback and namespaces the Comets create are touched.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}
D=${2:-300}
RUN_S=${RUN_S:-30}
BASELINE_S=${BASELINE_S:-10}
MEMORY=${MEMORY:-64Mi}
QUOTA=${QUOTA:-8Mi}
SOYAOS=${SOYAOS:-$PWD/build/soyaos}
PY=/usr/bin/python3
[[ -x "$SOYAOS" ]] || { echo "soak: no soyaos at $SOYAOS (build it first)" >&2; exit 2; }

work=$(mktemp -d /tmp/soyaos-soak-XXXXXX)
chmod 755 "$work"
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "${KEEP:-0}" == 1 ]]; then echo "soak: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- host side: an accept-and-close server for the allowed entry -----------------------------
cat > "$work/server.py" <<'PY'
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(4096)
open(sys.argv[1], "w").write("%d\n" % s.getsockname()[1])
while True:
    c, _ = s.accept()
    try:
        c.sendall(b"soak\n")
    except OSError:
        pass
    c.close()
PY
"$PY" "$work/server.py" "$work/port" &
bg+=($!)
for _ in $(seq 50); do [[ -s "$work/port" ]] && break; sleep 0.1; done
PORT=$(cat "$work/port")

# ---- the hostile agent -----------------------------------------------------------------------
mkdir -p "$work/pack" "$work/home" "$work/runs"
cat > "$work/pack/agent.py" <<'PY'
import errno, os, socket, sys, threading, time

seconds, hog = float(sys.argv[1]), sys.argv[2] == "hog"
stop = time.time() + seconds
count = {"violations": 0, "lines": 0, "files": 0, "connects": 0, "refused": 0, "names": 0}

def violations():
    pad = "v" * 2000
    n = 0
    while time.time() < stop:
        for path in ("/etc/shadow", "/root/.ssh/id_rsa", "/etc/soak-%d-%s" % (n, pad)):
            try:
                os.open(path, os.O_RDONLY)
            except OSError:
                count["violations"] += 1
        n += 1

def outputs():
    block = b"o" * 4096
    while time.time() < stop:
        made = []
        try:
            for i in range(100000):
                p = "/workdir/out/f%d" % i
                with open(p, "wb") as f:
                    f.write(block)
                made.append(p)
                count["files"] += 1
                if time.time() >= stop:
                    return
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
        for p in made:
            os.unlink(p)

def stdout_flood():
    line = "x" * 200 + "\n"
    while time.time() < stop:
        sys.stdout.write(line * 50)
        count["lines"] += 50

def connections():
    n = 0
    while time.time() < stop:
        try:
            with socket.create_connection(("soak.test", 80), timeout=5) as s:
                s.recv(16)
            count["connects"] += 1
        except OSError:
            pass
        try:  # TEST-NET-3, undeclared: refused inside the sandbox's netns (a violation)
            with socket.create_connection(("203.0.113.%d" % (1 + n % 250), 443), timeout=2):
                pass
        except OSError:
            count["refused"] += 1
        n += 1

def names():
    n = 0
    while time.time() < stop:
        try:
            socket.getaddrinfo("n%d-%d.soak-flood.test" % (os.getpid(), n), 443)
        except OSError:
            count["names"] += 1
        n += 1

def memory(limit_mib):
    size = (limit_mib // 8) << 20
    held = bytearray(size)
    held[::4096] = b"m" * (size // 4096)  # resident, page by page
    fd = os.memfd_create("soak")
    os.write(fd, b"s" * ((limit_mib // 8) << 20))
    if hog:  # past the limit: as root the cgroup ends the run (137)
        while time.time() < stop:
            os.write(fd, b"h" * (4 << 20))
    while time.time() < stop:
        time.sleep(0.2)
    del held

threading.stack_size(256 << 10)  # thread stacks count against RLIMIT_DATA (= resources.memory)
threads = [threading.Thread(target=f, daemon=True) for f in (violations, outputs, stdout_flood, connections, names)]
threads.append(threading.Thread(target=memory, args=(int(sys.argv[3]),), daemon=True))
for t in threads:
    t.start()
for t in threads:
    t.join(max(0.0, stop - time.time()) + 5)
sys.stdout.write("\nSOAK %s\n" % " ".join("%s=%d" % kv for kv in sorted(count.items())))
sys.stdout.flush()
PY
cat > "$work/pack/soyapack.yaml" <<YAML
soyapack: v0
name: soak-hostile
version: 0.1.0
agent: {runtime: python3, entrypoint: agent.py}
capabilities:
  egress:
    - {host: soak.test, port: 80, protocol: tcp}
  fs: {read: [/workdir], write: [/workdir/out]}
  determinism_tier: side-effect
resources: {memory: $MEMORY, write_quota: $QUOTA, timeout: $((RUN_S + 60))s}
YAML
cat > "$work/home/moon.yaml" <<YAML
dns:
  hosts:
    soak.test: 127.0.0.1
egress:
  connect_to:
    "soak.test:80": "127.0.0.1:$PORT"
YAML
export SOYAOS_HOME="$work/home"
mem_mib=$("$PY" -c 'import sys; v=sys.argv[1]; print(int(v[:-2]) * (1024 if v.endswith("Gi") else 1) if v[-2:] in ("Mi","Gi") else 64)' "$MEMORY")

# ---- the host sampler ------------------------------------------------------------------------
cat > "$work/sampler.py" <<'PY'
import json, os, subprocess, sys, time

def meminfo():
    out = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0])
    return out

def soyaos_hwm():
    best = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open("/proc/%s/comm" % pid).read().strip() != "soyaos":
                continue
            for line in open("/proc/%s/status" % pid):
                if line.startswith("VmHWM:"):
                    best = max(best, int(line.split()[1]))
        except OSError:
            pass
    return best

base = meminfo()
samples = []
stop_file = sys.argv[2]
while not os.path.exists(stop_file):
    t0 = time.perf_counter()
    subprocess.run(["/bin/true"])
    lat = (time.perf_counter() - t0) * 1000
    m = meminfo()
    samples.append({"t": time.time(), "true_ms": lat, "soak": os.path.exists(sys.argv[3]), "avail": m["MemAvailable"], "shmem": m["Shmem"],
                    "hwm": soyaos_hwm()})
    time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
time.sleep(5)
end = meminfo()
json.dump({"base": base, "end": end, "samples": samples}, open(sys.argv[1], "w"))
PY
"$PY" "$work/sampler.py" "$work/samples.json" "$work/stop" "$work/soak-started" &
sampler=$!
bg+=($sampler)
sleep "$BASELINE_S"  # the host before the first Comet (the machine may be busy with other work)
touch "$work/soak-started"

# ---- the slots -------------------------------------------------------------------------------
end_at=$(( $(date +%s) + D ))
slot() {  # SLOT: runs Comets back to back until the deadline
  local i=$1 k=0 now left secs mode
  mode=calm
  (( i % 5 == 0 )) && mode=hog
  while now=$(date +%s); (( now < end_at )); do
    left=$(( end_at - now ))
    secs=$(( left < RUN_S ? left : RUN_S ))
    (( secs < 5 )) && secs=5
    local tag="$i-$k"
    local rc=0
    "$SOYAOS" run "$work/pack" --no-cache --out "$work/runs/out-$tag" --events "$work/runs/ev-$tag.jsonl" \
      -- "$secs" "$mode" "$mem_mib" >/dev/null 2>"$work/runs/err-$tag" || rc=$?
    echo "$tag $mode $rc" >> "$work/runs/exits"
    rm -rf "$work/runs/out-$tag"
    k=$((k + 1))
  done
}
echo "soak: $N agents for ${D}s (runs of ${RUN_S}s, memory $MEMORY, write_quota $QUOTA), work in $work"
started=$(date +%s)
slots=()
for i in $(seq 0 $((N - 1))); do
  slot "$i" &
  slots+=($!)
done
for p in "${slots[@]}"; do wait "$p" || true; done
elapsed=$(( $(date +%s) - started ))
touch "$work/stop"
wait "$sampler" || true

# ---- checks and the summary ------------------------------------------------------------------
"$PY" - "$work" "$SOYAOS" "$N" "$D" "$elapsed" <<'PY'
import collections, glob, json, os, statistics, subprocess, sys

work, soyaos, n, d, elapsed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
exits = collections.Counter()
bad_exit = []
for line in open(os.path.join(work, "runs", "exits")):
    tag, mode, rc = line.split()
    exits["%s:%s" % (mode, rc)] += 1
    if rc in ("124", "125"):
        bad_exit.append(tag)

runs, missing, rss, violations, dropped = [], [], [], 0, collections.Counter()
exceeded = collections.Counter()
for path in sorted(glob.glob(os.path.join(work, "runs", "ev-*.jsonl"))):
    run_id, finished = None, None
    with open(path, "rb") as f:
        for raw in f:
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            if e.get("type") == "run_started":
                run_id = e["data"].get("run_id")
            elif e.get("type") == "run_finished":
                finished = e["data"]
            elif e.get("type") == "limit_exceeded":
                exceeded[e["data"].get("limit", "?")] += 1
    tag = os.path.basename(path)[3:-6]
    if run_id is None:
        missing.append(tag + " (no run_started in --events)")
        continue
    runs.append(run_id)
    q = subprocess.run([soyaos, "scope", "query", "--run", run_id, "--type", "run_finished", "--format", "json",
                        "--limit", "0"], capture_output=True, text=True)
    stored = [l for l in q.stdout.splitlines() if l.strip()]
    if q.returncode != 0 or len(stored) != 1:
        missing.append("%s run %s: %d run_finished stored (rc %d)" % (tag, run_id, len(stored), q.returncode))
    if finished is None:
        missing.append("%s run %s: no run_finished in --events" % (tag, run_id))
        continue
    if finished.get("supervisor_peak_rss_kb"):
        rss.append(finished["supervisor_peak_rss_kb"])
    violations += finished.get("violations", 0)
    for k, v in (finished.get("events_dropped") or {}).items():
        dropped[k] += v

s = json.load(open(os.path.join(work, "samples.json")))
base, end, samples = s["base"], s["end"], s["samples"]
lat0 = sorted(x["true_ms"] for x in samples if not x["soak"])
samples = [x for x in samples if x["soak"]]
lat = sorted(x["true_ms"] for x in samples)
pct = lambda xs, p: xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0
mib = lambda kib: kib / 1024.0
avail_fall = max((base["MemAvailable"] - x["avail"] for x in samples), default=0)
shmem_rise = max((x["shmem"] - base["Shmem"] for x in samples), default=0)
print("soak: %d agents, %d s asked, %d s taken, %d runs; exits by mode:rc %s" %
      (n, d, elapsed, len(runs), ", ".join("%s x%d" % kv for kv in sorted(exits.items()))))
print("host MemAvailable: base %.0f MiB, largest fall %.0f MiB, 5 s after the end %+.0f MiB"
      " (the whole machine: other work moves it too)" %
      (mib(base["MemAvailable"]), mib(max(avail_fall, 0)), mib(end["MemAvailable"] - base["MemAvailable"])))
print("host Shmem: base %.0f MiB, largest rise %.0f MiB, 5 s after the end %+.0f MiB" %
      (mib(base["Shmem"]), mib(shmem_rise), mib(end["Shmem"] - base["Shmem"])))
if rss:
    rs = sorted(rss)
    print("supervisor peak RSS (run_finished): median %.1f MiB, p99 %.1f MiB, max %.1f MiB over %d runs" %
          (mib(statistics.median(rs)), mib(pct(rs, 0.99)), mib(rs[-1]), len(rs)))
print("supervisor VmHWM sampled: max %.1f MiB" % mib(max((x["hwm"] for x in samples), default=0)))
print("host responsiveness (/bin/true each second): p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d samples;"
      " before the soak p50 %.1f ms, max %.1f ms over %d" %
      (pct(lat, 0.5), pct(lat, 0.99), lat[-1] if lat else 0, len(lat), pct(lat0, 0.5), lat0[-1] if lat0 else 0,
       len(lat0)))
print("host load average at the end: %s" % open("/proc/loadavg").read().split()[:3])
print("violations counted %d; limit_exceeded events %s; events dropped past the caps: %s" %
      (violations, dict(exceeded) if exceeded else "none", dict(dropped) if dropped else "none"))
print("runs with their run_finished stored in the Moon: %d/%d" % (len(runs) - len([m for m in missing if "stored" in m]), len(runs)))
for m in missing[:20]:
    print("  MISSING " + m)
for t in bad_exit[:20]:
    print("  HUNG/NOT STARTED run " + t + ": " + open(os.path.join(work, "runs", "err-" + t), errors="replace").read()[-300:])
sys.exit(1 if missing or bad_exit else 0)
PY
