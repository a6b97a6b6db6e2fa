// moon.yaml (SPEC.md C6a): text -> MoonConfig, collecting every error. See config.h.
//
// The YAML goes through the manifest stage's bounded tree (manifest/yaml_tree.h) and is
// walked with a fixed schema, the way manifest/parser.cc walks soyapack.yaml: every
// mapping checked for unknown and duplicate keys, every value for its type and rule,
// each problem one Diagnostic with the key path and line:column of the offending node.
#include "moon/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <map>
#include <set>
#include <unordered_set>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "manifest/rules.h"
#include "manifest/yaml_tree.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using manifest::Diagnostic;
using manifest::Mark;
using manifest::detail::YNode;
using Kind = YNode::Kind;

const char* describe(const YNode& n) {
  switch (n.kind) {
    case Kind::null: return "nothing (null)";
    case Kind::scalar: return "a scalar";
    case Kind::sequence: return "a list";
    case Kind::mapping: return "a mapping";
  }
  return "?";
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  out += s.substr(0, 80);
  if (s.size() > 80) out += "...";
  return out + "\"";
}

std::string join(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

std::string index(std::string_view path, std::size_t i) { return std::string(path) + "[" + std::to_string(i) + "]"; }

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "1".."65535", no sign, no leading zero.
std::optional<uint16_t> port_number(std::string_view s) {
  if (!all_digits(s) || s.size() > 5 || s[0] == '0') return std::nullopt;
  unsigned long v = 0;
  for (char c : s) v = v * 10 + static_cast<unsigned long>(c - '0');
  if (v < 1 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

using Entries = std::vector<std::pair<std::string, const YNode*>>;

class ConfigParser {
 public:
  ConfigParser(const std::string& file, std::vector<Diagnostic>& errors) : file_(file), errors_(errors) {}

  void parse(const YNode& root, MoonConfig& c) {
    auto top = fields(root, "", {"dns", "egress", "proxy", "registries", "tls", "trust"});
    if (!top) return;
    for (const auto& [key, v] : *top) {
      if (key == "dns") parse_dns(*v, c.network);
      if (key == "egress") parse_egress(*v, c.network);
      if (key == "proxy") parse_proxy(*v, c);
      if (key == "tls") parse_tls(*v, c);
      if (key == "registries") parse_registries(*v, c);
      if (key == "trust") parse_trust(*v, c);
    }
  }

 private:
  const std::string& file_;
  std::vector<Diagnostic>& errors_;

  void error(const Mark& mark, std::string key_path, std::string message) {
    errors_.push_back(Diagnostic{file_, mark, std::move(key_path), std::move(message)});
  }

  // A mapping with plain keys, none twice, each in `allowed` (unless `any_keys`).
  std::optional<Entries> fields(const YNode& n, const std::string& path, std::initializer_list<std::string_view> allowed,
                                bool any_keys = false) {
    if (n.kind != Kind::mapping) {
      error(n.mark, path, std::string("must be a mapping, got ") + describe(n));
      return std::nullopt;
    }
    Entries out;
    std::map<std::string, Mark> first;
    for (std::size_t i = 0; i < n.map_size(); ++i) {
      const YNode& k = n.key(i);
      if (k.kind != Kind::scalar) {
        error(k.mark, path, std::string("keys must be plain strings, got ") + describe(k));
        continue;
      }
      const std::string key_path = join(path, k.value);
      if (const auto seen = first.find(k.value); seen != first.end()) {
        error(k.mark, key_path,
              "duplicate key (first defined at " + std::to_string(seen->second.line) + ":" +
                  std::to_string(seen->second.column) + ")");
        continue;
      }
      first.emplace(k.value, k.mark);
      if (!any_keys && std::find(allowed.begin(), allowed.end(), k.value) == allowed.end()) {
        std::string msg = "unknown key (allowed:";
        for (std::string_view a : allowed) msg += " " + std::string(a);
        error(k.mark, key_path, msg + ")");
        continue;
      }
      out.emplace_back(k.value, &n.val(i));
    }
    return out;
  }

  std::optional<std::string> string(const YNode& n, const std::string& path) {
    if (n.kind != Kind::scalar) {
      error(n.mark, path, std::string("must be a string, got ") + describe(n));
      return std::nullopt;
    }
    return n.value;
  }

  const YNode* list(const YNode& n, const std::string& path, const char* of) {
    if (n.kind != Kind::sequence) {
      error(n.mark, path, std::string("must be a list of ") + of + ", got " + describe(n));
      return nullptr;
    }
    return &n;
  }

  std::optional<policy::IpAddress> address(const YNode& n, const std::string& path) {
    auto s = string(n, path);
    if (!s) return std::nullopt;
    auto ip = policy::parse_ip(*s);
    if (!ip) error(n.mark, path, quote(*s) + " is not an IPv4 or IPv6 address");
    return ip;
  }

  void parse_dns(const YNode& n, policy::OperatorNetwork& net) {
    auto f = fields(n, "dns", {"hosts", "upstream"});
    if (!f) return;
    for (const auto& [key, v] : *f) {
      if (key == "hosts") parse_hosts(*v, net);
      if (key == "upstream") parse_upstream(*v, net);
    }
  }

  void parse_hosts(const YNode& n, policy::OperatorNetwork& net) {
    auto f = fields(n, "dns.hosts", {}, /*any_keys=*/true);
    if (!f) return;
    std::map<std::string, Mark> seen;  // normalised names: "Echo.test" and "echo.test" are one
    std::unordered_set<const YNode*> accepted;
    for (const auto& entry : *f) accepted.insert(entry.second);
    for (std::size_t i = 0; i < n.map_size(); ++i) {
      const YNode& k = n.key(i);
      if (accepted.count(&n.val(i)) == 0) continue;  // a bad or duplicate key, already reported
      const std::string path = join("dns.hosts", k.value);
      const auto name = manifest::detail::normalise_host(k.value, /*allow_wildcard=*/false);
      if (!name || manifest::detail::is_ip_literal(*name)) {
        error(k.mark, path, quote(k.value) + " must be a DNS name (no wildcards, no IP literals)");
        continue;
      }
      if (const auto it = seen.find(*name); it != seen.end()) {
        error(k.mark, path,
              "duplicate name (first defined at " + std::to_string(it->second.line) + ":" +
                  std::to_string(it->second.column) + ")");
        continue;
      }
      seen.emplace(*name, k.mark);
      const YNode& v = n.val(i);
      std::vector<policy::IpAddress> addrs;
      bool ok = true;
      if (v.kind == Kind::sequence) {
        if (v.items.empty()) {
          error(v.mark, path, "must list at least one address");
          ok = false;
        }
        for (std::size_t j = 0; j < v.items.size(); ++j) {
          if (auto a = address(v.items[j], index(path, j))) {
            addrs.push_back(*a);
          } else {
            ok = false;
          }
        }
      } else if (v.kind == Kind::scalar) {
        if (auto a = address(v, path)) {
          addrs.push_back(*a);
        } else {
          ok = false;
        }
      } else {
        error(v.mark, path, std::string("must be an address or a list of addresses, got ") + describe(v));
        ok = false;
      }
      if (ok) net.dns_hosts[*name] = std::move(addrs);
    }
  }

  void parse_upstream(const YNode& n, policy::OperatorNetwork& net) {
    const std::string path = "dns.upstream";
    if (n.kind == Kind::sequence) {
      // `upstream: [2001:db8::53]:53` unquoted is a YAML flow list; say what was meant.
      error(n.mark, path, "must be \"system\" or an address; quote a bracketed IPv6 address: \"[2001:db8::53]:53\"");
      return;
    }
    auto s = string(n, path);
    if (!s) return;
    if (*s == "system") {
      net.dns_upstream.reset();
      return;
    }
    static constexpr const char* kShape =
        " must be \"system\" or a DNS server address: 192.0.2.53, 192.0.2.53:5353, 2001:db8::53 or [2001:db8::53]:53";
    std::string_view text = *s;
    std::string_view port_text;
    bool has_port = false;
    if (!text.empty() && text.front() == '[') {
      const auto close = text.find(']');
      if (close != std::string_view::npos && close + 1 < text.size()) {
        if (text[close + 1] != ':') return error(n.mark, path, quote(*s) + kShape);
        port_text = text.substr(close + 2);
        has_port = true;
        text = text.substr(0, close + 1);
      }
    } else if (std::count(text.begin(), text.end(), ':') == 1) {  // IPv4:PORT (IPv6 has >= 2)
      const auto colon = text.find(':');
      port_text = text.substr(colon + 1);
      has_port = true;
      text = text.substr(0, colon);
    }
    const auto ip = policy::parse_ip(text);
    if (!ip) return error(n.mark, path, quote(*s) + kShape);
    policy::DnsUpstream up{*ip, 53};
    if (has_port) {
      const auto port = port_number(port_text);
      if (!port) return error(n.mark, path, quote(*s) + ": the port must be an integer 1..65535");
      up.port = *port;
    }
    net.dns_upstream = up;
  }

  void parse_egress(const YNode& n, policy::OperatorNetwork& net) {
    auto f = fields(n, "egress", {"deny", "allow_private", "connect_to"});
    if (!f) return;
    for (const auto& [key, v] : *f) {
      if (key == "deny") parse_deny(*v, net);
      if (key == "allow_private") parse_allow_private(*v, net);
      if (key == "connect_to") parse_connect_to(*v, net);
    }
  }

  // "HOST:PORT" / "[V6]:PORT" -> (host text, port); nullopt when there is no :PORT or the
  // port is not 1..65535.
  static std::optional<std::pair<std::string, uint16_t>> host_port(std::string_view s) {
    std::string_view host;
    std::string_view port;
    if (!s.empty() && s.front() == '[') {
      const auto close = s.find(']');
      if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') return std::nullopt;
      host = s.substr(0, close + 1);
      port = s.substr(close + 2);
    } else {
      const auto colon = s.rfind(':');
      if (colon == std::string_view::npos || s.find(':') != colon) return std::nullopt;  // bare IPv6: use brackets
      host = s.substr(0, colon);
      port = s.substr(colon + 1);
    }
    const auto p = port_number(port);
    if (host.empty() || !p) return std::nullopt;
    return std::pair(std::string(host), *p);
  }

  // egress.connect_to: "HOST:PORT": "ADDR:PORT" (SPEC C6a, as curl's --connect-to).
  void parse_connect_to(const YNode& n, policy::OperatorNetwork& net) {
    auto f = fields(n, "egress.connect_to", {}, /*any_keys=*/true);
    if (!f) return;
    std::map<std::pair<std::string, uint16_t>, Mark> seen;
    std::unordered_set<const YNode*> accepted;
    for (const auto& entry : *f) accepted.insert(entry.second);
    for (std::size_t i = 0; i < n.map_size(); ++i) {
      const YNode& k = n.key(i);
      if (accepted.count(&n.val(i)) == 0) continue;  // a bad or duplicate key, already reported
      const std::string path = join("egress.connect_to", k.value);
      const auto from = host_port(k.value);
      std::string from_host = from ? from->first : std::string();
      if (from_host.size() > 1 && from_host.back() == '.') from_host.pop_back();  // "example.com." is one name
      const auto host = from ? manifest::detail::normalise_host(from_host, /*allow_wildcard=*/false) : std::nullopt;
      if (!host) {
        error(k.mark, path,
              quote(k.value) + " must be HOST:PORT: a DNS name or IP literal (IPv6 in brackets), no wildcard, and "
                               "a port 1..65535 (\"api.example.com:443\", \"[2001:db8::1]:443\")");
        continue;
      }
      std::string key_host = *host;
      if (const auto ip = policy::parse_ip(key_host)) key_host = policy::to_string(*ip);
      const std::pair key(key_host, from->second);
      if (const auto it = seen.find(key); it != seen.end()) {
        error(k.mark, path,
              "duplicate destination (first defined at " + std::to_string(it->second.line) + ":" +
                  std::to_string(it->second.column) + ")");
        continue;
      }
      seen.emplace(key, k.mark);
      const YNode& v = n.val(i);
      auto target_text = string(v, path);
      if (!target_text) continue;
      const auto to = host_port(*target_text);
      const auto addr = to ? policy::parse_ip(to->first) : std::nullopt;
      if (!addr) {
        error(v.mark, path,
              quote(*target_text) + " must be ADDR:PORT: an IPv4 or IPv6 address (IPv6 in brackets) and a port "
                                    "1..65535 (\"127.0.0.1:8443\", \"[::1]:8443\"); names are not resolved here");
        continue;
      }
      net.connect_to[key] = policy::ConnectTarget{*addr, to->second};
    }
  }

  void parse_deny(const YNode& n, policy::OperatorNetwork& net) {
    const std::string path = "egress.deny";
    if (list(n, path, "hosts") == nullptr) return;
    std::set<std::string> seen(net.egress_deny.begin(), net.egress_deny.end());
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const std::string ipath = index(path, i);
      auto s = string(n.items[i], ipath);
      if (!s) continue;
      auto h = manifest::detail::normalise_host(*s, /*allow_wildcard=*/true);
      if (!h) {
        error(n.items[i].mark, ipath,
              quote(*s) + " must be a DNS name, a leading *. wildcard (*.example.com) or an IP literal");
        continue;
      }
      if (seen.insert(*h).second) net.egress_deny.push_back(*h);
    }
  }

  void parse_allow_private(const YNode& n, policy::OperatorNetwork& net) {
    const std::string path = "egress.allow_private";
    if (list(n, path, "address ranges (CIDR)") == nullptr) return;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const std::string ipath = index(path, i);
      auto s = string(n.items[i], ipath);
      if (!s) continue;
      if (auto c = policy::parse_cidr(*s)) {
        net.allow_private.push_back(*c);
        continue;
      }
      error(n.items[i].mark, ipath, quote(*s) + " " + cidr_problem(*s));
    }
  }

  // Why `s` is not a range: a hint with the range meant when only host bits are set.
  static std::string cidr_problem(const std::string& s) {
    const auto slash = s.find('/');
    const auto ip = policy::parse_ip(std::string_view(s).substr(0, slash));
    if (ip && slash != std::string::npos) {
      const std::string_view digits = std::string_view(s).substr(slash + 1);
      const unsigned max = ip->v6 ? 128 : 32;
      if (all_digits(digits) && digits.size() <= 3 && std::stoul(std::string(digits)) <= max) {
        const auto prefix = static_cast<unsigned>(std::stoul(std::string(digits)));
        policy::IpAddress base = *ip;
        for (unsigned bit = prefix; bit < max; ++bit) {
          base.bytes[bit / 8] = static_cast<uint8_t>(base.bytes[bit / 8] & ~(0x80U >> (bit % 8)));
        }
        return "has host bits set below the prefix (did you mean " + policy::to_string(base) + "/" +
               std::to_string(prefix) + "?)";
      }
    }
    return "must be an address range in CIDR form: 10.0.0.0/8, fd00::/8 (or a single address)";
  }

  void parse_proxy(const YNode& n, MoonConfig& c) {
    auto f = fields(n, "proxy", {"allow"});
    if (!f) return;
    for (const auto& [key, v] : *f) {
      if (key == "allow") parse_proxy_allow(*v, c.proxy_allow);
    }
  }

  void parse_tls(const YNode& n, MoonConfig& c) {
    auto f = fields(n, "tls", {"ca_files"});
    if (!f) return;
    for (const auto& [key, v] : *f) {
      if (key == "ca_files") parse_ca_files(*v, c);
    }
  }

  // registries.insecure: HOST:PORT of registries spoken to over plain http (C12).
  void parse_registries(const YNode& n, MoonConfig& c) {
    auto f = fields(n, "registries", {"insecure"});
    if (!f) return;
    for (const auto& [key, v] : *f) {
      if (key != "insecure") continue;
      const std::string path = "registries.insecure";
      if (list(*v, path, "HOST:PORT of registries reached over plain http") == nullptr) continue;
      for (std::size_t i = 0; i < v->items.size(); ++i) {
        const std::string ipath = index(path, i);
        auto s = string(v->items[i], ipath);
        if (!s) continue;
        const auto colon = s->rfind(':');
        const bool ok = colon != std::string::npos && colon > 0 && port_number(s->substr(colon + 1)).has_value() &&
                        s->find_first_of(" /@\t") == std::string::npos;
        if (!ok) {
          error(v->items[i].mark, ipath, quote(*s) + " must be HOST:PORT (the registry as references name it)");
          continue;
        }
        c.insecure_registries.push_back(*s);
      }
    }
  }

  // trust: scopes and key paths here; load_moon_config reads and parses each key.
  void parse_trust(const YNode& n, MoonConfig& c) {
    if (list(n, "trust", "{scope, keys} entries") == nullptr) return;
    std::map<std::string, Mark> seen;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const YNode& item = n.items[i];
      const std::string ipath = index("trust", i);
      auto f = fields(item, ipath, {"scope", "keys"});
      if (!f) continue;
      MoonConfig::TrustRule rule;
      rule.mark = item.mark;
      rule.key_path = ipath;
      bool has_scope = false, has_keys = false;
      for (const auto& [key, v] : *f) {
        const std::string kpath = join(ipath, key);
        if (key == "scope") {
          auto s = string(*v, kpath);
          if (!s) continue;
          // REGISTRY/REPO: a registry host (and port), a '/', a repository; '*' only last.
          const auto slash = s->find('/');
          const auto star = s->find('*');
          const bool ok = slash != std::string::npos && slash > 0 && slash + 1 < s->size() &&
                          (star == std::string::npos || star == s->size() - 1) &&
                          s->find_first_of(" \t\r\n@") == std::string::npos && (*s)[slash + 1] != '*';
          if (!ok) {
            error(v->mark, kpath, quote(*s) + " must be REGISTRY/REPOSITORY or REGISTRY/PREFIX* ('*' only at the end)");
            continue;
          }
          if (const auto it = seen.find(*s); it != seen.end()) {
            error(v->mark, kpath, "duplicate scope (first defined at " + std::to_string(it->second.line) + ":" +
                                      std::to_string(it->second.column) + ")");
            continue;
          }
          seen.emplace(*s, v->mark);
          rule.scope = *s;
          has_scope = true;
        } else if (key == "keys") {
          if (list(*v, kpath, "minisign public key files") == nullptr) continue;
          if (v->items.empty()) {
            error(v->mark, kpath, "must list at least one public key file");
            continue;
          }
          for (std::size_t k = 0; k < v->items.size(); ++k) {
            auto p = string(v->items[k], index(kpath, k));
            if (!p) continue;
            if (p->empty() || p->find('\0') != std::string::npos) {
              error(v->items[k].mark, index(kpath, k), "must be a file path");
              continue;
            }
            rule.key_files.push_back(*p);
          }
          has_keys = !rule.key_files.empty();
        }
      }
      // A key that is present but invalid was reported above; one that is absent, here.
      bool saw_scope = false, saw_keys = false;
      for (const auto& entry : *f) {
        saw_scope = saw_scope || entry.first == "scope";
        saw_keys = saw_keys || entry.first == "keys";
      }
      if (!saw_scope) error(item.mark, ipath, "missing scope (REGISTRY/REPOSITORY or REGISTRY/PREFIX*)");
      if (!saw_keys) error(item.mark, ipath, "missing keys (minisign public key files)");
      if (has_scope && has_keys) c.trust.push_back(std::move(rule));
    }
  }

  // tls.ca_files: paths only here; load_moon_config reads and checks each file.
  void parse_ca_files(const YNode& n, MoonConfig& c) {
    const std::string path = "tls.ca_files";
    if (list(n, path, "paths of PEM certificate files") == nullptr) return;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const std::string ipath = index(path, i);
      auto s = string(n.items[i], ipath);
      if (!s) continue;
      if (s->empty() || s->find('\0') != std::string::npos) {
        error(n.items[i].mark, ipath, "must be a file path");
        continue;
      }
      c.ca_files.push_back(MoonConfig::CaFile{*s, n.items[i].mark, ipath});
    }
  }

  // The triple rules of a manifest egress entry (M2), for the protocols the proxy speaks.
  void parse_proxy_allow(const YNode& n, std::vector<manifest::EgressEntry>& out) {
    const std::string path = "proxy.allow";
    if (list(n, path, "{host, port, protocol} entries") == nullptr) return;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      const YNode& item = n.items[i];
      const std::string ipath = index(path, i);
      auto f = fields(item, ipath, {"host", "port", "protocol"});
      if (!f) continue;
      manifest::EgressEntry e;
      e.key_path = ipath;
      e.mark = item.mark;
      bool ok = true;
      auto get = [&](std::string_view key) -> const YNode* {
        for (const auto& [k, v] : *f) {
          if (k == key) return v;
        }
        error(item.mark, join(ipath, key), "required key is missing");
        ok = false;
        return nullptr;
      };
      const YNode* host = get("host");
      const YNode* port = get("port");
      const YNode* proto = get("protocol");
      if (host != nullptr) {
        auto s = string(*host, join(ipath, "host"));
        auto h = s ? manifest::detail::normalise_host(*s, /*allow_wildcard=*/true) : std::nullopt;
        if (s && !h) {
          error(host->mark, join(ipath, "host"),
                quote(*s) + " must be a DNS name, a leading *. wildcard (*.example.com) or an IP literal");
        }
        if (h) e.host = *h;
        ok = ok && h.has_value();
      }
      if (port != nullptr) {
        const auto p = port->kind == Kind::scalar && !port->quoted ? port_number(port->value) : std::nullopt;
        if (!p) error(port->mark, join(ipath, "port"), "must be an integer 1..65535");
        if (p) e.port = *p;
        ok = ok && p.has_value();
      }
      if (proto != nullptr) {
        auto s = string(*proto, join(ipath, "protocol"));
        const auto p = s ? manifest::protocol_from_string(*s) : std::nullopt;
        const bool allowed = p && (*p == manifest::Protocol::https || *p == manifest::Protocol::http ||
                                   *p == manifest::Protocol::tcp);
        if (s && !allowed) {
          error(proto->mark, join(ipath, "protocol"),
                "protocol " + quote(*s) + " is not one the Moon proxy can allow (https, http or tcp)");
        }
        if (allowed) e.protocol = *p;
        ok = ok && allowed;
      }
      if (ok) out.push_back(std::move(e));
    }
  }
};

MoonConfigLoad file_error(const std::string& file, std::string message) {
  MoonConfigLoad r;
  r.errors.push_back(Diagnostic{file, {}, "", std::move(message)});
  return r;
}

}  // namespace

MoonConfigLoad parse_moon_config(std::string_view text, const std::string& file) {
  MoonConfigLoad result;
  if (text.size() > kMaxMoonConfigBytes) {
    return file_error(file, "file is larger than " + std::to_string(kMaxMoonConfigBytes) + " bytes (" +
                                std::to_string(text.size()) + " bytes)");
  }
  try {
    auto yaml = manifest::detail::parse_yaml(text, file);
    MoonConfig config;
    if (!yaml.root) {
      // parse_yaml reports a document with no node at all (empty, or comments only) as
      // "manifest is empty": for the optional Moon configuration that is the defaults.
      const bool empty = yaml.errors.size() == 1 && yaml.errors[0].mark.line == 0 &&
                         yaml.errors[0].message == "manifest is empty";
      if (!empty) {
        result.errors = std::move(yaml.errors);
        return result;
      }
    } else if (yaml.root->kind != Kind::null) {
      ConfigParser(file, result.errors).parse(*yaml.root, config);
    }
    std::stable_sort(result.errors.begin(), result.errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::pair(a.mark.line, a.mark.column) < std::pair(b.mark.line, b.mark.column);
    });
    if (result.errors.empty()) {
      // The run's egress loop serves the Moon proxy (C7): it reads the allowlist from the
      // operator's network policy.
      config.network.proxy_allow = config.proxy_allow;
      for (const auto& ca : config.ca_files) config.network.tls_ca_files.push_back(ca.path);
      result.config = std::move(config);
    }
  } catch (const std::exception& e) {
    // Defensive: nothing above is expected to throw except on allocation failure.
    result.config.reset();
    result.errors.push_back(Diagnostic{file, {}, "", std::string("internal error while parsing: ") + e.what()});
  }
  return result;
}

namespace {

// Reads a whole regular file of at most `max` bytes: "" and `text` set, or what went wrong.
// O_NONBLOCK so a FIFO cannot hang the caller; fstat()ed before anything is read.
std::string read_regular_file(const fs::path& path, std::size_t max, std::string& text, int* open_errno) {
  UniqueFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (!fd) {
    *open_errno = errno;
    return "cannot open: " + std::string(std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return "cannot examine: " + std::string(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (static_cast<uint64_t>(st.st_size) > max) {
    return "file is larger than " + std::to_string(max) + " bytes (" + std::to_string(st.st_size) + " bytes)";
  }
  // Read at most one byte more than allowed, so a file that grows meanwhile is caught.
  text.assign(max + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return "cannot read: " + std::string(std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max) return "file is larger than " + std::to_string(max) + " bytes";
  text.resize(got);
  return "";
}

// Why `pem` is not a usable CA file ("" when it is): at least one certificate, and every
// "-----BEGIN CERTIFICATE-----" block must parse (a half-pasted file fails loudly here,
// not as an unexplained verification error later).
std::string ca_pem_problem(const std::string& pem) {
  static constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  static constexpr std::string_view kTrusted = "-----BEGIN TRUSTED CERTIFICATE-----";
  std::size_t blocks = 0;
  for (std::size_t at = pem.find(kBegin); at != std::string::npos; at = pem.find(kBegin, at + 1)) ++blocks;
  if (blocks == 0) {
    if (pem.find(kTrusted) != std::string::npos) {
      return "holds an OpenSSL TRUSTED CERTIFICATE block; use plain -----BEGIN CERTIFICATE----- PEM";
    }
    return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)";
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!bio) return "cannot be read (out of memory)";
  std::size_t parsed = 0;
  for (;;) {
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (cert == nullptr) break;
    X509_free(cert);
    ++parsed;
  }
  ERR_clear_error();
  if (parsed < blocks) {
    return "certificate " + std::to_string(parsed + 1) + " of " + std::to_string(blocks) +
           " is not a valid PEM X.509 certificate";
  }
  return "";
}

}  // namespace

MoonConfigLoad load_moon_config(const fs::path& home) {
  fs::path path;
  bool required = false;
  if (const char* env = std::getenv("SOYAOS_MOON_CONFIG"); env != nullptr && *env != '\0') {
    path = env;
    required = true;
  } else {
    path = home / "moon.yaml";
  }
  const std::string file = path.string();

  std::string text;
  int open_errno = 0;
  if (auto problem = read_regular_file(path, kMaxMoonConfigBytes, text, &open_errno); !problem.empty()) {
    if (open_errno == ENOENT && !required) {
      MoonConfigLoad defaults;
      defaults.config = MoonConfig{};
      return defaults;
    }
    if (open_errno == ENOENT) {
      return file_error(file, "cannot open (named by SOYAOS_MOON_CONFIG): " + std::string(std::strerror(open_errno)));
    }
    return file_error(file, problem);
  }
  MoonConfigLoad result = parse_moon_config(text, file);
  if (!result.config) return result;
  result.config->path = path;
  result.config->digest = "sha256:" + sha256_hex(text);
  // tls.ca_files: resolved from moon.yaml's directory, each read and checked now, so a
  // typo fails every run at once with the entry's line:column (never a silent fallback to
  // the system roots).
  std::vector<std::string> resolved;
  const fs::path base = fs::absolute(path).parent_path();
  for (const auto& ca : result.config->ca_files) {
    const fs::path p = fs::path(ca.path).is_absolute() ? fs::path(ca.path) : base / ca.path;
    std::string pem;
    int ca_errno = 0;
    std::string problem = read_regular_file(p, kMaxCaFileBytes, pem, &ca_errno);
    if (problem.empty()) problem = ca_pem_problem(pem);
    if (!problem.empty()) {
      result.errors.push_back(Diagnostic{file, ca.mark, ca.key_path, quote(p.string()) + ": " + problem});
      continue;
    }
    resolved.push_back(p.lexically_normal().string());
  }
  if (!result.errors.empty()) {
    result.config.reset();
    return result;
  }
  result.config->network.tls_ca_files = std::move(resolved);
  // trust keys: each read and parsed now, so a missing or garbled key stops every pull
  // and run with its line:column instead of refusing packs for an unclear reason.
  for (auto& rule : result.config->trust) {
    for (std::size_t k = 0; k < rule.key_files.size(); ++k) {
      const fs::path p = fs::path(rule.key_files[k]).is_absolute() ? fs::path(rule.key_files[k]) : base / rule.key_files[k];
      const std::string kpath = rule.key_path + ".keys[" + std::to_string(k) + "]";
      std::string text;
      int key_errno = 0;
      std::string problem = read_regular_file(p, std::size_t{64} * 1024, text, &key_errno);
      if (problem.empty()) {
        auto key = minisign::parse_public_key(text);
        if (key) {
          rule.keys.push_back(*key);
          continue;
        }
        problem = key.error().message;
      }
      result.errors.push_back(Diagnostic{file, rule.mark, kpath, quote(p.string()) + ": " + problem});
    }
  }
  if (!result.errors.empty()) result.config.reset();
  return result;
}

bool trust_scope_matches(std::string_view scope, std::string_view repository) {
  if (!scope.empty() && scope.back() == '*') {
    scope.remove_suffix(1);
    return repository.substr(0, scope.size()) == scope;
  }
  return scope == repository;
}

std::vector<const MoonConfig::TrustRule*> MoonConfig::trust_for(std::string_view repository) const {
  std::vector<const TrustRule*> out;
  for (const auto& r : trust) {
    if (trust_scope_matches(r.scope, repository)) out.push_back(&r);
  }
  return out;
}

}  // namespace soyaos::moon
