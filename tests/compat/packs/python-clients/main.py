"""Compatibility corpus, Python side: each named check uses a real client the way an agent
would, and prints one line `RESULT NAME ok DETAIL` or `RESULT NAME fail ERROR`.

    main.py --https URL --http URL [--undeclared URL] CHECK...

A `deny_*` check tries something the pack does not declare and prints
`RESULT NAME refused ERROR` when the client saw the refusal as an ordinary error (that is the
expected outcome) or `RESULT NAME fail reached ...` when it got through.
Exit status: 0 when every check printed ok/refused, 1 otherwise.
"""
import argparse
import asyncio
import errno
import json
import os
import socket
import sqlite3
import ssl
import sys
import tempfile
import threading
import traceback
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ARGS = None


def host_port(url, default):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port or default


def expect(cond, detail):
    if not cond:
        raise AssertionError(detail)


def read_sse_data(lines):
    """The `data:` payloads of an SSE stream given as an iterable of text lines."""
    return [line[5:].strip() for line in lines if line.startswith("data:")]


# ---- allowed ------------------------------------------------------------------------------

def check_urllib_https():
    with urllib.request.urlopen(ARGS.https + "/hello/urllib", timeout=10) as r:
        body = r.read().decode()
    expect(body.startswith("hello from api.compat.test"), body)
    return body


def check_urllib_http():
    with urllib.request.urlopen(ARGS.http + "/hello/urllib-plain", timeout=10) as r:
        body = r.read().decode()
    expect(body.startswith("hello from plain.compat.test"), body)
    return body


def check_requests_https():
    import requests
    payload = json.dumps({"n": 42, "text": "x" * 100000})
    r = requests.post(ARGS.https + "/echo", data=payload, timeout=10)
    r.raise_for_status()
    expect(r.text == payload, f"echo differs ({len(r.text)} bytes)")
    return f"{len(r.content)} bytes echoed"


def check_requests_sse():
    import requests
    with requests.get(ARGS.https + "/sse", stream=True, timeout=10) as r:
        r.raise_for_status()
        data = read_sse_data(r.iter_lines(decode_unicode=True))
    expect([json.loads(d)["n"] for d in data] == [0, 1, 2], str(data))
    return f"{len(data)} events"


def check_sse_is_streamed():
    """Each event reaches the client when the server sends it, not when the stream ends:
    nothing between them (the gateway) buffers the response."""
    import time
    import requests
    arrivals = []
    with requests.get(ARGS.https + "/sse?delay=0.4", stream=True, timeout=10) as r:
        r.raise_for_status()
        for line in r.iter_lines(chunk_size=1, decode_unicode=True):
            if line.startswith("data:"):
                arrivals.append(time.monotonic())
    expect(len(arrivals) == 3, f"{len(arrivals)} events")
    gaps = [round(b - a, 2) for a, b in zip(arrivals, arrivals[1:])]
    expect(all(g >= 0.25 for g in gaps), f"events arrived together: gaps {gaps}")
    return f"gaps {gaps}"


def check_requests_session_http():
    import requests
    with requests.Session() as s:
        bodies = [s.get(ARGS.http + f"/session/{i}", timeout=10).text for i in range(3)]
    expect(all(b.startswith("hello from plain.compat.test") for b in bodies), str(bodies))
    return "3 requests"


def check_httpx_sync():
    import httpx
    with httpx.Client(timeout=10) as c:
        r = c.get(ARGS.https + "/hello/httpx")
    r.raise_for_status()
    expect(r.text.startswith("hello from api.compat.test"), r.text)
    return r.text


def check_httpx_openai_sse():
    """The OpenAI chat-completions stream, read raw with httpx (as SDKs do)."""
    import httpx
    body = {"model": "gpt-mock", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}
    text = ""
    with httpx.stream("POST", ARGS.https + "/v1/chat/completions", json=body, headers=headers, timeout=10) as r:
        r.raise_for_status()
        for data in read_sse_data(r.iter_lines()):
            if data == "[DONE]":
                break
            text += json.loads(data)["choices"][0]["delta"].get("content") or ""
    expect(text == "Hello from mock openai", text)
    return text


def check_httpx_asyncio():
    import httpx

    async def main():
        async with httpx.AsyncClient(timeout=10) as c:
            rs = await asyncio.gather(*[c.get(ARGS.https + f"/async/{i}") for i in range(5)])
        return [r.text for r in rs]

    texts = asyncio.run(main())
    expect(all(t.startswith("hello from api.compat.test") for t in texts), str(texts))
    return f"{len(texts)} concurrent requests"


def check_asyncio_streams():
    """Raw HTTP/1.1 over asyncio's streams, plain and TLS."""
    async def get(url, tls):
        host, port = host_port(url, 443 if tls else 80)
        ctx = ssl.create_default_context() if tls else None
        reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
        writer.write(f"GET /asyncio HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        await writer.wait_closed()
        return data.decode()

    async def main():
        return await asyncio.gather(get(ARGS.http, False), get(ARGS.https, True))

    plain, tls = asyncio.run(main())
    expect(plain.startswith("HTTP/1.1 200") and "hello from plain.compat.test" in plain, plain)
    expect(tls.startswith("HTTP/1.1 200") and "hello from api.compat.test" in tls, tls)
    return "plain and tls"


def check_threads():
    idents = set()

    def get(i):
        idents.add(threading.get_ident())
        with urllib.request.urlopen(ARGS.https + f"/thread/{i}", timeout=10) as r:
            return r.read().decode()

    with ThreadPoolExecutor(max_workers=4) as pool:
        bodies = list(pool.map(get, range(8)))
    expect(all(b.startswith("hello from api.compat.test") for b in bodies), str(bodies))
    return f"{len(bodies)} requests on {len(idents)} threads"


def check_raw_socket():
    """`curl`-style raw HTTP: a socket, a request head, the answer; then the same over TLS."""
    host, port = host_port(ARGS.http, 80)
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(f"GET /raw HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        plain = b"".join(iter(lambda: s.recv(4096), b"")).decode()
    expect(plain.startswith("HTTP/1.") and "hello from plain.compat.test /raw" in plain, plain)
    host, port = host_port(ARGS.https, 443)
    ctx = ssl.create_default_context()
    with socket.create_connection((host, port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        s.sendall(f"GET /raw-tls HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        tls = b"".join(iter(lambda: s.recv(4096), b"")).decode()
    expect("hello from api.compat.test /raw-tls" in tls, tls)
    return "plain and tls"


def check_sqlite_out():
    path = "/workdir/out/compat.db"
    con = sqlite3.connect(path)
    con.execute("create table if not exists t (k text primary key, v integer)")
    with con:
        con.executemany("insert or replace into t values (?, ?)", [("a", 1), ("b", 2), ("c", 3)])
    total = con.execute("select sum(v) from t").fetchone()[0]
    con.close()
    expect(total == 6, str(total))
    return f"sum={total}"


def check_vendored_pure():
    import compatpure
    expect(compatpure.__file__.startswith("/workdir/vendor/"), compatpure.__file__)
    return compatpure.shout("vendored")


def check_vendored_native():
    import compatnative
    expect(compatnative.__file__.startswith("/workdir/vendor/"), compatnative.__file__)
    expect(compatnative.add(40, 2) == 42, "add")
    return os.path.basename(compatnative.__file__)


def check_tempfile():
    """tempfile and a HOME cache directory, as pip, HF and matplotlib use them."""
    tmp = tempfile.gettempdir()
    with tempfile.NamedTemporaryFile("w+", suffix=".txt") as f:
        f.write("scratch")
        f.flush()
        f.seek(0)
        expect(f.read() == "scratch", "read back")
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "x"), "w") as f:
        f.write("x")
    cache = os.path.expanduser("~/.cache/compat")
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "c"), "w") as f:
        f.write("c")
    return f"tmp={tmp} home={os.path.expanduser('~')}"


def check_os_release():
    import platform
    info = platform.freedesktop_os_release()
    return info.get("ID", "?")


def check_uuid1():
    import uuid
    u = uuid.uuid1()
    expect(u.version == 1, str(u))
    return str(u)


def check_stdlib_misc():
    import locale
    import mimetypes
    import zoneinfo
    return (f"fqdn={socket.getfqdn()} locale={locale.setlocale(locale.LC_ALL, '')} "
            f"tz={zoneinfo.ZoneInfo('Europe/Paris').key} json={mimetypes.guess_type('a.json')[0]} "
            f"cafile={ssl.get_default_verify_paths().cafile}")


def check_system_info():
    import getpass
    import locale
    import platform
    import time
    n = os.cpu_count()
    expect(n is not None and n > 0, f"cpu_count={n}")
    return f"cpus={n} user={getpass.getuser()} node={platform.node()} tz={time.tzname[0]} " \
           f"locale={locale.getpreferredencoding()}"


# ---- forbidden counterparts: each must be refused, as an ordinary error ------------------

def refused(fn):
    try:
        fn()
    except Exception as e:  # the client's own error type is what the agent sees
        cause = e
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        name = errno.errorcode.get(getattr(cause, "errno", None) or 0, "")
        return False, f"{type(e).__name__} {name} {str(cause)[:200]}".strip()
    return True, "reached"


def deny_urllib_undeclared_host():
    with urllib.request.urlopen(ARGS.undeclared + "/nope", timeout=10) as r:
        return r.read()


def deny_httpx_undeclared_host():
    import httpx
    return httpx.get(ARGS.undeclared + "/nope", timeout=10).text


def deny_requests_undeclared_port():
    import requests
    host, _ = host_port(ARGS.https, 443)
    _, port = host_port(ARGS.http, 80)
    return requests.get(f"https://{host}:{port}/nope", timeout=10).text


def deny_httpx_ip_literal():
    import httpx
    _, port = host_port(ARGS.http, 80)
    return httpx.get(f"http://127.0.0.1:{port}/nope", timeout=10).text


def deny_plaintext_on_https_entry():
    host, port = host_port(ARGS.https, 443)
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(f"GET /nope HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = s.recv(4096)
        if not data:
            raise ConnectionResetError(errno.ECONNRESET, "closed without an answer")
        return data


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--https", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--undeclared", default="https://undeclared.compat.test")
    p.add_argument("checks", nargs="+")
    ARGS = p.parse_args()
    ok = True
    for name in ARGS.checks:
        fn = globals().get(("check_" if not name.startswith("deny_") else "") + name)
        if fn is None:
            print(f"RESULT {name} fail no such check", flush=True)
            ok = False
            continue
        if name.startswith("deny_"):
            reached, detail = refused(fn)
            print(f"RESULT {name} {'fail' if reached else 'refused'} {detail}", flush=True)
            ok = ok and not reached
            continue
        try:
            detail = fn()
            print(f"RESULT {name} ok {detail}", flush=True)
        except Exception as e:
            traceback.print_exc()
            print(f"RESULT {name} fail {type(e).__name__}: {str(e)[:300]}", flush=True)
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
