#!/usr/bin/env bash
# TLS interception benchmarks (issue #12, docs/secrets.md "Cost"), side by side in one run:
#   1. request latency, p50/p99 over N requests on ONE keep-alive connection;
#   2. request latency, p50/p99 over N requests each on a NEW connection (TCP + TLS handshake
#      + request + response);
#   3. SSE first-byte latency: request sent -> first event read;
#   4. request latency on a new connection that resumes the client's previous TLS session
#      (what Node's https agent, curl and Go do by default): the agent-facing side's session
#      tickets; through the gateway the upstream side resumes its own session per host too;
# for three paths: direct (the same client on the host, straight to the server on loopback),
# SNI passthrough (an https entry without rules or secrets) and terminated TLS (the same
# server behind an entry with an `http` rule, so the gateway terminates and re-encrypts).
# Targets on a 2-CPU machine: terminated - passthrough <= +1 ms p50 per new connection and
# <= +100 us p50 per request on a kept-alive one. Also: supervisor CPU per request (run_finished
# supervisor_cpu_ms of N requests minus that of one, over N - 1), and the load average at the
# start and the end (re-measure when the machine is idle: every wake-up waits for a CPU).
# The server is one python process (ssl, a thread per connection) with a test CA made by
# openssl(1); the client is the same python program in the Comet and on the host.
source "$(dirname "$0")/lib.sh" secrets
N=${N:-1000}
RUNS=${RUNS:-3}
# BEFORE=path/to/an/older/soyaos: its passthrough and terminated paths are measured too,
# interleaved in the same run (a before/after pair is only comparable side by side).
BEFORE=${BEFORE:-}
# Which modes to run (space-separated): keepalive fresh resumed sse.
MODES=${MODES:-keepalive fresh resumed sse}
MEDIAN_FORMAT=%.1f

# ---- a test CA and a server certificate for both names ---------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench test CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench" \
  -keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:pass.bench.test,DNS:icpt.bench.test\nextendedKeyUsage=serverAuth\n' > "$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/ext" -out "$work/server.pem" 2>/dev/null
chmod 644 "$work"/*.pem "$work"/*.key

# ---- the server: keep-alive HTTP/1.1 over TLS; /ping answers 2 bytes, /sse one event at once --
cat > "$work/server.py" <<'PY'
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(4096)
with open(sys.argv[3], "w") as f:
    f.write("%d\n" % s.getsockname()[1])

def serve(c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        t.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                d = t.recv(65536)
                if not d:
                    return
                buf += d
            head, _, buf = buf.partition(b"\r\n\r\n")
            if head.split(b" ")[1].startswith(b"/sse"):
                t.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
                          b"data: first\n\n")
                return
            t.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    except OSError:
        pass
    finally:
        c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY

# ---- the client ------------------------------------------------------------------------------
mkdir -p "$work/pack"
cp "$work/ca.pem" "$work/pack/ca.pem"
cat > "$work/pack/main.py" <<'PY'
import socket, ssl, sys, time

def ctx(cafile):
    c = ssl.create_default_context(cafile=cafile if cafile != "-" else None)
    c.set_alpn_protocols(["http/1.1"])
    return c

def open_conn(c, host, port):
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c.wrap_socket(s, server_hostname=host)

def request(t, host, path=b"/ping"):
    t.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
    got = b""
    while not got.endswith(b"ok"):
        d = t.recv(4096)
        if not d:
            raise OSError("closed")
        got += d

def pct(lat):
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6

def keepalive(host, port, n, cafile):
    t = open_conn(ctx(cafile), host, port)
    lat = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        request(t, host)
        lat.append(time.perf_counter() - t0)
    print("RESULT ok %.1f %.1f" % pct(lat), flush=True)

def fresh(host, port, n, cafile):
    c = ctx(cafile)
    lat = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        t = open_conn(c, host, port)
        request(t, host)
        lat.append(time.perf_counter() - t0)
        t.close()
    print("RESULT ok %.1f %.1f" % pct(lat), flush=True)

def resumed(host, port, n, cafile):
    c = ctx(cafile)
    lat = []
    session = None
    for _ in range(int(n) + 1):
        t0 = time.perf_counter()
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = c.wrap_socket(s, server_hostname=host, session=session)
        request(t, host)
        dt = time.perf_counter() - t0
        if session is not None:  # the first connection has nothing to resume
            if not t.session_reused:
                raise SystemExit("RESULT fail: a connection did not resume its session")
            lat.append(dt)
        session = t.session  # after the response: TLS 1.3 tickets arrive after the handshake
        t.close()
    print("RESULT ok %.1f %.1f" % pct(lat), flush=True)

def sse(host, port, n, cafile):
    c = ctx(cafile)
    lat = []
    for _ in range(int(n)):
        t = open_conn(c, host, port)
        t0 = time.perf_counter()
        t.sendall(b"GET /sse HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
        got = b""
        while b"data:" not in got:
            d = t.recv(4096)
            if not d:
                break
            got += d
        lat.append(time.perf_counter() - t0)
        t.close()
    print("RESULT ok %.1f %.1f" % pct(lat), flush=True)

{"keepalive": keepalive, "fresh": fresh, "resumed": resumed, "sse": sse}[sys.argv[1]](*sys.argv[2:])
PY

"$PY" "$work/server.py" "$work/server.pem" "$work/server.key" "$work/port" &
pids+=($!)
for _ in $(seq 50); do [[ -s "$work/port" ]] && break; sleep 0.1; done
read -r PORT < "$work/port"

cat > "$work/pack/soyapack.yaml" <<YAML
soyapack: v0
name: secrets-bench
version: 0.1.0
agent: {runtime: python3, entrypoint: main.py}
capabilities:
  egress:
    - {host: pass.bench.test, port: 443, protocol: https}
    - host: icpt.bench.test
      port: 443
      protocol: https
      http: [{method: GET, path: "/**"}]
  fs: {read: [/workdir]}
  determinism_tier: read-only
resources: {timeout: 600s}
YAML
mkdir -p "$work/home"
cat > "$work/home/moon.yaml" <<YAML
egress:
  connect_to:
    "pass.bench.test:443": "127.0.0.1:$PORT"
    "icpt.bench.test:443": "127.0.0.1:$PORT"
tls:
  ca_files: ["$work/ca.pem"]
YAML

# Direct: the same client on the host; the name resolves through --connect-to's equivalent:
# a hosts-free trick, python connects to 127.0.0.1 but checks the certificate for the name.
direct() {
  local mode=$1 n=$2
  "$PY" - "$work/pack/main.py" "$mode" "$n" "$work/ca.pem" "$PORT" <<'PY' | sed -n 's/^RESULT ok //p'
import runpy, socket, sys
script, mode, n, ca, port = sys.argv[1:]
real = socket.create_connection
socket.create_connection = lambda addr, *a, **k: real(("127.0.0.1", int(port)), *a, **k)
sys.argv = [script, mode, "pass.bench.test", port, n, ca]
runpy.run_path(script, run_name="__main__")
PY
}

echo "start: $(load_note)"
in_comet() {  # PATH MODE N
  case $1 in
    passthrough) comet "$2" pass.bench.test 443 "$3" /workdir/ca.pem ;;
    terminated) comet "$2" icpt.bench.test 443 "$3" - ;;
    passthrough-before) SOYAOS=$BEFORE comet "$2" pass.bench.test 443 "$3" /workdir/ca.pem ;;
    terminated-before) SOYAOS=$BEFORE comet "$2" icpt.bench.test 443 "$3" - ;;
  esac
}
PATHS="direct passthrough terminated"
[[ -n "$BEFORE" ]] && PATHS="direct passthrough-before passthrough terminated-before terminated"
# Supervisor CPU per request: run_finished's supervisor_cpu_ms (getrusage of the supervisor,
# all its threads: the gateway's loop and the exchange threads) of a run of N requests, minus
# that of a run of one request (start-up and teardown), over N - 1.
declare -A P50 P99 CPU BASE
for mode in $MODES; do
  [[ $mode == sse ]] && continue
  for path in ${PATHS#direct }; do
    in_comet "$path" "$mode" 1 >/dev/null
    BASE[$mode.$path]=$(run_finished supervisor_cpu_ms)
  done
done
for mode in $MODES; do
  n=$N
  [[ $mode == sse ]] && n=$((N / 5))
  declare -A A=() B=() C=()
  for _ in $(seq "$RUNS"); do  # the paths interleaved within each round (the load moves)
    for path in $PATHS; do
      case $path in
        direct) r=$(direct "$mode" "$n") ;;
        *) r=$(in_comet "$path" "$mode" "$n") ;;
      esac
      [[ -n "$r" ]] || { echo "$mode/$path: no result (did the run fail?)" >&2; exit 1; }
      read -r x y <<<"$r"; A[$path]+=" $x"; B[$path]+=" $y"
      if [[ $path != direct && $mode != sse ]]; then
        C[$path]+=" $("$PY" -c 'import sys; print((float(sys.argv[1]) - float(sys.argv[2])) * 1000 / (int(sys.argv[3]) - 1))' \
          "$(run_finished supervisor_cpu_ms)" "${BASE[$mode.$path]}" "$n")"
      fi
    done
  done
  for path in $PATHS; do
    # shellcheck disable=SC2086  # the lists are space-separated numbers
    P50[$mode.$path]=$(median ${A[$path]}); P99[$mode.$path]=$(median ${B[$path]})
    # shellcheck disable=SC2086
    [[ -n "${C[$path]:-}" ]] && CPU[$mode.$path]=$(median ${C[$path]})
  done
  unset A B C
done

title() {
  case $1 in
    keepalive) echo "request on one keep-alive connection (N=$N)" ;;
    fresh) echo "request on a new connection: TCP + TLS + request (N=$N)" ;;
    resumed) echo "request on a new connection resuming the previous TLS session (N=$N)" ;;
    sse) echo "SSE first byte on a new connection (N=$((N / 5)))" ;;
  esac
}
for mode in $MODES; do
  echo "== $(title $mode): median of $RUNS runs, us"
  for path in $PATHS; do
    cpu=${CPU[$mode.$path]:-}
    printf '  %-18s p50 %9s   p99 %9s%s\n' "$path" "${P50[$mode.$path]}" "${P99[$mode.$path]}" \
      "${cpu:+   supervisor CPU $cpu us/request}"
  done
  "$PY" -c "import sys; t,p,d=map(float,sys.argv[1:]); print('  terminated - passthrough at p50 = %+.0f us; passthrough - direct = %+.0f us' % (t-p, p-d))" \
    "${P50[$mode.terminated]}" "${P50[$mode.passthrough]}" "${P50[$mode.direct]}"
  if [[ -n "$BEFORE" ]]; then
    "$PY" -c "import sys; t,p=map(float,sys.argv[1:]); print('  before: terminated - passthrough at p50 = %+.0f us' % (t-p))" \
      "${P50[$mode.terminated-before]}" "${P50[$mode.passthrough-before]}"
  fi
done
echo "(targets: fresh +1000 us, keepalive +100 us, terminated against passthrough)"
if [[ " $MODES " == *" fresh "* && " $MODES " == *" resumed "* ]]; then
  "$PY" -c "import sys; f,r=map(float,sys.argv[1:]); print('terminated: a resumed new connection costs %+.0f us against a full handshake (p50)' % (r-f))" \
    "${P50[fresh.terminated]}" "${P50[resumed.terminated]}"
fi
echo "end: $(load_note)"
