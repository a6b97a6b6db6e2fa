#include "policy/http_rules.h"

#include <cstdint>

namespace soyaos::policy {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 3986 2.3: unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~"
bool is_unreserved(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

NormalisedPath refused(std::string reason) {
  NormalisedPath p;
  p.reason = std::move(reason);
  return p;
}

// `s` with every `%XX` decoded (the escapes normalise_http_path kept: reserved characters).
std::string decode_escapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const int hi = s[i] == '%' && i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
    if (lo < 0) {
      out += s[i];
      continue;
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// The path's segments after the leading `/` (empty ones included), as views into `s`.
std::vector<std::string_view> split_segments(std::string_view s) {
  std::vector<std::string_view> out;
  size_t at = 1;
  for (;;) {
    const size_t slash = s.find('/', at);
    out.push_back(s.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  return out;
}

// Segments for matching: a trailing `/` is a last, empty segment (`/dir/` is not `/dir`), and
// the root `/` is no segment at all.
std::vector<std::string_view> match_segments(std::string_view s) {
  std::vector<std::string_view> out = split_segments(s);
  if (out.size() == 1 && out.front().empty()) out.clear();
  return out;
}

}  // namespace

NormalisedPath normalise_http_path(std::string_view path) {
  if (path.empty() || path.front() != '/') return refused("the path does not start with `/`");
  // 1. Escapes: decode the unreserved ones, upper-case the hex of the others. `/`, NUL and `\`
  //    encoded are refused: a server that decodes them would see other segments than we match.
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '\\') return refused("a backslash in the path (some servers read it as `/`)");
    if (c != '%') {
      decoded += c;
      continue;
    }
    const int hi = i + 2 < path.size() ? hex_value(path[i + 1]) : -1;
    const int lo = i + 2 < path.size() ? hex_value(path[i + 2]) : -1;
    if (hi < 0 || lo < 0) return refused("a malformed percent-escape in the path");
    const auto v = static_cast<uint8_t>(hi * 16 + lo);
    if (v == '/') return refused("an encoded `/` (%2F) in the path");
    if (v == 0) return refused("an encoded NUL (%00) in the path");
    if (v == '\\') return refused("an encoded backslash (%5C) in the path");
    if (is_unreserved(v)) {
      decoded += static_cast<char>(v);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      decoded += '%';
      decoded += kHex[v >> 4];
      decoded += kHex[v & 0xf];
    }
    i += 2;
  }
  // `%25` + two hex digits, as it will be forwarded: a server (or a proxy in front of it) that
  // decodes twice sees `%2e`, `%2f`, ... and then `.` or `/`. Looked for after the decoding
  // above, so that `%25%32%65` (which it turns into `%252e`) is caught too. Every `%` in
  // `decoded` starts an escape. No API path needs an escaped escape.
  for (size_t at = decoded.find("%25"); at != std::string::npos; at = decoded.find("%25", at + 3)) {
    if (at + 4 < decoded.size() && hex_value(decoded[at + 3]) >= 0 && hex_value(decoded[at + 4]) >= 0) {
      return refused("a double-encoded escape (`" + decoded.substr(at, 5) + "`) in the path");
    }
  }
  // 2. Segments: drop empty and `.`, resolve `..`; never above the root.
  const std::vector<std::string_view> segments = split_segments(decoded);
  std::vector<std::string_view> kept;
  kept.reserve(segments.size());
  bool trailing_slash = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string_view seg = segments[i];
    const bool last = i + 1 == segments.size();
    // Servers that strip `;` parameters after decoding (`..%3B` -> `..;` -> `..`) resolve the
    // dot segment: the segment is looked at with its remaining escapes decoded too.
    const std::string plain = decode_escapes(seg);
    const std::string_view base = std::string_view(plain).substr(0, plain.find(';'));
    const bool dot = base == "." || base == "..";
    if (dot && seg != "." && seg != "..") {
      return refused("a dot segment with `;` parameters in the path (`" + std::string(seg.substr(0, 40)) + "`)");
    }
    if (seg.empty() || seg == ".") {
      if (last) trailing_slash = true;
      continue;
    }
    if (seg == "..") {
      if (kept.empty()) return refused("the path escapes `/` (a `..` above the root)");
      kept.pop_back();
      if (last) trailing_slash = true;
      continue;
    }
    kept.push_back(seg);
  }
  NormalisedPath out;
  out.path.reserve(decoded.size());
  for (std::string_view seg : kept) {
    out.path += '/';
    out.path += seg;
  }
  if (out.path.empty() || trailing_slash) out.path += '/';
  return out;
}

TargetParts split_target(std::string_view target) {
  TargetParts t;
  const size_t q = target.find('?');
  t.path = target.substr(0, q);
  if (q != std::string_view::npos) {
    t.query = target.substr(q + 1);
    t.has_query = true;
  }
  return t;
}

std::string http_pattern_error(std::string_view pattern) {
  if (pattern.empty() || pattern.front() != '/') return "a path pattern starts with `/`";
  if (pattern.find('?') != std::string_view::npos) return "a path pattern has no query (`?`): queries are not matched";
  const NormalisedPath n = normalise_http_path(pattern);
  if (!n.ok()) return n.reason;
  if (n.path != pattern) return "the path pattern is not normalised (write `" + n.path + "`)";
  const std::vector<std::string_view> segments = match_segments(pattern);
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string_view seg = segments[i];
    if (seg.find('*') == std::string_view::npos || seg == "*") continue;
    if (seg == "**" && i + 1 == segments.size()) continue;
    if (seg == "**") return "`**` is allowed only as the last segment (`/prefix/**`)";
    return "`*` matches a whole segment only (`/v1/*`, not `/v1/mod*`)";
  }
  return "";
}

bool http_path_matches(std::string_view pattern, std::string_view normalised_path) {
  const std::vector<std::string_view> pat = match_segments(pattern);
  const std::vector<std::string_view> path = match_segments(normalised_path);
  const bool rest = !pat.empty() && pat.back() == "**";
  const size_t fixed = rest ? pat.size() - 1 : pat.size();
  if (rest ? path.size() < fixed : path.size() != fixed) return false;
  for (size_t i = 0; i < fixed; ++i) {
    if (pat[i] == "*" ? path[i].empty() : pat[i] != path[i]) return false;
  }
  return true;
}

HttpRuleMatch match_http_rules(std::string_view method, std::string_view normalised_path,
                               const std::vector<manifest::HttpRule>& rules, std::string_view entry_key) {
  HttpRuleMatch m;
  if (rules.empty()) {
    m.allowed = true;
    m.rule = std::string(entry_key);
    return m;
  }
  const manifest::HttpRule* path_only = nullptr;
  for (const manifest::HttpRule& r : rules) {
    // Validation refuses most unnormalised patterns; what it lets through (`%7e` for `~`, a
    // trailing `/`) is compared in the same normal form as the request's path.
    const NormalisedPath pattern = normalise_http_path(r.path);
    if (!pattern.ok() || !http_path_matches(pattern.path, normalised_path)) continue;
    if (r.method == "*" || r.method == method) {
      m.allowed = true;
      m.rule = r.key_path;
      return m;
    }
    if (!path_only) path_only = &r;
  }
  const std::string request = std::string(method) + " " + std::string(normalised_path);
  if (path_only) {
    m.rule = path_only->key_path;
    m.reason = "no http rule of " + std::string(entry_key) + " allows " + request + " (" + path_only->key_path +
               " allows " + path_only->method + " " + path_only->path + ")";
  } else {
    m.rule = std::string(entry_key);
    m.reason = "no http rule of " + std::string(entry_key) + " allows " + request;
  }
  return m;
}

}  // namespace soyaos::policy
