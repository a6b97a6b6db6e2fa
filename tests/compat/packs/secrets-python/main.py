"""Compatibility corpus, secrets (issue #12): each named check uses a real client the way an
agent would, and prints one line `RESULT NAME ok DETAIL` or `RESULT NAME fail ERROR`.

    main.py --openai URL --anthropic URL --passthrough URL [--plain URL] CHECK...

A `deny_*` check does something the pack's http rules or secrets forbid and prints
`RESULT NAME refused DETAIL` when the gateway answered 403 with x-soyaos-denied (the expected
outcome), `RESULT NAME fail ...` otherwise. Exit status: 0 when every check printed ok/refused.
"""
import argparse
import http.client
import json
import os
import socket
import ssl
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

ARGS = None
PLACEHOLDER_PREFIX = "soyaos-placeholder-"


def expect(cond, detail):
    if not cond:
        raise AssertionError(detail)


def host_of(url):
    return urllib.parse.urlsplit(url).hostname


def chat_body(stream=False):
    return json.dumps({"model": "gpt-mock", "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()


def openai_headers():
    return {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}


def conn(url):
    return http.client.HTTPSConnection(host_of(url), 443, timeout=10, context=ssl.create_default_context())


def denied(resp, body):
    """A gateway refusal: 403 with x-soyaos-denied and a JSON body naming the rule."""
    expect(resp.status == 403, f"status {resp.status}: {body[:200]!r}")
    rule = resp.getheader("x-soyaos-denied")
    expect(rule, f"no x-soyaos-denied header: {resp.getheaders()}")
    return f"403 x-soyaos-denied: {rule}"


# ---- allowed ------------------------------------------------------------------------------

def check_env_holds_placeholders():
    # The variables hold placeholders; the test checks that the real keys appear nowhere in
    # this output (the environment and /proc/self/environ are printed for it).
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        expect(os.environ[name].startswith(PLACEHOLDER_PREFIX), f"{name}={os.environ[name][:24]}...")
    with open("/proc/self/environ", "rb") as f:
        environ = f.read().replace(b"\0", b"\n").decode("utf-8", "replace")
    print("ENVIRON-BEGIN\n" + environ + "\nENVIRON-END")
    expect(os.environ.get("SSL_CERT_FILE") == "/etc/soyaos/ca-certificates.crt", os.environ.get("SSL_CERT_FILE"))
    return "placeholders only"


def check_urllib_openai():
    req = urllib.request.Request(ARGS.openai + "/v1/chat/completions", data=chat_body(), headers=openai_headers())
    with urllib.request.urlopen(req, timeout=10) as r:
        reply = json.loads(r.read())
    text = reply["choices"][0]["message"]["content"]
    expect(text == "Hello from mock openai", text)
    return text


def check_requests_anthropic():
    import requests
    r = requests.post(ARGS.anthropic + "/v1/messages", timeout=10,
                      headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"},
                      json={"model": "claude-mock", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    expect(r.status_code == 200, f"{r.status_code} {r.text[:200]}")
    return r.json()["content"][0]["text"]


def check_httpx_openai_stream():
    import httpx
    with httpx.Client(timeout=10) as c:
        with c.stream("POST", ARGS.openai + "/v1/chat/completions", content=chat_body(True),
                      headers=openai_headers()) as r:
            expect(r.status_code == 200, r.status_code)
            data = [l[5:].strip() for l in r.iter_lines() if l.startswith("data:")]
    expect(data[-1] == "[DONE]", data)
    return f"{len(data)} events"


def check_sse_spacing():
    # Each event must reach the agent when the server sends it (0.4 s apart), not buffered.
    import requests
    start = time.monotonic()
    seen = []
    with requests.get(ARGS.openai + "/sse?delay=0.4", stream=True, timeout=10) as r:
        expect(r.status_code == 200, r.status_code)
        for line in r.iter_lines(chunk_size=1):
            if line.startswith(b"data:"):
                seen.append(time.monotonic() - start)
    expect(len(seen) == 3, seen)
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    expect(all(g > 0.3 for g in gaps), f"gaps {gaps}")
    return "gaps " + ",".join(f"{g:.2f}" for g in gaps)


def check_keepalive_allowed():
    c = conn(ARGS.openai)
    for i in range(3):
        c.request("POST", "/v1/chat/completions", body=chat_body(), headers=openai_headers())
        r = c.getresponse()
        body = r.read()
        expect(r.status == 200, f"request {i}: {r.status} {body[:100]!r}")
    c.close()
    return "3 requests on one connection"


def check_intercepted_cert():
    # The gateway answers for api.openai.com with a leaf of the run's CA.
    with socket.create_connection((host_of(ARGS.openai), 443), timeout=10) as s:
        with ssl.create_default_context().wrap_socket(s, server_hostname=host_of(ARGS.openai)) as t:
            issuer = dict(x[0] for x in t.getpeercert()["issuer"])
            alpn = t.selected_alpn_protocol()
    expect(issuer.get("commonName") == "SoyaOS Comet run CA", issuer)
    return f"issuer {issuer.get('commonName')}, alpn {alpn}"


def tls_get(ctx, host, path, session=None):
    """One request on a new intercepted connection, offering `session` (of `ctx`): -> (status
    line, the connection's session after the response (TLS 1.3 tickets come after the
    handshake), whether the handshake resumed)."""
    with socket.create_connection((host, 443), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=host, session=session) as t:
            t.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = t.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.split(b"\r\n")[0], t.session, t.session_reused


def check_tls_resumption():
    # The gateway's agent-facing side resumes a session of the same name (its ticket key never
    # leaves the supervisor); a session of another intercepted name is not resumed there: a
    # full handshake with that name's own leaf. (The upstream side is checked by the test,
    # from what the mock saw.) Python offers a session only in the context it came from.
    ctx = ssl.create_default_context()
    anthropic, openai = host_of(ARGS.anthropic), host_of(ARGS.openai)
    line1, s1, r1 = tls_get(ctx, anthropic, "/hello/resume-1")
    expect(b" 200 " in line1 and not r1, (line1, r1))
    line2, s2, r2 = tls_get(ctx, anthropic, "/hello/resume-2", s1)
    expect(b" 200 " in line2, line2)
    expect(r2, "the second connection to the same name was not resumed")
    line3, _, r3 = tls_get(ctx, openai, "/v1/models/resume-3", s2)
    expect(b" 200 " in line3, line3)
    expect(not r3, "a session of " + anthropic + " was resumed for " + openai)
    return "resumed for the same name, full handshake for another"


def check_passthrough_untouched():
    # No secret, no rules: the agent's own TLS session reaches the server (its certificate,
    # and the ALPN only this ClientHello offers).
    ctx = ssl.create_default_context(cafile="/workdir/ca/test-ca.pem")
    ctx.set_alpn_protocols(["soyaos-probe", "http/1.1"])
    with socket.create_connection((host_of(ARGS.passthrough), 443), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=host_of(ARGS.passthrough)) as t:
            issuer = dict(x[0] for x in t.getpeercert()["issuer"])
            alpn = t.selected_alpn_protocol()
            t.sendall(b"GET /hello/passthrough HTTP/1.1\r\nHost: " + host_of(ARGS.passthrough).encode() +
                      b"\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = t.recv(4096)
                if not chunk:
                    break
                data += chunk
    expect(alpn == "soyaos-probe", alpn)
    expect("SoyaOS" not in str(issuer), issuer)
    expect(b" 200 " in data.split(b"\r\n")[0], data[:100])
    return f"issuer {issuer.get('commonName')}, alpn {alpn}"


def check_plain_http_rules():
    # A plain http entry with rules is read by the gateway too (no TLS).
    with urllib.request.urlopen(ARGS.plain + "/hello/plain-rules", timeout=10) as r:
        body = r.read().decode()
    expect(body.startswith("hello from plain.compat.test"), body)
    return body


def chromium_get(url, path, cafile, ech, pq=True, headers=""):
    import chromium_tls
    host = host_of(url)
    raw = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n").encode()
    info, data = chromium_tls.request(host, 443, cafile, raw, ech=ech, pq=pq)
    status = data.split(b"\r\n", 1)[0]
    expect(b" 200 " in status, f"{status!r} {data[:200]!r}")
    return info, data.partition(b"\r\n\r\n")[2].decode()


# Chromium's hellos: (label, post-quantum key share, ECH GREASE). Chrome 131 (X25519MLKEM768 and
# ECH GREASE), Chrome 117-123 (ECH GREASE, X25519 alone) and Chrome 100 (neither: small enough
# for BoringSSL's padding extension).
CHROMIUM_HELLOS = {"chrome131": (True, True), "chrome117": (False, True), "chrome100": (False, False)}


def check_chromium_intercepted():
    # On an intercepted entry every hello passes, ECH GREASE included (issue #18): the session
    # is the run CA's (trusted through SSL_CERT_FILE) and the bound key goes in.
    out = []
    for label, (pq, ech) in CHROMIUM_HELLOS.items():
        path = "/v1/models/chromium-" + label
        info, body = chromium_get(ARGS.openai, path, os.environ["SSL_CERT_FILE"], ech=ech, pq=pq,
                                  headers="Authorization: Bearer " + os.environ["OPENAI_API_KEY"] + "\r\n")
        expect("SoyaOS Comet run CA" in info["issuer"], info)
        expect(body.endswith(path), body)
        out.append(f"{label}: {info['hello_bytes']}-byte hello, {info['suite']}, alpn {info['alpn']}"
                   f"{', padded' if info['padded'] else ''}")
    expect(any(o.endswith("padded") for o in out), out)
    return "; ".join(out)


def check_chromium_passthrough():
    # The hellos without ECH GREASE (Chromium with EncryptedClientHello disabled, or before it)
    # on a passthrough entry: the agent's own session reaches the server, whose certificate it
    # verifies.
    out = []
    for label in ("chrome131", "chrome100"):
        pq = CHROMIUM_HELLOS[label][0]
        path = "/hello/chromium-passthrough-" + label
        info, body = chromium_get(ARGS.passthrough, path, "/workdir/ca/test-ca.pem", ech=False, pq=pq)
        expect("SoyaOS" not in info["issuer"], info)
        expect(body.endswith(path), body)
        out.append(f"{label}: {info['hello_bytes']}-byte hello, issuer {info['issuer']}, alpn {info['alpn']}"
                   f"{', padded' if info['padded'] else ''}")
    return "; ".join(out)


def check_deny_chromium_passthrough_ech():
    # With ECH GREASE on a passthrough entry: refused (it cannot be told from real ECH there).
    try:
        chromium_get(ARGS.passthrough, "/hello/chromium-ech", "/workdir/ca/test-ca.pem", ech=True)
    except (ConnectionResetError, EOFError) as e:
        return f"reset: {type(e).__name__}"
    raise AssertionError("a ClientHello with ECH reached a passthrough entry")


def check_memscan_wait():
    # After the API calls: wait (a SIGUSR2 handler, which the test sees in /proc/PID/status)
    # while the test reads this process's whole memory for the key; its SIGUSR2 ends the wait.
    import signal
    got = []
    signal.signal(signal.SIGUSR2, lambda *_: got.append(True))
    deadline = time.monotonic() + 50
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    expect(got, "the test never signalled")
    return "scanned"


def check_upstream_unverified():
    # The gateway cannot verify the upstream (the operator did not list its CA): the agent
    # gets a 502 saying why, not a bare reset.
    req = urllib.request.Request(ARGS.openai + "/v1/chat/completions", data=chat_body(), headers=openai_headers())
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        expect(e.code == 502 and "certificate" in body, f"{e.code} {body[:200]}")
        return f"502 {body[:160]}"
    raise AssertionError("reached an upstream the gateway could not verify")


# ---- denied -------------------------------------------------------------------------------

def deny_raw(method, path, headers=None, body=None, url=None):
    c = conn(url or ARGS.openai)
    c.request(method, path, body=body, headers=headers or openai_headers())
    r = c.getresponse()
    text = r.read()
    c.close()
    return denied(r, text)


def check_deny_wrong_method():
    return deny_raw("DELETE", "/v1/chat/completions")


def check_deny_wrong_path():
    return deny_raw("POST", "/v1/files", body=b"{}")


def check_deny_traversal():
    out = []
    for path in ("/v1/chat/completions/../../admin", "/v1/models/%2e%2e/%2E%2E/admin", "/v1/models/x%2Fy",
                 "//v1/chat/completions/..//..//v1/files"):
        method = "GET" if path.startswith("/v1/models") else "POST"
        out.append(deny_raw(method, path, body=b"{}" if method == "POST" else None))
    return "; ".join(out)


def check_deny_keepalive_second():
    c = conn(ARGS.openai)
    c.request("POST", "/v1/chat/completions", body=chat_body(), headers=openai_headers())
    r = c.getresponse()
    first = r.read()
    expect(r.status == 200, f"first {r.status} {first[:100]!r}")
    c.request("GET", "/v1/files", headers=openai_headers())
    r = c.getresponse()
    return "second: " + denied(r, r.read())


def check_deny_placeholder_unbound():
    # OPENAI_API_KEY's placeholder sent to api.anthropic.com (bound to api.openai.com only).
    headers = {"x-api-key": os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
    return deny_raw("POST", "/v1/messages", headers=headers, body=b"{}", url=ARGS.anthropic)


def check_deny_host_mismatch():
    headers = dict(openai_headers())
    headers["Host"] = host_of(ARGS.anthropic)
    return deny_raw("POST", "/v1/chat/completions", headers=headers, body=chat_body())


def check_deny_plain_http_path():
    try:
        urllib.request.urlopen(ARGS.plain + "/other", timeout=10)
    except urllib.error.HTTPError as e:
        body = e.read()
        expect(e.code == 403 and e.headers.get("x-soyaos-denied"), f"{e.code} {e.headers}")
        return f"403 x-soyaos-denied: {e.headers.get('x-soyaos-denied')}"
    raise AssertionError("reached")


def check_placeholder_in_body_not_substituted():
    # Bodies are never rewritten (documented): the server sees the placeholder, not the key.
    req = urllib.request.Request(ARGS.openai + "/v1/chat/completions", headers=openai_headers(),
                                 data=json.dumps({"model": "gpt-mock", "messages": [
                                     {"role": "user", "content": os.environ["OPENAI_API_KEY"]}]}).encode())
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
    return "sent"


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--openai", required=True)
    p.add_argument("--anthropic", required=True)
    p.add_argument("--passthrough", required=True)
    p.add_argument("--plain", default="http://plain.compat.test")
    p.add_argument("checks", nargs="+")
    ARGS = p.parse_args()
    failed = False
    for name in ARGS.checks:
        fn = globals().get("check_" + name)
        if fn is None:
            print(f"RESULT {name} fail no such check", flush=True)
            failed = True
            continue
        try:
            detail = fn()
            status = "refused" if name.startswith("deny_") else "ok"
            print(f"RESULT {name} {status} {detail}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is a result line
            traceback.print_exc()
            print(f"RESULT {name} fail {type(e).__name__}: {e}", flush=True)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
