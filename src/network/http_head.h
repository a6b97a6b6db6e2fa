// The HTTP/1.x request head at the start of a TCP stream (RFC 9112 2-5, RFC 9110), for
// the egress gateway's `http` check (SPEC.md C6): the Host must name the entry's host.
// The gateway forwards the head unchanged, so the parser is strict wherever a lenient
// upstream could read the same bytes differently. Pure function: no I/O, looks at no
// more than 16 KiB, never crashes. docs/network-parsers.md explains the choices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "network/parse_status.h"

namespace soyaos::network {

inline constexpr size_t kHttpMaxHead = 16384;  // request line + fields + the empty line
inline constexpr size_t kHttpMaxFields = 100;

enum class TargetForm {
  origin,     // "/path?query": the only form a direct request to a server uses
  absolute,   // "http://host/path": a proxy request; the gateway refuses it
  authority,  // "host:port" with CONNECT: a tunnel request; the gateway refuses it
  asterisk,   // "*" with OPTIONS
};
std::string_view to_string(TargetForm f);

struct HttpHead {
  std::string method;
  std::string target;
  TargetForm target_form = TargetForm::origin;
  int minor_version = 1;  // HTTP/1.<minor>, 0 or 1
  // From the one Host field: lower-cased, port split off; an IPv6 literal keeps its
  // brackets ("[::1]") so it can never be mistaken for a name.
  std::string host;
  std::optional<uint16_t> port;
  bool has_host = false;  // a Host field was sent (only authority- and absolute-form may omit it)
  std::vector<std::pair<std::string, std::string>> fields;  // name and value as sent, OWS trimmed
  std::optional<uint64_t> content_length;
  bool chunked = false;  // a Transfer-Encoding field is present (its last coding must be chunked)
  // Forwarded, X-Forwarded-* or Proxy-* fields: a request shaped for a proxy.
  bool proxy_fields = false;
  size_t head_size = 0;  // bytes up to and including the empty line's CRLF
};

struct HttpHeadParse {
  ParseStatus status = ParseStatus::need_more;
  HttpHead head;       // complete: the parsed head
  size_t need = 0;     // need_more: at least this many bytes in total before it can complete
  std::string reason;  // invalid: what was wrong ("head too large", ...)
};

// Parses the request head at the start of `bytes`: request line
// `METHOD SP request-target SP HTTP/1.0|HTTP/1.1` CRLF, then at most 100 fields
// `token ":" OWS value OWS` CRLF, then CRLF; at most 16 KiB in all. Lines end with CRLF
// only: a bare LF or bare CR is invalid, as is obsolete line folding. Exactly one Host
// field with a valid host[:port] — or none, for a CONNECT (authority-form) or absolute-form
// request, whose target names the host (has_host false, host empty). Content-Length and
// Transfer-Encoding together, or two Content-Length fields, are invalid. Bytes after the head (a body) are not looked at.
HttpHeadParse parse_http_head(std::span<const uint8_t> bytes);

// Why the egress gateway refuses a parsed head on an `http` entry although its Host
// matched, or "" when it may be forwarded. The gateway forwards heads unchanged, so
// anything an upstream (or a framework behind it) may take as the host instead of Host is
// refused: an origin-form target starting with "//" (read as a scheme-relative URL naming
// another host), fields naming another host (X-Forwarded-Host, X-Forwarded-Server,
// X-Host, X-HTTP-Host-Override, X-Original-Host, X-Original-URL, X-Rewrite-URL, Forwarded
// with a host= parameter), and cleartext HTTP/2 (Upgrade: h2c, HTTP2-Settings), whose
// :authority the gateway could not see. docs/network.md ("What each check proves").
std::string http_entry_refusal(const HttpHead& head);

// Why the gateway refuses a head on an entry with `http` rules because it asks the upstream
// for another method than its request line's, or "": an `X-HTTP-Method-Override`,
// `X-HTTP-Method` or `X-Method-Override` field (any case) whose value is not exactly the
// request's method. Common stacks (Express method-override, Symfony, ASP.NET helpers, Google
// APIs) honour these, so `POST` + `X-HTTP-Method-Override: DELETE` would be a DELETE the rules
// never saw. (Query forms such as `?_method=DELETE` are not seen: rules never match queries.)
std::string http_method_override_refusal(const HttpHead& head);

}  // namespace soyaos::network
