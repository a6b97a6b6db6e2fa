#include "network/http_head.h"

#include <algorithm>
#include <charconv>

#include "network/http_syntax.h"

namespace soyaos::network {
namespace {

using http_syntax::all_digits;
using http_syntax::iequals;
using http_syntax::is_tchar;
using http_syntax::lower;

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

bool fail(std::string& why, std::string reason) {
  why = std::move(reason);
  return false;
}

template <typename T>
T to_number(std::string_view digits) {
  T n = 0;
  (void)std::from_chars(digits.data(), digits.data() + digits.size(), n);  // callers checked the digits and length
  return n;
}

HttpHeadParse invalid(std::string reason) {
  HttpHeadParse p;
  p.status = ParseStatus::invalid;
  p.reason = "http: " + std::move(reason);
  return p;
}

// A DNS host name as the gateway matches it: letters, digits, '-', '_', dots between
// non-empty labels of at most 63 bytes, at most 253 bytes; lower-cased into `out`.
bool parse_reg_name(std::string_view s, std::string& out) {
  if (s.empty() || s.size() > 253) return false;
  size_t label = 0;
  out.clear();
  for (char c : s) {
    c = lower(c);
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') {
      if (++label > 63) return false;
    } else {
      return false;
    }
    out += c;
  }
  return label != 0;
}

// RFC 9110 7.2: Host = uri-host [ ":" port ]; we accept a reg-name or an IP literal.
bool parse_host(std::string_view v, HttpHead& h, std::string& why) {
  std::string_view host = v;
  std::string_view port;
  bool has_port = false;
  if (!v.empty() && v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string_view::npos) return fail(why, "Host has an unclosed IPv6 bracket");
    const std::string_view inner = v.substr(1, close - 1);
    const bool ok = inner.size() >= 2 && inner.size() <= 45 && inner.find(':') != std::string_view::npos &&
                    std::all_of(inner.begin(), inner.end(), [](char c) {
                      c = lower(c);
                      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == ':' || c == '.';
                    });
    if (!ok) return fail(why, "Host has an invalid IPv6 literal");
    // Built with push_back, not `h.host = "["`: GCC 12 at -O3 reports a false -Wrestrict
    // (GCC PR 105329) for assigning a literal to a std::string here.
    std::string literal;
    literal.reserve(inner.size() + 2);
    literal.push_back('[');
    for (char c : inner) literal.push_back(lower(c));
    literal.push_back(']');
    h.host = std::move(literal);
    const std::string_view rest = v.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return fail(why, "Host has bytes after its IPv6 literal");
      has_port = true;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = v.find(':');
    if (colon != std::string_view::npos) {
      host = v.substr(0, colon);
      port = v.substr(colon + 1);
      has_port = true;
    }
    if (!parse_reg_name(host, h.host)) return fail(why, "Host is not a valid host name");
  }
  if (has_port) {
    if (!all_digits(port) || port.size() > 5) return fail(why, "Host has an invalid port");
    const auto n = to_number<uint32_t>(port);
    if (n == 0 || n > 65535) return fail(why, "Host port out of range");
    h.port = static_cast<uint16_t>(n);
  }
  return true;
}

bool parse_request_line(std::string_view line, HttpHead& h, std::string& why) {
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return fail(why, "request line has no method");
  h.method = std::string(line.substr(0, sp1));
  if (!std::all_of(h.method.begin(), h.method.end(), [](char c) { return is_tchar(static_cast<uint8_t>(c)); })) {
    return fail(why, "method is not a token");
  }
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return fail(why, "request line has no target");
  h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  for (char c : h.target) {
    const auto u = static_cast<uint8_t>(c);
    if (u < 0x21 || u > 0x7e || c == '#') return fail(why, "request target has a byte that is not allowed");
  }
  const std::string_view version = line.substr(sp2 + 1);
  if (version == "HTTP/1.1") {
    h.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    h.minor_version = 0;
  } else {
    return fail(why, "version is not HTTP/1.0 or HTTP/1.1");
  }
  const std::string_view t = h.target;
  if (h.method == "CONNECT") {
    h.target_form = TargetForm::authority;
    return true;
  }
  if (t == "*") {
    if (h.method != "OPTIONS") return fail(why, "asterisk target with a method other than OPTIONS");
    h.target_form = TargetForm::asterisk;
    return true;
  }
  if (t.front() == '/') {
    h.target_form = TargetForm::origin;
    return true;
  }
  // absolute-form: scheme ":" ... (RFC 3986 3.1: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ))
  const size_t colon = t.find(':');
  const auto scheme_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
  };
  if (colon != std::string_view::npos && colon > 0 && ((t[0] | 0x20) >= 'a' && (t[0] | 0x20) <= 'z') &&
      std::all_of(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(colon), scheme_char)) {
    h.target_form = TargetForm::absolute;
    return true;
  }
  return fail(why, "request target is not in origin, absolute, authority or asterisk form");
}

struct FieldState {
  size_t hosts = 0;
  size_t content_lengths = 0;
  size_t transfer_encodings = 0;
};

// The request's hook of the shared field loop (http_syntax.h): what Host, Content-Length and
// Transfer-Encoding mean here, and which fields can name another host.
bool parse_field(std::string_view line, HttpHead& h, FieldState& st, std::string& why) {
  std::string_view name, value;
  if (!http_syntax::split_field(line, &name, &value, &why)) return false;
  if (iequals(name, "host")) {
    if (++st.hosts > 1) return fail(why, "more than one Host field");
    if (!parse_host(value, h, why)) return false;
  } else if (iequals(name, "content-length")) {
    if (++st.content_lengths > 1) return fail(why, "more than one Content-Length field");
    if (!all_digits(value) || value.size() > 18) return fail(why, "Content-Length is not a decimal number");
    h.content_length = to_number<uint64_t>(value);
  } else if (iequals(name, "transfer-encoding")) {
    if (++st.transfer_encodings > 1) return fail(why, "more than one Transfer-Encoding field");
    std::string_view last = value.substr(value.rfind(',') == std::string_view::npos ? 0 : value.rfind(',') + 1);
    while (!last.empty() && (last.front() == ' ' || last.front() == '\t')) last.remove_prefix(1);
    if (!iequals(last, "chunked")) return fail(why, "Transfer-Encoding does not end with chunked");
    h.chunked = true;
  }
  if (iequals(name, "forwarded") || istarts_with(name, "x-forwarded-") || istarts_with(name, "proxy-")) {
    h.proxy_fields = true;
  }
  h.fields.emplace_back(std::string(name), std::string(value));
  return true;
}

}  // namespace

std::string_view to_string(TargetForm f) {
  switch (f) {
    case TargetForm::origin: return "origin";
    case TargetForm::absolute: return "absolute";
    case TargetForm::authority: return "authority";
    case TargetForm::asterisk: return "asterisk";
  }
  return "unknown";
}

HttpHeadParse parse_http_head(std::span<const uint8_t> bytes) {
  const std::string_view in(reinterpret_cast<const char*>(bytes.data()), std::min(bytes.size(), kHttpMaxHead));
  HttpHeadParse p;
  HttpHead& h = p.head;
  FieldState st;
  const auto scan = http_syntax::scan_head_lines(
      in, bytes.size() >= kHttpMaxHead, kHttpMaxFields, "request",
      [&h](std::string_view line, std::string* why) { return parse_request_line(line, h, *why); },
      [&h, &st](std::string_view line, std::string* why) { return parse_field(line, h, st, *why); },
      // An unfinished line: reject what can already be seen to be wrong.
      [](std::string_view part, size_t lines) -> std::string {
        if (lines == 0) {
          const std::string_view method = part.substr(0, part.find(' '));
          if (!std::all_of(method.begin(), method.end(), [](char c) { return is_tchar(static_cast<uint8_t>(c)); })) {
            return "method is not a token";
          }
          if (!part.empty() && part.front() == ' ') return "request line has no method";
        } else if (!part.empty() && part != "\r") {
          if (part.front() == ' ' || part.front() == '\t') return "obsolete line folding";
          const std::string_view name = part.substr(0, part.find(':'));
          if (!std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(static_cast<uint8_t>(c)); })) {
            return "header field name is not a token";
          }
        }
        return "";
      });
  if (scan.status == ParseStatus::invalid) return invalid(scan.reason);
  if (scan.status == ParseStatus::need_more) {
    // The head ends with CRLF CRLF: a lower bound on what is still missing.
    const std::string_view part = scan.partial;
    size_t more = 0;
    if (part.empty()) {
      more = scan.lines > 0 ? 2 : 1;
    } else {
      more = (part.back() == '\r' ? 1 : 2) + 2;
      if (scan.lines > 0 && part == "\r") more = 1;
    }
    p.need = in.size() + more;
    return p;
  }
  // RFC 9112 3.2: HTTP/1.1 requires Host; but a request whose target carries the authority
  // (CONNECT host:port, or an absolute URI to a proxy) names its host there, and clients send
  // such requests without Host (Python's http.client: `CONNECT host:port HTTP/1.0`). A proxy
  // uses the target (RFC 9112 3.2.2). An origin-form request still needs its Host.
  if (st.hosts == 0 && h.target_form != TargetForm::authority && h.target_form != TargetForm::absolute) {
    return invalid("no Host field");
  }
  h.has_host = st.hosts > 0;
  if (h.chunked && h.content_length) return invalid("both Content-Length and Transfer-Encoding");
  if (h.chunked && h.minor_version == 0) return invalid("Transfer-Encoding in an HTTP/1.0 request");
  h.head_size = scan.size;
  p.status = ParseStatus::complete;
  return p;
}

namespace {

// The comma-separated elements of a field value, OWS trimmed (RFC 9110 5.6.1).
std::vector<std::string_view> list_elements(std::string_view v) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = v.find(',', start);
    std::string_view e = v.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
    if (!e.empty()) out.push_back(e);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// Forwarded (RFC 7239): some forwarded-element carries a host= parameter.
bool forwarded_names_host(std::string_view value) {
  for (std::string_view element : list_elements(value)) {
    size_t start = 0;
    for (;;) {
      const size_t semi = element.find(';', start);
      std::string_view pair = element.substr(start, semi == std::string_view::npos ? std::string_view::npos : semi - start);
      while (!pair.empty() && (pair.front() == ' ' || pair.front() == '\t')) pair.remove_prefix(1);
      if (istarts_with(pair, "host=")) return true;
      if (semi == std::string_view::npos) break;
      start = semi + 1;
    }
  }
  return false;
}

}  // namespace

std::string http_entry_refusal(const HttpHead& head) {
  if (head.target.rfind("//", 0) == 0) {
    return "the request target `" + head.target.substr(0, 80) + "` starts with `//` (a scheme-relative URL naming another host)";
  }
  static constexpr std::string_view kHostFields[] = {"x-forwarded-host", "x-forwarded-server", "x-host",
                                                     "x-http-host-override", "x-original-host", "x-original-url",
                                                     "x-rewrite-url"};
  for (const auto& [name, value] : head.fields) {
    for (std::string_view f : kHostFields) {
      if (iequals(name, f)) return "a `" + name + "` field (it can name another host than Host)";
    }
    if (iequals(name, "forwarded") && forwarded_names_host(value)) {
      return "a `Forwarded` field with host= (it can name another host than Host)";
    }
    if (iequals(name, "http2-settings")) return "an `HTTP2-Settings` field: cleartext HTTP/2 (h2c) is refused";
    if (iequals(name, "upgrade")) {
      for (std::string_view token : list_elements(value)) {
        if (iequals(token, "h2c")) return "`Upgrade: h2c`: cleartext HTTP/2 is refused";
      }
    }
  }
  return "";
}

std::string http_method_override_refusal(const HttpHead& head) {
  static constexpr std::string_view kMethodFields[] = {"x-http-method-override", "x-http-method", "x-method-override"};
  for (const auto& [name, value] : head.fields) {
    for (std::string_view f : kMethodFields) {
      if (iequals(name, f) && value != head.method) {
        return "a `" + name + ": " + value.substr(0, 40) + "` field on a " + head.method +
               " request (it asks the server for another method than the http rules checked)";
      }
    }
  }
  return "";
}

}  // namespace soyaos::network
