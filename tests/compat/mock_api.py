#!/usr/bin/env python3
"""Host-side mock of the model APIs for the compatibility corpus (tests/compat).

Started by the gtest fixture (compat_env.cc) with the host's /usr/bin/python3; never inside
a Comet. Listens on 127.0.0.1 only, on two ephemeral ports: one TLS (the certificate the
test signed with its test CA) and one plain HTTP. Prints {"https": PORT, "http": PORT} as
its first stdout line, then serves until its stdin closes (the test holds the other end,
so the server cannot outlive the test).

Routes (any Host):
  POST /v1/chat/completions   OpenAI chat completions; "stream": true answers SSE chunks
                              ending with "data: [DONE]". Needs "Authorization: Bearer KEY".
  POST /v1/messages           Anthropic messages; "stream": true answers the SSE event
                              sequence message_start ... message_stop. Needs "x-api-key: KEY".
  GET  /sse[?delay=S]         three generic SSE events (for the Python clients), S seconds apart
  POST /echo                  answers the request body
  anything else               200 "hello from HOST PATH"
Every request is appended to the log file as one JSON object per line (scheme, sni,
method, path, host, authorization, x-api-key, body, alpn, resumed) so the test can check what
arrived.
"""
import argparse
import json
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_LOCK = threading.Lock()
ARGS = None


def log(record):
    with LOG_LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "compat-mock/1"

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _record(self, body):
        log({
            "scheme": self.server.scheme,
            "sni": getattr(self.connection, "compat_sni", None),
            "method": self.command,
            "path": self.path,
            "host": self.headers.get("Host", ""),
            "authorization": self.headers.get("Authorization", ""),
            "x-api-key": self.headers.get("x-api-key", ""),
            "body": body.decode("utf-8", "replace"),
            # The ALPN protocol the TLS session chose: "soyaos-probe" only when the client's
            # own ClientHello offered it (a passthrough session is the agent's, issue #12).
            "alpn": self.connection.selected_alpn_protocol() if hasattr(self.connection, "selected_alpn_protocol")
            else None,
            # Whether the TLS handshake resumed a session (the gateway's upstream side reuses
            # its sessions per destination, issue #16).
            "resumed": self.connection.session_reused if hasattr(self.connection, "session_reused") else None,
        })

    def _send(self, status, ctype, data):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status, obj):
        self._send(status, "application/json", json.dumps(obj).encode())

    def _sse_start(self):
        # No Content-Length and Connection: close: the stream ends when the server closes,
        # as many real SSE endpoints behave behind proxies.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, data, event=None):
        chunk = (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
        self.wfile.write(chunk.encode())
        self.wfile.flush()
        time.sleep(0.01)  # separate writes, so the client really reads a stream

    def do_GET(self):
        self._record(b"")
        if self.path.startswith("/sse"):
            # /sse?delay=SECONDS spaces the three events out (a streaming check).
            query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if "=" in p)
            delay = min(float(query.get("delay", "0")), 2.0)
            self._sse_start()
            for i in range(3):
                if i > 0:
                    time.sleep(delay)
                self._sse(json.dumps({"n": i}), event="tick")
            return
        self._send(200, "text/plain", f"hello from {self.headers.get('Host', '')} {self.path}".encode())

    def do_POST(self):
        body = self._body()
        self._record(body)
        if self.path == "/echo":
            self._send(200, "application/octet-stream", body)
            return
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        if self.path == "/v1/chat/completions":
            self._openai(req)
        elif self.path == "/v1/messages":
            self._anthropic(req)
        else:
            self._send(200, "text/plain", f"hello from {self.headers.get('Host', '')} {self.path}".encode())

    def _openai(self, req):
        if self.headers.get("Authorization", "") != "Bearer " + ARGS.key:
            self._json(401, {"error": {"message": "bad key", "type": "invalid_request_error"}})
            return
        model = req.get("model", "gpt-mock")
        words = ["Hello", " from", " mock", " openai"]
        if req.get("stream"):
            self._sse_start()
            base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": model}
            self._sse(json.dumps({**base, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}))
            for w in words:
                self._sse(json.dumps({**base, "choices": [
                    {"index": 0, "delta": {"content": w}, "finish_reason": None}]}))
            self._sse(json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            self._sse("[DONE]")
            return
        self._json(200, {
            "id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "".join(words)}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        })

    def _anthropic(self, req):
        if self.headers.get("x-api-key", "") != ARGS.key:
            self._json(401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})
            return
        model = req.get("model", "claude-mock")
        words = ["Hello", " from", " mock", " anthropic"]
        msg = {"id": "msg_mock", "type": "message", "role": "assistant", "model": model,
               "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 3, "output_tokens": 0}}
        if req.get("stream"):
            self._sse_start()
            self._sse(json.dumps({"type": "message_start", "message": {**msg, "content": []}}), "message_start")
            self._sse(json.dumps({"type": "content_block_start", "index": 0,
                                  "content_block": {"type": "text", "text": ""}}), "content_block_start")
            self._sse(json.dumps({"type": "ping"}), "ping")
            for w in words:
                self._sse(json.dumps({"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": w}}), "content_block_delta")
            self._sse(json.dumps({"type": "content_block_stop", "index": 0}), "content_block_stop")
            self._sse(json.dumps({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                  "usage": {"output_tokens": 4}}), "message_delta")
            self._sse(json.dumps({"type": "message_stop"}), "message_stop")
            return
        self._json(200, {**msg, "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 4},
                         "content": [{"type": "text", "text": "".join(words)}]})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, scheme, ctx):
        super().__init__(("127.0.0.1", 0), Handler)
        self.scheme = scheme
        self.ctx = ctx

    def finish_request(self, request, client_address):
        # The TLS handshake runs here, in the connection's own thread (not in accept()).
        if self.ctx is not None:
            try:
                request = self.ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log({"scheme": "https", "handshake_error": str(e)})
                return
            request.compat_sni = getattr(request, "compat_sni", None)
        super().finish_request(request, client_address)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True)
    p.add_argument("--key-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--key", default="test-key-not-secret")
    ARGS = p.parse_args()

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key_file)
    ctx.set_alpn_protocols(["soyaos-probe", "http/1.1"])

    def on_sni(sock, name, _ctx):
        sock.compat_sni = name

    ctx.sni_callback = on_sni
    servers = [Server("https", ctx), Server("http", None)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(json.dumps({"https": servers[0].server_address[1], "http": servers[1].server_address[1]}), flush=True)
    sys.stdin.read()  # until the test closes its end
    os._exit(0)


if __name__ == "__main__":
    main()
