// What HTTP/1.x requests and responses share (RFC 9110 5, RFC 9112 2 and 5), for the
// gateway's two head parsers (http_head.cc: requests; http_message.cc: responses and
// trailers): the character classes, one field line split and checked, and the head's line
// loop. The parts that differ by kind of message — the start line, what a field means (Host,
// Content-Length, Transfer-Encoding), what an unfinished line may already be refused for —
// are hooks. Private to src/network.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "network/parse_status.h"

namespace soyaos::network::http_syntax {

// RFC 9110 5.6.2: tchar.
inline bool is_tchar(uint8_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// RFC 9110 5.5: field-value bytes (VCHAR, obs-text, SP, HTAB).
inline bool is_field_byte(uint8_t c) { return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f); }

inline bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<uint8_t>(c)); });
}

inline bool all_field_bytes(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return is_field_byte(static_cast<uint8_t>(c)); });
}

inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

inline bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// OWS trimmed from both ends (RFC 9110 5.6.3).
inline std::string_view trim_ows(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// One complete field line (a header or a trailer field, RFC 9112 5): no obsolete line folding,
// a token name before the colon, no control byte in the value. The value comes back
// OWS-trimmed. Otherwise false, with `why` naming the fault.
bool split_field(std::string_view line, std::string_view* name, std::string_view* value, std::string* why);

// Where the line loop stopped.
struct HeadLines {
  ParseStatus status = ParseStatus::need_more;
  std::string reason;          // invalid: why
  size_t size = 0;             // complete: the head's bytes, the empty line included
  size_t lines = 0;            // lines complete so far (the start line included)
  std::string_view partial;    // need_more: the unfinished last line (may be empty)
};

// The head's line loop (RFC 9112 2.2): lines end in CRLF (a bare CR or LF is refused), the
// start line first, then at most `max_fields` field lines, then an empty line. `start(line,
// &why)` and `field(line, &why)` check one complete line and return false to refuse; when the
// input ends inside a line, its bytes are checked for what can never become valid (a bare CR,
// a control byte: "control byte in the WHAT head") and `partial(part, lines)` may refuse more
// (returns the reason, or "" to wait for more). `at_limit`: the input is as long as a head may
// be, so an unfinished head is refused ("head too large").
template <typename Start, typename Field, typename Partial>
HeadLines scan_head_lines(std::string_view in, bool at_limit, size_t max_fields, std::string_view what, Start start,
                          Field field, Partial partial) {
  HeadLines r;
  auto refuse = [&r](std::string why) {
    r.status = ParseStatus::invalid;
    r.reason = std::move(why);
    return r;
  };
  const std::string too_many = "more than " + std::to_string(max_fields) + " header fields";
  size_t at = 0;
  std::string why;
  for (;;) {
    const size_t lf = in.find('\n', at);
    if (lf == std::string_view::npos) {
      const std::string_view part = in.substr(at);
      for (size_t i = 0; i < part.size(); ++i) {
        const auto c = static_cast<uint8_t>(part[i]);
        if (c == '\r' && i + 1 < part.size()) return refuse("bare CR");
        if (c != '\r' && !is_field_byte(c)) return refuse("control byte in the " + std::string(what) + " head");
      }
      if (r.lines > 0 && !part.empty() && part != "\r" && r.lines > max_fields) return refuse(too_many);
      if (std::string early = partial(part, r.lines); !early.empty()) return refuse(std::move(early));
      if (at_limit) return refuse("head too large");
      r.partial = part;
      return r;
    }
    if (lf == at || in[lf - 1] != '\r') return refuse("bare LF");
    const std::string_view line = in.substr(at, lf - 1 - at);
    at = lf + 1;
    if (line.find('\r') != std::string_view::npos) return refuse("bare CR");
    if (r.lines == 0) {
      if (!start(line, &why)) return refuse(why);
    } else if (line.empty()) {
      break;
    } else {
      if (r.lines > max_fields) return refuse(too_many);
      if (!field(line, &why)) return refuse(why);
    }
    ++r.lines;
  }
  r.status = ParseStatus::complete;
  r.size = at;
  return r;
}

}  // namespace soyaos::network::http_syntax
