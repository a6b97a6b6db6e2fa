#!/usr/bin/env bash
# Egress benchmarks for the Comet (issue #4), side by side in one run:
#   1. throughput: one stream of SIZE_MIB (default 1 GiB) from the agent to a host-side
#      sink mapped by dns.hosts, through the egress gateway, against the same client
#      straight on loopback and through a socat relay (target: gateway >= 0.5x direct), with
#      the CPU seconds per GiB of each stage (client, relay, sink) and what they bound;
#   2. connection set-up latency, p50/p99 over N connects (connect + a 1-byte round trip,
#      so the gateway's upstream connect is included), gateway against direct, socat and the
#      floor of any relay here (bench/min_relay.c, compiled with cc; target: gateway p50 <=
#      direct p50 + 100 us), and the supervisor's CPU per connection;
#   3. DNS stub: sequential A queries per second (raw UDP to 127.0.0.1:53 in the sandbox);
#   4. supervisor memory per open gateway connection (peak RSS with HOLD connections held
#      open, minus an idle run, from run_finished).
# The same python client runs in the sandbox and on the host, timing itself; the sink is
# the same python process for every path. Prints medians of RUNS runs and ratios.
# Needs socat (apt-get install -y socat) for the relay column; skipped without it.
source "$(dirname "$0")/lib.sh" egress
SIZE_MIB=${SIZE_MIB:-1024}
N=${N:-1000}
DNS_N=${DNS_N:-5000}
HOLD=${HOLD:-256}
RUNS=${RUNS:-5}
# BEFORE=path/to/an/older/soyaos: its gateway is measured too, interleaved in the same run
# (the machine's load moves; a before/after pair is only comparable side by side).
BEFORE=${BEFORE:-}
# Which parts to run (comma-separated): stream, connect, dns, memory.
SECTIONS=${SECTIONS:-stream,connect,dns,memory}
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }

# ---- the host side: one sink process, two listeners -----------------------------------------
# drain: reads everything (1 MiB recv_into), closes after EOF (so the client knows every
# byte arrived); ping: answers one byte with one byte, then waits for the client to close.
cat > "$work/sink.py" <<'PY'
import resource, socket, sys, threading

def listener():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    return s

def quiet(fn):
    def run(c):
        try:
            with c:
                fn(c)
        except OSError:  # a reset (the gateway closing a sandbox's leftovers) is not news
            pass
    return run

@quiet
def drain(c):
    # Answers with this thread's CPU seconds (user + system) after the EOF: the sink's share
    # of the CPU a GiB costs.
    buf = memoryview(bytearray(1 << 20))
    t0 = resource.getrusage(resource.RUSAGE_THREAD)
    while c.recv_into(buf):
        pass
    t1 = resource.getrusage(resource.RUSAGE_THREAD)
    c.sendall(b"%.6f" % (t1.ru_utime - t0.ru_utime + t1.ru_stime - t0.ru_stime))

@quiet
def ping(c):
    d = c.recv(1)
    if d:
        c.sendall(d)
        c.recv(1)

def serve(s, fn):
    while True:
        c, _ = s.accept()
        threading.Thread(target=fn, args=(c,), daemon=True).start()

d, p = listener(), listener()
with open(sys.argv[1], "w") as f:
    f.write("%d %d\n" % (d.getsockname()[1], p.getsockname()[1]))
threading.Thread(target=serve, args=(p, ping), daemon=True).start()
serve(d, drain)
PY

# ---- the client: the agent in the sandbox, and the same program on the host ---------------
mkdir -p "$work/pack"
cat > "$work/pack/main.py" <<'PY'
import os, socket, statistics, struct, sys, time

def addr_of(host, port):
    return socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4]

def stream(host, port, mib, cc=""):
    buf = b"\0" * (1 << 20)
    t0, c0 = time.perf_counter(), time.process_time()
    s = socket.socket()
    if cc:  # a congestion control other than the host's default (the "direct, cubic" row)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    s.connect(addr_of(host, port))
    for _ in range(int(mib)):
        s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    sink_cpu = b""
    while True:  # the sink answers its CPU seconds after it read everything, then closes
        d = s.recv(64)
        if not d:
            break
        sink_cpu += d
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    s.close()
    print("RESULT ok %d %.6f %.6f %s" % (int(mib) << 20, dt, cpu, sink_cpu.decode() or "0"), flush=True)

def connect(host, port, n):
    a = addr_of(host, port)
    lat = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        s = socket.socket()
        s.connect(a)
        s.sendall(b"?")
        s.recv(1)
        lat.append(time.perf_counter() - t0)
        s.close()
    lat.sort()
    p50 = lat[len(lat) // 2] * 1e6
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6
    print("RESULT ok %.1f %.1f" % (p50, p99), flush=True)

def dns(name, n):
    q = b""
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    t0 = time.perf_counter()
    for i in range(int(n)):
        qid = i & 0xFFFF
        s.sendto(struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + q, ("127.0.0.1", 53))
        while struct.unpack(">H", s.recv(512)[:2])[0] != qid:
            pass
    dt = time.perf_counter() - t0
    print("RESULT ok %.0f" % (int(n) / dt), flush=True)

def hold(host, port, n):
    a = addr_of(host, port)
    socks = []
    for _ in range(int(n)):
        s = socket.socket()
        s.connect(a)
        socks.append(s)
    time.sleep(1.0)  # let the gateway connect every one upstream
    for s in socks:
        s.close()
    print("RESULT ok %d" % len(socks), flush=True)

{"stream": stream, "connect": connect, "dns": dns, "hold": hold,
 "idle": lambda: print("RESULT ok", flush=True)}[sys.argv[1]](*sys.argv[2:])
PY

"$PY" "$work/sink.py" "$work/ports" &
pids+=($!)
for _ in $(seq 50); do [[ -s "$work/ports" ]] && break; sleep 0.1; done
read -r DRAIN PING < "$work/ports"

cat > "$work/pack/soyapack.yaml" <<YAML
soyapack: v0
name: egress-bench
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress:
    - {host: sink.test, port: $DRAIN, protocol: tcp}
    - {host: ping.test, port: $PING, protocol: tcp}
  fs: {read: [/workdir]}
  determinism_tier: read-only
resources: {timeout: 600s}
YAML
mkdir -p "$work/home"
cat > "$work/home/moon.yaml" <<YAML
dns:
  hosts:
    sink.test: 127.0.0.1
    ping.test: 127.0.0.1
YAML

direct() { "$PY" "$work/pack/main.py" "$@" | sed -n 's/^RESULT ok //p'; }

# The floor of any relay on this machine (connect section): bench/min_relay.c, a minimal C
# relay doing the gateway's syscalls (epoll, accept4, connect, splice through pooled pipes,
# shutdown, close) and nothing else — no checks, no events. What it adds to direct is what
# two loopback legs and the extra thread hand-offs cost here.
have_floor=0
if want connect && command -v cc >/dev/null && cc -O2 -o "$work/min_relay" bench/min_relay.c; then
  have_floor=1
  FLOOR_PING=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$work/min_relay" "$FLOOR_PING" "$PING" &
  floor_pid=$!
  pids+=($floor_pid)
fi

have_socat=0
if command -v socat >/dev/null; then
  have_socat=1
  RELAY=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  RELAY_PING=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  socat TCP-LISTEN:"$RELAY",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$DRAIN" &
  pids+=($!)
  socat TCP-LISTEN:"$RELAY_PING",bind=127.0.0.1,reuseaddr,fork,backlog=4096 TCP:127.0.0.1:"$PING" &
  pids+=($!)
  sleep 0.3
fi

if want stream; then
echo "== throughput: one stream of $SIZE_MIB MiB (median of $RUNS runs; $(load_note))"
# CPU per GiB, by stage: the client's process CPU (the agent in the gateway column), the sink
# thread's (it answers it after the EOF), and for the gateway the supervisor's (run_finished
# supervisor_cpu_ms of the run minus that of an idle run: the relay thread, nearly all of it).
# User + system time, so the loopback TCP work each stage's syscalls do is in its column.
# The host's TCP congestion control matters on loopback: BBR paces (an hrtimer per burst,
# smaller TSO bursts) and costs about twice the CPU per GiB of cubic here, so when the host's
# default is not cubic the direct path is measured both ways ("direct" is what an agent
# outside any sandbox gets).
HOST_CC=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
echo "  host TCP congestion control: $HOST_CC"
comet idle >/dev/null
IDLE_MS=$(run_finished supervisor_cpu_ms)
: > "$work/stream.txt"
check_stream() {  # RESULT-DETAIL NAME
  [[ -n "$1" ]] || { echo "  $2: no result (did the run fail?)" >&2; exit 1; }
}
gateway_stream() {  # LABEL
  r=$(comet stream sink.test "$DRAIN" "$SIZE_MIB"); check_stream "$r" "$1"
  echo "$1 $r $(run_finished supervisor_cpu_ms)" >> "$work/stream.txt"
  "$PY" - "$work/events.jsonl" "$SIZE_MIB" <<'PY'
import json, sys  # the gateway counted the bytes too
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
closed = [e["data"] for e in ev if e["type"] == "egress_closed"]
want = int(sys.argv[2]) << 20
if not closed or closed[0].get("bytes_out") != want:
    print("  WARNING: egress_closed says bytes_out=%s, expected %d" % (closed[0].get("bytes_out") if closed else None, want))
PY
}
for _ in $(seq "$RUNS"); do
  [[ -n "$BEFORE" ]] && SOYAOS=$BEFORE gateway_stream before
  gateway_stream gateway
  r=$(direct stream 127.0.0.1 "$DRAIN" "$SIZE_MIB"); check_stream "$r" direct; echo "direct $r $IDLE_MS" >> "$work/stream.txt"
  if [[ $HOST_CC != cubic ]]; then
    r=$(direct stream 127.0.0.1 "$DRAIN" "$SIZE_MIB" cubic); check_stream "$r" direct-cubic; echo "direct-cubic $r $IDLE_MS" >> "$work/stream.txt"
  fi
  if ((have_socat)); then
    r=$(direct stream 127.0.0.1 "$RELAY" "$SIZE_MIB"); check_stream "$r" socat; echo "socat $r $IDLE_MS" >> "$work/stream.txt"
  fi
done
"$PY" - "$work/stream.txt" "$IDLE_MS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    path, nbytes, dt, client, sink, sup = line.split()
    gib = float(nbytes) / (1 << 30)
    relay = (float(sup) - float(sys.argv[2])) / 1000 if path in ("gateway", "before") else 0.0
    rows.setdefault(path, []).append((float(nbytes) * 8 / float(dt) / 1e9, float(client) / gib, relay / gib, float(sink) / gib))
med = {p: [statistics.median(c) for c in zip(*r)] for p, r in rows.items()}
print("  %-16s %8s   %-37s" % ("", "Gbit/s", "CPU s per GiB: client  relay   sink  total"))
for p in ("direct", "direct-cubic", "before", "gateway", "socat"):
    if p in med:
        g, c, r, s = med[p]
        print("  %-16s %8.2f   %20.3f %6.3f %6.3f %6.3f" % (p, g, c, r, s, c + r + s))
g, d = med["gateway"], med["direct"]
print("  gateway/direct = %.2fx   (target >= 0.50x)%s%s" % (g[0] / d[0],
      ("   gateway/direct-cubic = %.2fx" % (g[0] / med["direct-cubic"][0])) if "direct-cubic" in med else "",
      ("   gateway/socat = %.2fx" % (g[0] / med["socat"][0])) if "socat" in med else ""))
if "before" in med:
    b = med["before"]
    print("  before -> now: %.2fx -> %.2fx of direct; relay CPU per GiB %.3f -> %.3f s" % (b[0] / d[0], g[0] / d[0], b[2], g[2]))
print("  relay CPU per GiB: %.3f s (%.1f%% of the gateway path's %.3f s)" % (g[2], 100 * g[2] / sum(g[1:]), sum(g[1:])))
# The bound: on 2 CPUs every stage's CPU seconds share two cores, so a GiB takes at least
# total/2 s; with a core per stage (16 CPUs) the slowest stage alone sets the pace.
for p in ("direct", "direct-cubic", "gateway"):
    if p not in med:
        continue
    c = med[p][1:]
    print("  %-8s CPU-bound estimate: 2 CPUs %.1f Gbit/s, a core per stage %.1f Gbit/s" %
          (p, 8 * 1.073741824 * 2 / sum(c), 8 * 1.073741824 / max(c)))
PY
fi

if want connect; then
echo "== connection set-up: connect + 1-byte round trip, N=$N (median over $RUNS runs of p50 / p99, us)"
# Also the supervisor's CPU per connection: run_finished supervisor_cpu_ms minus an idle run's, / N.
comet idle >/dev/null
IDLE_MS=$(run_finished supervisor_cpu_ms)
: > "$work/connect.txt"
gateway_connect() {  # LABEL
  local r
  r=$(comet connect ping.test "$PING" "$N")
  [[ -n "$r" ]] || { echo "  $1: no result (did the run fail?)" >&2; exit 1; }
  echo "$1 $r $(run_finished supervisor_cpu_ms)" >> "$work/connect.txt"
}
for round in $(seq "$RUNS"); do
  # The before/now order alternates: every run stores its events in the same Moon, which
  # grows, and the recorder's share of the supervisor's CPU with it (the later run of a pair
  # paid ~10 % more CPU per connection when the order was fixed).
  if [[ -n "$BEFORE" ]] && ((round % 2 == 1)); then SOYAOS=$BEFORE gateway_connect before; fi
  gateway_connect gateway
  if [[ -n "$BEFORE" ]] && ((round % 2 == 0)); then SOYAOS=$BEFORE gateway_connect before; fi
  echo "direct $(direct connect 127.0.0.1 "$PING" "$N") $IDLE_MS" >> "$work/connect.txt"
  if ((have_floor)); then  # its CPU in clock ticks (utime + stime), as ms
    t0=$(awk '{print $14 + $15}' "/proc/$floor_pid/stat")
    r=$(direct connect 127.0.0.1 "$FLOOR_PING" "$N")
    t1=$(awk '{print $14 + $15}' "/proc/$floor_pid/stat")
    echo "floor $r $(( IDLE_MS + (t1 - t0) * 1000 / $(getconf CLK_TCK) ))" >> "$work/connect.txt"
  fi
  if ((have_socat)); then echo "socat $(direct connect 127.0.0.1 "$RELAY_PING" "$N") $IDLE_MS" >> "$work/connect.txt"; fi
done
"$PY" - "$work/connect.txt" "$IDLE_MS" "$N" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    path, p50, p99, sup = line.split()
    cpu = (float(sup) - float(sys.argv[2])) * 1000 / int(sys.argv[3])
    rows.setdefault(path, []).append((float(p50), float(p99), cpu))
med = {p: [statistics.median(c) for c in zip(*r)] for p, r in rows.items()}
names = {"floor": "C relay (floor)"}
for p in ("direct", "floor", "before", "gateway", "socat"):
    if p in med:
        cpu = ("   supervisor CPU %5.0f us/connection" % med[p][2] if p in ("before", "gateway") else
               "   relay CPU      %5.0f us/connection" % med[p][2] if p == "floor" else "")
        print("  %-16s p50 %9.1f   p99 %9.1f%s" % (names.get(p, p), med[p][0], med[p][1], cpu))
g, d = med["gateway"][0], med["direct"][0]
if "floor" in med:
    print("  C relay (floor) - direct at p50 = %+.0f us: what two loopback legs cost here" % (med["floor"][0] - d))
if "before" in med:
    print("  before - direct at p50 = %+.0f us" % (med["before"][0] - d))
print("  gateway - direct at p50 = %+.0f us   (%.2fx; target <= +100 us)" % (g - d, g / d))
PY
fi

if want dns; then
echo "== DNS stub: sequential A queries over UDP, $DNS_N per run"
q=()
for _ in $(seq "$RUNS"); do q+=("$(comet dns sink.test "$DNS_N")"); done
printf '  %-28s %8.0f queries/s\n' "stub (median)" "$(median "${q[@]}")"
fi

if want memory; then
echo "== supervisor memory per open gateway connection ($HOLD held open)"
comet idle >/dev/null
idle=$(run_finished supervisor_peak_rss_kb)
held=$(comet hold ping.test "$PING" "$HOLD")
busy=$(run_finished supervisor_peak_rss_kb)
"$PY" -c "import sys; i,b,n=map(float,sys.argv[1:]); print('  peak RSS idle %.0f KiB, with %d connections %.0f KiB: %.1f KiB per connection' % (i, n, b, (b-i)/n if n else 0))" \
  "$idle" "$busy" "${held:-0}"
fi
