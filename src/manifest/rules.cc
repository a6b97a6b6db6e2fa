// Value-level manifest rules (rules.h) and the public path/host helpers (manifest.h).
#include "manifest/rules.h"

#include <arpa/inet.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace soyaos::manifest {
namespace {

bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum_lower(char c) { return is_lower(c) || is_digit(c); }

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = s.find(sep, start);
    if (at == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, at - start));
    start = at + 1;
  }
}

// Lower-case DNS name: labels of [a-z0-9-]{1,63} not starting/ending with '-', at most
// 253 characters, and a last label that is not all digits (that would be a mangled IP).
bool is_dns_name(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  const auto labels = split(s, '.');
  for (std::string_view label : labels) {
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!is_alnum_lower(c) && c != '-') return false;
    }
  }
  const std::string_view last = labels.back();
  return !std::all_of(last.begin(), last.end(), is_digit);
}

std::optional<std::string> canonical_ip(std::string_view s) {
  const std::string str(s);
  unsigned char buf[16];
  char text[INET6_ADDRSTRLEN];
  if (::inet_pton(AF_INET, str.c_str(), buf) == 1) {
    if (::inet_ntop(AF_INET, buf, text, sizeof text) == nullptr) return std::nullopt;
    return std::string(text);
  }
  if (::inet_pton(AF_INET6, str.c_str(), buf) == 1) {
    if (::inet_ntop(AF_INET6, buf, text, sizeof text) == nullptr) return std::nullopt;
    return std::string(text);
  }
  return std::nullopt;
}

// Semver numeric identifier: "0" or no leading zero.
bool is_numeric_id(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), is_digit)) return false;
  return s.size() == 1 || s[0] != '0';
}

bool is_semver_ident_char(char c) {
  return is_alnum_lower(c) || (c >= 'A' && c <= 'Z') || c == '-';
}

}  // namespace

bool is_normalised_absolute(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.size() > 4096) return false;
  if (path == "/") return true;
  if (path.back() == '/') return false;
  if (path.find('\0') != std::string::npos) return false;
  for (std::string_view part : split(std::string_view(path).substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

bool path_covers(const std::string& prefix, const std::string& path) {
  if (prefix == path) return true;
  if (prefix == "/") return !path.empty() && path[0] == '/';
  return path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
         path[prefix.size()] == '/';
}

bool is_comet_reserved(const std::string& path) {
  if (path == "/") return true;
  for (const char* r : {"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc", "/proc", "/dev"}) {
    if (path_covers(r, path)) return true;
  }
  return false;
}

bool is_private_scratch(const std::string& path) {
  return is_normalised_absolute(path) && !path_covers("/workdir", path) && !path_covers(path, "/workdir") &&
         !is_comet_reserved(path);
}

bool host_matches(const std::string& pattern, const std::string& host) {
  const std::string p = to_lower(pattern);
  const std::string h = to_lower(host);
  if (p.size() > 2 && p[0] == '*' && p[1] == '.') {
    const std::string_view suffix = std::string_view(p).substr(1);  // ".example.com"
    return h.size() > suffix.size() && h.compare(h.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  return p == h;
}

namespace detail {

bool is_pack_name(std::string_view s) {
  if (s.empty() || s.size() > 63 || !is_lower(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum_lower(c) || c == '-'; });
}

bool is_item_name(std::string_view s) {
  if (s.empty() || s.size() > 63 || !is_lower(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum_lower(c) || c == '-' || c == '_'; });
}

bool is_env_name(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  if (!((s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_'; });
}

bool is_semver(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  std::string_view build;
  if (const auto plus = s.find('+'); plus != std::string_view::npos) {
    build = s.substr(plus + 1);
    s = s.substr(0, plus);
    for (std::string_view id : split(build, '.')) {
      if (id.empty() || !std::all_of(id.begin(), id.end(), is_semver_ident_char)) return false;
    }
  }
  std::string_view pre;
  bool has_pre = false;
  if (const auto dash = s.find('-'); dash != std::string_view::npos) {
    has_pre = true;
    pre = s.substr(dash + 1);
    s = s.substr(0, dash);
  }
  const auto core = split(s, '.');
  if (core.size() != 3) return false;
  for (std::string_view n : core) {
    if (!is_numeric_id(n)) return false;
  }
  if (has_pre) {
    for (std::string_view id : split(pre, '.')) {
      if (id.empty() || !std::all_of(id.begin(), id.end(), is_semver_ident_char)) return false;
      // An all-digit identifier is numeric and must not have leading zeros.
      if (std::all_of(id.begin(), id.end(), is_digit) && !is_numeric_id(id)) return false;
    }
  }
  return true;
}

bool is_normalised_relative(std::string_view s) {
  if (s.empty() || s.size() > 4096 || s[0] == '/' || s.back() == '/') return false;
  for (std::string_view part : split(s, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
    if (part.find('\0') != std::string_view::npos) return false;
  }
  return true;
}

bool is_ip_literal(std::string_view host) { return canonical_ip(host).has_value(); }

std::optional<std::string> normalise_host(std::string_view s, bool allow_wildcard) {
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') {
    const std::string inner(s.substr(1, s.size() - 2));
    unsigned char buf[16];
    if (::inet_pton(AF_INET6, inner.c_str(), buf) != 1) return std::nullopt;
    return canonical_ip(inner);
  }
  if (auto ip = canonical_ip(s)) return ip;
  std::string lower = to_lower(s);
  if (allow_wildcard && lower.size() > 2 && lower[0] == '*' && lower[1] == '.') {
    const std::string_view suffix = std::string_view(lower).substr(2);
    if (!is_dns_name(suffix) || suffix.find('.') == std::string_view::npos) return std::nullopt;
    return lower;
  }
  if (!is_dns_name(lower)) return std::nullopt;
  return lower;
}

std::optional<ToolTarget> parse_tool_url(std::string_view url, std::string& why) {
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7F) {
      why = "must not contain spaces or control characters";
      return std::nullopt;
    }
  }
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) {
    why = "must be an absolute URL like https://HOST[:PORT]/PATH";
    return std::nullopt;
  }
  const std::string scheme = to_lower(url.substr(0, sep));
  ToolTarget t;
  if (scheme == "https" || scheme == "wss") {
    t.protocol = Protocol::https;
    t.port = 443;
  } else if (scheme == "http" || scheme == "ws") {
    t.protocol = Protocol::http;
    t.port = 80;
  } else {
    why = "unsupported URL scheme \"" + scheme.substr(0, 16) + "\" (use https, http, wss or ws)";
    return std::nullopt;
  }
  std::string_view rest = url.substr(sep + 3);
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos) {
    why = "must not contain credentials (user@host)";
    return std::nullopt;
  }
  std::string_view host = authority;
  std::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      why = "unterminated IPv6 literal in URL host";
      return std::nullopt;
    }
    host = authority.substr(0, close + 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        why = "unexpected characters after the IPv6 host";
        return std::nullopt;
      }
      has_port = true;
      port = after.substr(1);
    }
  } else if (const auto colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    has_port = true;
  }
  if (host.empty()) {
    why = "URL has no host";
    return std::nullopt;
  }
  auto h = normalise_host(host, /*allow_wildcard=*/false);
  if (!h || (host[0] != '[' && h->find(':') != std::string::npos)) {
    why = "URL host must be a DNS name, an IPv4 address or a [bracketed] IPv6 address";
    return std::nullopt;
  }
  t.host = *h;
  if (has_port) {
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), is_digit)) {
      why = "URL port must be an integer 1..65535";
      return std::nullopt;
    }
    const unsigned long p = std::stoul(std::string(port));
    if (p < 1 || p > 65535) {
      why = "URL port must be an integer 1..65535";
      return std::nullopt;
    }
    t.port = static_cast<uint16_t>(p);
  }
  return t;
}

namespace {

// Splits "123Mi" into its number and unit; nullopt when there is no leading number or
// the number overflows.
std::optional<std::pair<uint64_t, std::string_view>> number_and_unit(std::string_view s) {
  std::size_t i = 0;
  uint64_t n = 0;
  while (i < s.size() && is_digit(s[i])) {
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (n > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;
    n = n * 10 + d;
    ++i;
  }
  if (i == 0 || i > 20) return std::nullopt;
  return std::pair{n, s.substr(i)};
}

std::optional<uint64_t> scaled(uint64_t n, uint64_t factor) {
  if (factor != 0 && n > std::numeric_limits<uint64_t>::max() / factor) return std::nullopt;
  return n * factor;
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view s) {
  const auto nu = number_and_unit(s);
  if (!nu) return std::nullopt;
  const auto [n, unit] = *nu;
  static constexpr std::pair<std::string_view, uint64_t> kUnits[] = {
      {"", 1},
      {"k", 1000ULL},
      {"K", 1000ULL},
      {"M", 1000ULL * 1000},
      {"G", 1000ULL * 1000 * 1000},
      {"T", 1000ULL * 1000 * 1000 * 1000},
      {"Ki", 1ULL << 10},
      {"Mi", 1ULL << 20},
      {"Gi", 1ULL << 30},
      {"Ti", 1ULL << 40},
  };
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) return scaled(n, factor);
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_duration_ms(std::string_view s) {
  const auto nu = number_and_unit(s);
  if (!nu) return std::nullopt;
  const auto [n, unit] = *nu;
  static constexpr std::pair<std::string_view, uint64_t> kUnits[] = {
      {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}};
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) return scaled(n, factor);
  }
  return std::nullopt;
}

}  // namespace detail
}  // namespace soyaos::manifest
