#include "oci/reference.h"

#include <cstdint>

namespace soyaos::oci {
namespace {

constexpr std::size_t kMaxNameLength = 255;
constexpr std::size_t kMaxTagLength = 128;

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }
bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool valid_component(std::string_view c) {
  if (c.empty() || !is_lower_alnum(c.front()) || !is_lower_alnum(c.back())) return false;
  for (std::size_t i = 0; i < c.size();) {
    if (is_lower_alnum(c[i])) {
      ++i;
      continue;
    }
    // A separator run: ".", "_", "__" or one or more '-', then an alphanumeric.
    std::size_t j = i;
    if (c[i] == '.') {
      j = i + 1;
    } else if (c[i] == '_') {
      j = i + 1;
      if (j < c.size() && c[j] == '_') ++j;
    } else if (c[i] == '-') {
      while (j < c.size() && c[j] == '-') ++j;
    } else {
      return false;
    }
    if (j >= c.size() || !is_lower_alnum(c[j])) return false;
    i = j;
  }
  return true;
}

bool valid_label(std::string_view l) {
  if (l.empty() || l.size() > 63 || !is_alnum(l.front()) || !is_alnum(l.back())) return false;
  for (char c : l) {
    if (!is_alnum(c) && c != '-') return false;
  }
  return true;
}

bool valid_port(std::string_view p) {
  if (p.empty() || p.size() > 5 || p.front() == '0') return false;
  uint32_t v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  return v >= 1 && v <= 65535;
}

// An IPv6 literal's inside: hex digits, ':' and '.' (an embedded v4), at least two ':'.
bool plausible_ipv6(std::string_view s) {
  if (s.empty() || s.size() > 45) return false;
  int colons = 0;
  for (char c : s) {
    if (c == ':') {
      ++colons;
    } else if (!is_hex(c) && !(c >= 'A' && c <= 'F') && c != '.') {
      return false;
    }
  }
  return colons >= 2 && s.find(":::") == std::string_view::npos;
}

// host[:port] where host is a DNS name / IPv4 literal, or [v6][:port].
bool valid_registry(std::string_view r, std::string& why) {
  std::string_view host = r, port;
  if (!r.empty() && r.front() == '[') {
    const auto close = r.find(']');
    if (close == std::string_view::npos) {
      why = "the registry's IPv6 address lacks its ']'";
      return false;
    }
    host = r.substr(1, close - 1);
    std::string_view rest = r.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        why = "unexpected characters after the registry's IPv6 address";
        return false;
      }
      port = rest.substr(1);
      if (!valid_port(port)) {
        why = "the registry's port is not a number in 1..65535";
        return false;
      }
    }
    if (!plausible_ipv6(host)) {
      why = "the registry's IPv6 address is not valid";
      return false;
    }
    return true;
  }
  if (const auto colon = r.find(':'); colon != std::string_view::npos) {
    host = r.substr(0, colon);
    port = r.substr(colon + 1);
    if (!valid_port(port)) {
      why = "the registry's port is not a number in 1..65535";
      return false;
    }
  }
  if (host.empty() || host.size() > 253) {
    why = "the registry's host name is empty or too long";
    return false;
  }
  for (std::size_t start = 0;;) {
    const auto dot = host.find('.', start);
    if (!valid_label(host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start))) {
      why = "the registry's host name is not a valid DNS name or address";
      return false;
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (host.find('.') == std::string_view::npos && port.empty() && host != "localhost") {
    why = "the first component must be a registry (a host name with a '.', a :PORT, or localhost)";
    return false;
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

bool valid_digest(std::string_view d) {
  constexpr std::string_view kPrefix = "sha256:";
  if (d.size() != kPrefix.size() + 64 || d.substr(0, kPrefix.size()) != kPrefix) return false;
  for (char c : d.substr(kPrefix.size())) {
    if (!is_hex(c)) return false;
  }
  return true;
}

std::string Reference::str() const {
  std::string s = registry + "/" + repository;
  if (!tag.empty()) s += ":" + tag;
  if (!digest.empty()) s += "@" + digest;
  return s;
}

bool looks_remote(std::string_view text) { return text.find('/') != std::string_view::npos; }

std::string registry_host(std::string_view registry) {
  if (!registry.empty() && registry.front() == '[') {
    const auto close = registry.find(']');
    return std::string(registry.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  return std::string(registry.substr(0, registry.find(':')));
}

std::optional<Reference> parse_reference(std::string_view text, std::string& why) {
  auto fail = [&](const std::string& what) -> std::optional<Reference> {
    why = "not a registry reference (REGISTRY[:PORT]/REPO[:TAG][@sha256:HEX]): " + what;
    return std::nullopt;
  };
  if (text.empty()) return fail("it is empty");
  if (text.size() > 1024) return fail("it is longer than 1024 characters");
  for (char c : text) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return fail("it contains a space, a control or a non-ASCII character");
    }
  }
  Reference ref;
  std::string_view rest = text;
  if (const auto at = rest.find('@'); at != std::string_view::npos) {
    const std::string_view d = rest.substr(at + 1);
    if (!valid_digest(d)) return fail("the digest must be sha256: followed by 64 lower-case hex digits");
    ref.digest = std::string(d);
    rest = rest.substr(0, at);
  }
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) return fail("it names no registry (REGISTRY/REPO)");
  const std::string_view registry = rest.substr(0, slash);
  std::string rwhy;
  if (!valid_registry(registry, rwhy)) return fail(rwhy);
  ref.registry = lower(registry);
  std::string_view path = rest.substr(slash + 1);
  // The tag follows the last ':' after the last '/' (a registry port is before the '/').
  const auto last_slash = path.rfind('/');
  const auto colon = path.find(':', last_slash == std::string_view::npos ? 0 : last_slash);
  if (colon != std::string_view::npos) {
    const std::string_view tag = path.substr(colon + 1);
    if (tag.empty() || tag.size() > kMaxTagLength) return fail("the tag is empty or longer than 128 characters");
    if (!(is_alnum(tag.front()) || tag.front() == '_')) return fail("the tag must start with a letter, digit or '_'");
    for (char c : tag) {
      if (!is_alnum(c) && c != '_' && c != '.' && c != '-') return fail("the tag may hold only letters, digits, '_', '.' and '-'");
    }
    ref.tag = std::string(tag);
    path = path.substr(0, colon);
  }
  if (path.empty()) return fail("the repository is empty");
  for (std::size_t start = 0;;) {
    const auto s = path.find('/', start);
    const std::string_view comp = path.substr(start, s == std::string_view::npos ? std::string_view::npos : s - start);
    if (!valid_component(comp)) {
      return fail("repository component \"" + std::string(comp) +
                  "\" must be lower-case letters and digits, separated by '.', '_', '__' or '-'");
    }
    if (s == std::string_view::npos) break;
    start = s + 1;
  }
  ref.repository = std::string(path);
  if (ref.registry.size() + 1 + ref.repository.size() > kMaxNameLength) {
    return fail("REGISTRY/REPO is longer than 255 characters");
  }
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

}  // namespace soyaos::oci
