#include "network/http_message.h"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "network/http_syntax.h"

namespace soyaos::network {
namespace {

using http_syntax::all_digits;
using http_syntax::iequals;
using http_syntax::is_field_byte;
using http_syntax::lower;
using http_syntax::trim_ows;

// The comma-separated elements of every field named `name`, OWS trimmed (RFC 9110 5.6.1).
std::vector<std::string_view> list_of(const std::vector<std::pair<std::string, std::string>>& fields,
                                      std::string_view name) {
  std::vector<std::string_view> out;
  for (const auto& [n, v] : fields) {
    if (!iequals(n, name)) continue;
    std::string_view rest = v;
    for (;;) {
      const size_t comma = rest.find(',');
      const std::string_view e = trim_ows(rest.substr(0, comma));
      if (!e.empty()) out.push_back(e);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

bool has_token(const std::vector<std::string_view>& list, std::string_view token) {
  return std::any_of(list.begin(), list.end(), [&](std::string_view e) { return iequals(e, token); });
}

HttpResponseParse invalid(std::string reason) {
  HttpResponseParse p;
  p.status = ParseStatus::invalid;
  p.reason = "http response: " + std::move(reason);
  return p;
}

bool parse_status_line(std::string_view line, HttpResponseHead& h, std::string& why) {
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ') {
    why = "status line is not `HTTP/1.x NNN`";
    return false;
  }
  h.minor_version = line[7] - '0';
  const std::string_view code = line.substr(9, 3);
  if (!all_digits(code) || code[0] == '0') {
    why = "status code is not three digits";
    return false;
  }
  h.status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
  const std::string_view rest = line.substr(12);
  if (!rest.empty() && rest.front() != ' ') {
    why = "status code is not followed by a space";
    return false;
  }
  const std::string_view reason = rest.empty() ? rest : rest.substr(1);
  if (!std::all_of(reason.begin(), reason.end(), [](char c) { return is_field_byte(static_cast<uint8_t>(c)); })) {
    why = "reason phrase has a control byte";
    return false;
  }
  h.reason = std::string(reason);
  return true;
}

// The response's hook of the shared field loop (http_syntax.h): Content-Length (repeated only
// with the same value) and Transfer-Encoding (counted; its codings are read after the head).
bool parse_response_field(std::string_view line, HttpResponseHead& h, size_t* transfer_encodings, std::string& why) {
  std::string_view name, value;
  if (!http_syntax::split_field(line, &name, &value, &why)) return false;
  if (iequals(name, "content-length")) {
    if (!all_digits(value) || value.size() > 18) {
      why = "Content-Length is not a decimal number";
      return false;
    }
    uint64_t n = 0;
    (void)std::from_chars(value.data(), value.data() + value.size(), n);  // digits checked, at most 18
    if (h.content_length && *h.content_length != n) {
      why = "two different Content-Length values";
      return false;
    }
    h.content_length = n;
  } else if (iequals(name, "transfer-encoding")) {
    ++*transfer_encodings;
  }
  h.fields.emplace_back(std::string(name), std::string(value));
  return true;
}

}  // namespace

bool method_defines_no_body(std::string_view method) {
  // DELETE and OPTIONS may carry bodies in practice (GitHub's "delete a file" sends one,
  // Kubernetes' DeleteOptions): they are not refused (review R2 G4). An upstream that leaves
  // such a body unread is the same residual as a POST answered before its body is read
  // (docs/http-rules.md).
  static constexpr std::string_view kBodiless[] = {"GET", "HEAD", "TRACE", "CONNECT"};
  return std::any_of(std::begin(kBodiless), std::end(kBodiless), [&](std::string_view m) { return iequals(m, method); });
}

std::string_view to_string(BodyKind k) {
  switch (k) {
    case BodyKind::none: return "none";
    case BodyKind::length: return "length";
    case BodyKind::chunked: return "chunked";
    case BodyKind::until_close: return "until_close";
  }
  return "unknown";
}

RequestTraitsResult request_traits(const HttpHead& head) {
  RequestTraitsResult r;
  RequestTraits& t = r.traits;
  const auto te = list_of(head.fields, "transfer-encoding");
  if (method_defines_no_body(head.method) && (head.chunked || (head.content_length && *head.content_length > 0))) {
    r.refusal = "a body on a " + head.method + " request (" +
                (head.chunked ? std::string("Transfer-Encoding") : "Content-Length " + std::to_string(*head.content_length)) +
                "): an upstream that ignores it would read it as another, unchecked request";
    return r;
  }
  if (head.chunked) {
    if (te.size() != 1 || !iequals(te.front(), "chunked")) {
      r.refusal = "a Transfer-Encoding other than exactly `chunked`";
      return r;
    }
    t.body.kind = BodyKind::chunked;
  } else if (head.content_length && *head.content_length > 0) {
    t.body = {BodyKind::length, *head.content_length};
  }
  const auto upgrade = list_of(head.fields, "upgrade");
  for (std::string_view u : upgrade) {
    const std::string_view protocol = u.substr(0, u.find('/'));
    if (!iequals(protocol, "websocket")) {
      r.refusal = "`Upgrade: " + std::string(u.substr(0, 40)) + "`: only websocket upgrades are relayed";
      return r;
    }
  }
  if (!upgrade.empty()) {
    if (head.method != "GET") {
      r.refusal = "a websocket upgrade with " + head.method + " (it must be a GET)";
      return r;
    }
    t.upgrade = true;
  }
  for (std::string_view e : list_of(head.fields, "expect")) {
    if (iequals(e, "100-continue")) t.expect_continue = true;
  }
  const auto connection = list_of(head.fields, "connection");
  t.close = has_token(connection, "close") || (head.minor_version == 0 && !has_token(connection, "keep-alive"));
  return r;
}

HttpResponseParse parse_http_response_head(std::span<const uint8_t> bytes) {
  const std::string_view in(reinterpret_cast<const char*>(bytes.data()), std::min(bytes.size(), kHttpMaxHead));
  HttpResponseParse p;
  HttpResponseHead& h = p.head;
  size_t transfer_encodings = 0;
  const auto scan = http_syntax::scan_head_lines(
      in, bytes.size() >= kHttpMaxHead, kHttpMaxFields, "response",
      [&h](std::string_view line, std::string* why) { return parse_status_line(line, h, *why); },
      [&h, &transfer_encodings](std::string_view line, std::string* why) {
        return parse_response_field(line, h, &transfer_encodings, *why);
      },
      [](std::string_view part, size_t lines) -> std::string {
        if (lines == 0 && !part.empty()) {
          const std::string_view prefix = std::string_view("HTTP/1.").substr(0, std::min<size_t>(part.size(), 7));
          if (part.substr(0, prefix.size()) != prefix) return "status line is not `HTTP/1.x NNN`";
        }
        return "";
      });
  if (scan.status == ParseStatus::invalid) return invalid(scan.reason);
  if (scan.status == ParseStatus::need_more) return p;
  if (transfer_encodings > 0) {
    const auto te = list_of(h.fields, "transfer-encoding");
    if (te.empty()) return invalid("an empty Transfer-Encoding");
    if (h.content_length) return invalid("both Content-Length and Transfer-Encoding");
    h.chunked = iequals(te.back(), "chunked");
    h.other_coding = !h.chunked;
  }
  h.head_size = scan.size;
  p.status = ParseStatus::complete;
  return p;
}

BodyFraming response_body(std::string_view request_method, const HttpResponseHead& head) {
  if (request_method == "HEAD" || head.status < 200 || head.status == 204 || head.status == 304) return {};
  if (request_method == "CONNECT" && head.status < 300) return {};
  if (head.chunked) return {BodyKind::chunked, 0};
  if (head.other_coding) return {BodyKind::until_close, 0};
  if (head.content_length) {
    if (*head.content_length == 0) return {};
    return {BodyKind::length, *head.content_length};
  }
  return {BodyKind::until_close, 0};
}

bool response_is_upgrade(const HttpResponseHead& head) {
  if (head.status != 101 || !has_token(list_of(head.fields, "connection"), "upgrade")) return false;
  const auto upgrade = list_of(head.fields, "upgrade");
  return std::any_of(upgrade.begin(), upgrade.end(),
                     [](std::string_view u) { return iequals(u.substr(0, u.find('/')), "websocket"); });
}

BodyFramer::BodyFramer(BodyFraming framing) : kind_(framing.kind) {
  switch (framing.kind) {
    case BodyKind::none: state_ = State::done; break;
    case BodyKind::length:
      remaining_ = framing.length;
      state_ = remaining_ == 0 ? State::done : State::length;
      break;
    case BodyKind::chunked: state_ = State::size_line; break;
    case BodyKind::until_close: state_ = State::until_close; break;
  }
}

// The chunk-size line is complete (in line_): RFC 9112 7.1, chunk-size [ chunk-ext ].
std::string BodyFramer::end_line(bool* last_chunk) {
  const std::string_view line = line_;
  size_t digits = 0;
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (lower(c) >= 'a' && lower(c) <= 'f'); };
  while (digits < line.size() && hex(line[digits])) ++digits;
  if (digits == 0) return "chunk size is not hexadecimal";
  if (digits > 16) return "chunk size too large";
  uint64_t size = 0;
  (void)std::from_chars(line.data(), line.data() + digits, size, 16);  // at most 16 hex digits: fits
  // chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ): only printable bytes, after a `;`.
  std::string_view ext = line.substr(digits);
  while (!ext.empty() && (ext.front() == ' ' || ext.front() == '\t')) ext.remove_prefix(1);
  if (!ext.empty() && ext.front() != ';') return "bytes after the chunk size that are not an extension";
  if (!std::all_of(ext.begin(), ext.end(), [](char c) { return is_field_byte(static_cast<uint8_t>(c)); })) {
    return "chunk extension has a control byte";
  }
  *last_chunk = size == 0;
  remaining_ = size;
  return "";
}

// A trailer line is complete: empty ends the message, otherwise a field line.
std::string BodyFramer::end_trailer_line(bool* end) {
  const std::string_view line = line_;
  if (line.empty()) {
    *end = true;
    return "";
  }
  if (++trailer_fields_ > kHttpMaxFields) return "more than 100 trailer fields";
  std::string_view name, value;
  std::string why;
  if (!http_syntax::split_field(line, &name, &value, &why)) return why + " in the trailer section";
  return "";
}

BodyFramer::Step BodyFramer::feed(std::span<const uint8_t> in) {
  Step s;
  size_t i = 0;
  auto fail = [&](std::string why) {
    s.consumed = i;
    s.error = "chunked body: " + std::move(why);
    return s;
  };
  auto data = [&](size_t offset, size_t n) {
    if (n == 0) return;
    if (!s.data.empty() && s.data.back().offset + s.data.back().size == offset) {
      s.data.back().size += n;
    } else {
      s.data.push_back({offset, n});
    }
  };
  while (i < in.size() && state_ != State::done) {
    switch (state_) {
      case State::length: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
        data(i, n);
        i += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::done;
        break;
      }
      case State::until_close:
        data(i, in.size() - i);
        i = in.size();
        break;
      case State::data: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
        data(i, n);
        i += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::data_cr;
        break;
      }
      case State::data_cr:
        if (in[i++] != '\r') return fail("chunk data is not followed by CRLF");
        state_ = State::data_lf;
        break;
      case State::data_lf:
        if (in[i++] != '\n') return fail("chunk data is not followed by CRLF");
        state_ = State::size_line;
        break;
      case State::size_line:
      case State::trailer_line: {
        const uint8_t c = in[i++];
        const bool trailer = state_ == State::trailer_line;
        if (trailer && ++trailer_bytes_ > kMaxTrailers) return fail("trailer section too large");
        if (line_cr_) {
          if (c != '\n') return fail("bare CR");
          line_cr_ = false;
          std::string why;
          if (trailer) {
            bool end = false;
            why = end_trailer_line(&end);
            if (why.empty() && end) state_ = State::done;
          } else {
            bool last = false;
            why = end_line(&last);
            if (why.empty()) state_ = last ? State::trailer_line : State::data;
          }
          line_.clear();
          if (!why.empty()) return fail(why);
          break;
        }
        if (c == '\r') {
          line_cr_ = true;
        } else if (c == '\n') {
          return fail("bare LF");
        } else {
          if (line_.size() >= kMaxChunkLine) return fail(trailer ? "trailer line too long" : "chunk-size line too long");
          line_ += static_cast<char>(c);
          if (trailer) data(i - 1, 1);
        }
        break;
      }
      case State::done: break;
    }
  }
  s.consumed = i;
  s.done = state_ == State::done;
  return s;
}

}  // namespace soyaos::network
