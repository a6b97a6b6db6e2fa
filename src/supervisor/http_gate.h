// The check one request head goes through on an intercepted connection (SPEC.md C11), and the
// head that is sent upstream in its place: the HTTP exchange's decision, without its I/O
// (http_exchange.cc runs it for every request on the connection). Pure function.
#pragma once

#include <string>
#include <string_view>

#include "network/http_head.h"
#include "network/http_message.h"
#include "supervisor/http_exchange.h"

namespace soyaos::supervisor {

struct GateDecision {
  bool allowed = false;
  std::string method;
  std::string path;           // normalised (or, when it could not be, as sent), never the query
  std::string rule;           // allowed: the matching rule (or the entry); refused: the closest
  std::string reason;         // refused: why, in words (never a secret's value)
  std::string upstream_head;  // allowed: what goes upstream instead of the agent's head
  network::RequestTraits traits;
};

// Checks, in order: the head parsed; origin-form target (an absolute or authority target names
// another host; `*` only without rules); Host equals the policy's host (and port, when it
// carries one); no field naming another host and no h2c (http_entry_refusal); with rules, no
// method-override field naming another method (http_method_override_refusal); no TRACE when a
// secret is bound to this host (its echo would carry the value); the framing, no body on a
// method that defines none, and the upgrade (request_traits); the path normalises; a rule allows method + path; no placeholder
// of a secret that is not bound to this host anywhere in the head. Then builds the upstream
// head: the request line with the normalised path (what was matched is what is sent) and the
// query as sent, each field as `name: value` (on a host a secret is bound to, every
// `Accept-Encoding` is replaced by `accept-encoding: identity`: a compressed response would
// hide an echoed value from the exchange's SecretEchoGuard), with every bound placeholder in the request line
// and the field values replaced by its value (a value that such a line cannot carry — CR, LF,
// NUL, other control bytes, or a space in the request line — refuses the request).
GateDecision gate_request(const network::HttpHeadParse& parse, const HttpExchangePolicy& policy);

// The answer to a refused request: `403 Forbidden` with `x-soyaos-denied: RULE`,
// `content-type: application/json`, `connection: close` and
// {"error":"soyaos_denied","rule":...,"reason":...}. `status_line` is "502 Bad Gateway" for a
// response the gateway cannot check (a coded body on a connection that carries a secret).
std::string denied_response(const std::string& rule, const std::string& reason,
                            std::string_view status_line = "403 Forbidden");

}  // namespace soyaos::supervisor
