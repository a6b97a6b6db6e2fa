#!/usr/bin/env bash
# Egress benchmarks for the Comet (issue #4), side by side in one run:
#   1. throughput: one stream of SIZE_MIB (default 1 GiB) from the agent to a host-side
#      sink mapped by dns.hosts, through the egress gateway, against the same client
#      straight on loopback and through a socat relay (target: gateway >= 0.7x direct);
#   2. connection set-up latency, p50/p99 over N connects (connect + a 1-byte round trip,
#      so the gateway's upstream connect is included), gateway against direct and socat
#      (target: gateway p50 <= direct p50 + 150 us);
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

# ---- the host side: one sink process, two listeners -----------------------------------------
# drain: reads everything (1 MiB recv_into), closes after EOF (so the client knows every
# byte arrived); ping: answers one byte with one byte, then waits for the client to close.
cat > "$work/sink.py" <<'PY'
import socket, sys, threading

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
    buf = memoryview(bytearray(1 << 20))
    while c.recv_into(buf):
        pass

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

def stream(host, port, mib):
    buf = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    s = socket.create_connection((host, int(port)))
    for _ in range(int(mib)):
        s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the sink closes after it read everything
    dt = time.perf_counter() - t0
    s.close()
    print("RESULT ok %d %.6f" % (int(mib) << 20, dt), flush=True)

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

gbps() {  # "BYTES SECONDS" -> Gbit/s
  "$PY" -c 'import sys; b,s=map(float,sys.argv[1].split()); print("%.2f" % (b*8/s/1e9))' "$1"
}

echo "== throughput: one stream of $SIZE_MIB MiB (median of $RUNS runs, Gbit/s)"
g=(); d=(); s=()
check_stream() {  # RESULT-DETAIL NAME
  [[ -n "$1" ]] || { echo "  $2: no result (did the run fail?)" >&2; exit 1; }
}
for _ in $(seq "$RUNS"); do
  r=$(comet stream sink.test "$DRAIN" "$SIZE_MIB"); check_stream "$r" gateway; g+=("$(gbps "$r")")
  r=$(direct stream 127.0.0.1 "$DRAIN" "$SIZE_MIB"); check_stream "$r" direct; d+=("$(gbps "$r")")
  if ((have_socat)); then r=$(direct stream 127.0.0.1 "$RELAY" "$SIZE_MIB"); check_stream "$r" socat; s+=("$(gbps "$r")"); fi
done
G=$(median "${g[@]}"); D=$(median "${d[@]}")
printf '  %-28s %8s Gbit/s\n' "direct loopback" "$D" "gateway" "$G"
if ((have_socat)); then S=$(median "${s[@]}"); printf '  %-28s %8s Gbit/s\n' "socat relay" "$S"; fi
"$PY" -c "import sys; g,d=map(float,sys.argv[1:3]); s=float(sys.argv[3]) if len(sys.argv)>3 else 0; \
print('  gateway/direct = %.2fx%s   (target >= 0.70x)' % (g/d, ('   gateway/socat = %.2fx' % (g/s)) if s else ''))" \
  "$G" "$D" ${S:+"$S"}
# The gateway counted the bytes too.
"$PY" - "$work/events.jsonl" "$SIZE_MIB" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
closed = [e["data"] for e in ev if e["type"] == "egress_closed"]
want = int(sys.argv[2]) << 20
if closed and closed[0].get("bytes_out") != want:
    print("  WARNING: egress_closed says bytes_out=%s, expected %d" % (closed[0].get("bytes_out"), want))
PY

echo "== connection set-up: connect + 1-byte round trip, N=$N (median over $RUNS runs of p50 / p99, us)"
gp50=(); gp99=(); dp50=(); dp99=(); sp50=(); sp99=()
for _ in $(seq "$RUNS"); do
  read -r a b <<<"$(comet connect ping.test "$PING" "$N")"; gp50+=("$a"); gp99+=("$b")
  read -r a b <<<"$(direct connect 127.0.0.1 "$PING" "$N")"; dp50+=("$a"); dp99+=("$b")
  if ((have_socat)); then read -r a b <<<"$(direct connect 127.0.0.1 "$RELAY_PING" "$N")"; sp50+=("$a"); sp99+=("$b"); fi
done
GP50=$(median "${gp50[@]}"); GP99=$(median "${gp99[@]}"); DP50=$(median "${dp50[@]}"); DP99=$(median "${dp99[@]}")
printf '  %-28s p50 %9s   p99 %9s\n' "direct loopback" "$DP50" "$DP99" "gateway" "$GP50" "$GP99"
if ((have_socat)); then
  printf '  %-28s p50 %9s   p99 %9s\n' "socat relay (fork)" "$(median "${sp50[@]}")" "$(median "${sp99[@]}")"
fi
"$PY" -c "import sys; g,d=map(float,sys.argv[1:]); print('  gateway - direct at p50 = %+.0f us   (%.2fx; target <= +150 us)' % (g-d, g/d))" \
  "$GP50" "$DP50"

echo "== DNS stub: sequential A queries over UDP, $DNS_N per run"
q=()
for _ in $(seq "$RUNS"); do q+=("$(comet dns sink.test "$DNS_N")"); done
printf '  %-28s %8.0f queries/s\n' "stub (median)" "$(median "${q[@]}")"

echo "== supervisor memory per open gateway connection ($HOLD held open)"
comet idle >/dev/null
idle=$(run_finished supervisor_peak_rss_kb)
held=$(comet hold ping.test "$PING" "$HOLD")
busy=$(run_finished supervisor_peak_rss_kb)
"$PY" -c "import sys; i,b,n=map(float,sys.argv[1:]); print('  peak RSS idle %.0f KiB, with %d connections %.0f KiB: %.1f KiB per connection' % (i, n, b, (b-i)/n if n else 0))" \
  "$idle" "$busy" "${held:-0}"
