// The HTTP layer of an intercepted egress connection (SPEC.md C11, M8): the gateway reads
// every request the agent sends on an entry that has `http` rules or a bound secret — plain
// `http`, or `https` with TLS terminated on the agent side (TlsStream) — and only a request
// that passes goes upstream, with the secrets' placeholders replaced by their values.
// Interface shared by issue #12's helpers (coord: secrets-interface.md, section 4);
// docs/secrets.md describes the semantics for users.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "manifest/manifest.h"
#include "supervisor/byte_stream.h"

namespace soyaos::supervisor {

struct HttpSecretBinding {
  std::string placeholder;     // what the agent's environment holds ("soyaos-placeholder-<hex>")
  std::string_view value;      // the real value (a SecretBytes view that outlives the exchange)
  bool bound_to_this_host = false;
  std::string name;            // the secret's name (manifest `secrets.NAME`): events say which one echoed
};

struct HttpExchangePolicy {
  std::string host;            // the entry's concrete host for this connection: Host must name it
  uint16_t port = 0;           // the port the agent connected to (Host carries it when not the default)
  bool tls = true;             // https (default port 443) or plain http (80); the scheme in resources
  std::string manifest_entry;  // "capabilities.egress[0]"
  std::vector<manifest::HttpRule> rules;   // empty = any method and path
  std::vector<HttpSecretBinding> secrets;  // every run secret: only bound ones are substituted,
                                           // a placeholder of an unbound one is refused (403)
  int head_timeout_ms = 10'000;    // a request head, once its first byte arrived, must complete
  int idle_timeout_ms = 300'000;   // no byte either way for this long ends the connection
};

// One request that went upstream (an http_request event). The path never carries the query.
struct HttpRequestRecord {
  std::string method, path;
  int status = 0;              // the final (non-1xx) status; 0 when none arrived
  uint64_t bytes_up = 0, bytes_down = 0;  // head + body each way, as on the wire to/from the agent
  uint64_t duration_ms = 0;    // first byte of the request to the last byte of the response
};

// One request refused (a capability_violation, resource "METHOD https://host/path"). `rule` is
// the key path of the rule or entry that came closest ("capabilities.egress[0]" when no rule
// matched, or the entry for Host/placeholder refusals); `reason` says why in words.
struct HttpRefusal {
  std::string method, path, rule, reason;
};

struct HttpExchangeCallbacks {
  std::function<void(const HttpRequestRecord&)> on_request;  // -> http_request event
  std::function<void(const HttpRefusal&)> on_refusal;        // -> capability_violation (EACCES)
  // A response carried a secret's value and the agent got it masked (once per connection):
  // -> capability_violation; `rule` is "secrets.NAME", the value is never in the record.
  std::function<void(const HttpRefusal&)> on_secret_echo;
};

// Runs the whole connection, blocking, on the calling thread (poll(2) on both streams' fds and
// `stop_fd`): every request is checked before a byte of it goes upstream — Host equals the
// policy's host, no proxy-style target or host-naming field, method and normalised path
// against `rules`, no placeholder of a secret not bound to this host — then forwarded with
// bound placeholders replaced in the request line and header values (never in bodies).
// Responses pass through a SecretEchoGuard (secret_echo_guard.h): a run secret's value in a
// response head or body (or a websocket relay) reaches the agent masked with '*', and the
// first one is reported (on_secret_echo). On a connection to a host a secret is bound to, the
// upstream request asks for `Accept-Encoding: identity`, and a response whose body is still
// content- or transfer-coded (it could not be scanned) is answered `502 Bad Gateway` with
// `x-soyaos-denied` instead, and the connection closed (an http_request event with 502, no
// violation: the server chose the coding, the agent did not).
// Bodies stream through as they arrive (Content-Length, chunked, until close), 1xx responses
// (100-continue included) pass through, a 101 upgrade turns into a raw relay both ways. A
// refusal answers `403 Forbidden` with `x-soyaos-denied` and a short JSON body, then closes.
// Returns when both sides are done, on a timeout, on an I/O error, or when `stop_fd`
// (an eventfd, or -1 for none) becomes readable. Does not close the streams' fds.
void run_http_exchange(ByteStream& agent, ByteStream& upstream, const HttpExchangePolicy& policy,
                       const HttpExchangeCallbacks& callbacks, int stop_fd);

}  // namespace soyaos::supervisor
