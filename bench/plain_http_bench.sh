#!/usr/bin/env bash
# What reading every request of a plain `http` entry costs (review 1 F3, docs/benchmarks.md
# "Plain http entries"): a plain http entry without rules or secrets, whose connections the
# gateway now hands to an exchange thread each (run_http_exchange) instead of splicing them
# after the first head. Side by side in one run, rounds alternating:
#   1. keepalive: request latency p50/p99 over N requests on ONE kept-alive connection;
#   2. fresh: request latency p50/p99 over N requests each on a NEW connection (connect +
#      request + response: the thread's start and join are in it);
# for the gateway of this build, of BEFORE (an older soyaos, when given) and the same client
# straight to the server on the host (direct). Also the supervisor's CPU per request
# (run_finished supervisor_cpu_ms of N requests minus that of one, over N - 1) and the load
# average at the start and the end.
# The server is one python process (a thread per connection, keep-alive HTTP/1.1).
source "$(dirname "$0")/lib.sh" plain-http
N=${N:-500}
RUNS=${RUNS:-3}
BEFORE=${BEFORE:-}
MODES=${MODES:-keepalive fresh}
MEDIAN_FORMAT=%.1f

cat > "$work/server.py" <<'PY'
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(4096)
with open(sys.argv[1], "w") as f:
    f.write("%d\n" % s.getsockname()[1])

def serve(c):
    try:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            _, _, buf = buf.partition(b"\r\n\r\n")
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    except OSError:
        pass
    finally:
        c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY

mkdir -p "$work/pack" "$work/home"
cat > "$work/pack/main.py" <<'PY'
import socket, sys, time

def open_conn(host, port):
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def request(s, host_field):
    s.sendall(b"GET /ping HTTP/1.1\r\nHost: " + host_field.encode() + b"\r\n\r\n")
    got = b""
    while not got.endswith(b"ok"):
        d = s.recv(4096)
        if not d:
            raise OSError("closed")
        got += d

def pct(lat):
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6

def keepalive(host, port, host_field, n):
    s = open_conn(host, port)
    lat = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        request(s, host_field)
        lat.append(time.perf_counter() - t0)
    print("RESULT ok %.1f %.1f" % pct(lat), flush=True)

def fresh(host, port, host_field, n):
    lat = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        s = open_conn(host, port)
        request(s, host_field)
        lat.append(time.perf_counter() - t0)
        s.close()
    print("RESULT ok %.1f %.1f" % pct(lat), flush=True)

{"keepalive": keepalive, "fresh": fresh}[sys.argv[1]](*sys.argv[2:])
PY

"$PY" "$work/server.py" "$work/port" &
pids+=($!)
for _ in $(seq 50); do [[ -s "$work/port" ]] && break; sleep 0.1; done
read -r PORT < "$work/port"

cat > "$work/pack/soyapack.yaml" <<YAML
soyapack: v0
name: plain-http-bench
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress:
    - {host: plain.bench.test, port: 80, protocol: http}
  fs: {read: [/workdir]}
  determinism_tier: read-only
resources: {timeout: 600s}
YAML
cat > "$work/home/moon.yaml" <<YAML
egress:
  connect_to:
    "plain.bench.test:80": "127.0.0.1:$PORT"
YAML

declare -A p50 p99 cpu base
measure() {  # NAME MODE: one run, its p50/p99 and the supervisor's CPU per request appended
  local name=$1 mode=$2 out
  if [[ $name == direct ]]; then
    out=$("$PY" "$work/pack/main.py" "$mode" 127.0.0.1 "$PORT" "plain.bench.test" "$N" | sed -n 's/^RESULT ok //p')
    cpu[$name.$mode]+=" 0"
  else
    if [[ -z ${base[$name.$mode]:-} ]]; then  # the run's own CPU: one request
      SOYAOS=${!name} comet "$mode" plain.bench.test 80 plain.bench.test 1 >/dev/null
      base[$name.$mode]=$(run_finished supervisor_cpu_ms)
    fi
    out=$(SOYAOS=${!name} comet "$mode" plain.bench.test 80 plain.bench.test "$N")
    cpu[$name.$mode]+=" $("$PY" -c "print(($(run_finished supervisor_cpu_ms) - ${base[$name.$mode]}) * 1000 / ($N - 1))")"
  fi
  [[ -n "$out" ]] || { echo "plain_http_bench: $name $mode failed" >&2; exit 1; }
  p50[$name.$mode]+=" ${out%% *}"
  p99[$name.$mode]+=" ${out##* }"
}

after=$SOYAOS
contenders=(after direct)
[[ -n "$BEFORE" ]] && contenders+=(BEFORE)
echo "plain http entry, N=$N, RUNS=$RUNS; start: $(load_note)"
for ((round = 0; round < RUNS; round++)); do
  order=("${contenders[@]}")
  ((round % 2 == 1)) && mapfile -t order < <(printf '%s\n' "${contenders[@]}" | tac)
  for mode in $MODES; do
    for name in "${order[@]}"; do measure "$name" "$mode"; done
  done
done
for mode in $MODES; do
  for name in "${contenders[@]}"; do
    label=$name; [[ $name == after ]] && label="this build"; [[ $name == BEFORE ]] && label="before"
    # shellcheck disable=SC2086
    printf '%-8s %-11s p50 %7s us  p99 %7s us  supervisor CPU/request %6s us\n' "$mode" "$label" \
      "$(median ${p50[$name.$mode]})" "$(median ${p99[$name.$mode]})" "$(median ${cpu[$name.$mode]})"
  done
done
echo "end: $(load_note)"
