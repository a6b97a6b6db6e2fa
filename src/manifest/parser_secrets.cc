// Secrets (M7) and HTTP rules (M8) of the manifest. Only shapes are checked here (the
// `validate` half); whether a secret's hosts are covered by an egress entry is lint's.
#include "manifest/parser_secrets.h"

#include <algorithm>
#include <array>
#include <unordered_set>

#include "manifest/rules.h"

namespace soyaos::manifest {

bool is_reserved_env_name(const std::string& name) {
  // C5: PATH, HOME, LANG, TZ (and TMPDIR, set for a declared /tmp); C7: the proxy
  // variables; C11: the CA bundle variables that make the Comet trust the per-run CA.
  static constexpr std::array<std::string_view, 14> kReserved = {
      "PATH",        "HOME",          "LANG",         "TZ",                 "TMPDIR",
      "HTTP_PROXY",  "HTTPS_PROXY",   "NO_PROXY",     "ALL_PROXY",          "SSL_CERT_FILE",
      "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"};
  return std::find(kReserved.begin(), kReserved.end(), name) != kReserved.end();
}

namespace detail {
namespace {

// RFC 9110 tchar.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// RFC 3986 pchar without the percent-escape (checked apart): unreserved / sub-delims / ":" / "@".
bool is_path_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("-._~!$&'()*+,;=:@").find(c) != std::string_view::npos;
}

}  // namespace

std::optional<std::string> http_method_problem(std::string_view method) {
  if (method == "*") return std::nullopt;
  if (method.empty()) return "must not be empty (write \"*\" for any method)";
  if (method.size() > 32) return "is too long for an HTTP method (at most 32 characters)";
  for (char c : method) {
    if (!is_tchar(c)) return "must be an HTTP method token (GET, POST, ...) or \"*\"";
  }
  for (char c : method) {
    if (c >= 'a' && c <= 'z') {
      return "HTTP methods are case-sensitive and clients send them in upper case: write \"" +
             [&] {
               std::string up(method);
               for (char& u : up) {
                 if (u >= 'a' && u <= 'z') u = static_cast<char>(u - 'a' + 'A');
               }
               return up;
             }() +
             "\"";
    }
  }
  return std::nullopt;
}

std::optional<std::string> http_path_problem(std::string_view path) {
  if (path.empty() || path.front() != '/') return "must start with '/'";
  if (path.size() > 1024) return "is too long (at most 1024 characters)";
  if (path.find('?') != std::string_view::npos) {
    return "must not contain a query ('?'): the query string is not part of the match";
  }
  if (path.find('#') != std::string_view::npos) return "must not contain a fragment ('#')";
  std::size_t start = 1;
  while (true) {
    const std::size_t end = path.find('/', start);
    const std::string_view seg = path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    const bool last = end == std::string_view::npos;
    if (seg.empty() && !last) return "must not contain an empty segment (\"//\")";
    if (seg == "." || seg == "..") return "must not contain \".\" or \"..\" segments";
    if (seg == "**") {
      if (!last) return "\"**\" must be the last segment (\"/v1/**\")";
    } else if (seg != "*" && seg.find('*') != std::string_view::npos) {
      return "\"*\" must be a whole segment (\"/v1/*/files\"), not part of one (\"" + std::string(seg.substr(0, 40)) + "\")";
    }
    for (std::size_t i = 0; i < seg.size(); ++i) {
      const char c = seg[i];
      if (c == '%') {
        if (i + 2 >= seg.size() || !is_hex(seg[i + 1]) || !is_hex(seg[i + 2])) {
          return "has an invalid percent-escape (\"%\" must be followed by two hex digits)";
        }
        if (seg[i + 1] == '2' && (seg[i + 2] == 'f' || seg[i + 2] == 'F')) {
          return "must not contain an encoded '/' (%2F): requests that carry one are refused";
        }
        i += 2;
        continue;
      }
      if (!is_path_char(c)) {
        return "contains a character that is not allowed in a URL path (percent-encode it)";
      }
    }
    if (last) break;
    start = end + 1;
  }
  return std::nullopt;
}

bool parse_http_rules(Walker& w, const YNode& n, const std::string& path, std::vector<HttpRule>& out) {
  if (n.kind != Kind::sequence) {
    w.error(n, path, std::string("must be a list of {method, path} rules, got ") + describe(n));
    return false;
  }
  if (n.items.empty()) {
    // An empty list would read as "no request allowed" to some and "any" to others.
    w.error(n, path, "must list at least one {method, path} rule (omit `http` to allow any request)");
    return false;
  }
  bool ok = true;
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    const YNode& item = n.items[i];
    const std::string ipath = index(path, i);
    auto f = w.fields(item, ipath, {"method", "path"});
    if (!f) {
      ok = false;
      continue;
    }
    HttpRule rule;
    rule.key_path = ipath;
    rule.mark = item.mark;
    bool rule_ok = true;
    if (const YNode* v = w.required(*f, "method")) {
      if (auto s = w.string(*v, join(ipath, "method"))) {
        if (auto why = http_method_problem(*s)) {
          w.error(*v, join(ipath, "method"), quote(*s) + ": " + *why);
          rule_ok = false;
        } else {
          rule.method = *s;
        }
      } else {
        rule_ok = false;
      }
    } else {
      rule_ok = false;
    }
    if (const YNode* v = w.required(*f, "path")) {
      if (auto s = w.string(*v, join(ipath, "path"))) {
        if (auto why = http_path_problem(*s)) {
          w.error(*v, join(ipath, "path"), quote(*s) + ": " + *why);
          rule_ok = false;
        } else {
          rule.path = *s;
        }
      } else {
        rule_ok = false;
      }
    } else {
      rule_ok = false;
    }
    if (rule_ok) {
      out.push_back(std::move(rule));
    } else {
      ok = false;
    }
  }
  return ok;
}

void parse_secrets(Walker& w, const YNode& n, std::vector<SecretDecl>& out) {
  auto f = w.fields(n, "secrets", {}, /*any_keys=*/true);
  if (!f) return;
  std::unordered_set<std::string_view> seen;  // duplicates are reported by fields()
  for (std::size_t i = 0; i < n.map_size(); ++i) {
    const YNode& key = n.key(i);
    if (key.kind != Kind::scalar || !seen.insert(key.value).second) continue;
    const std::string path = join("secrets", key.value);
    if (!is_env_name(key.value)) {
      w.error(key, path, "secret name must match ^[A-Z_][A-Z0-9_]*$ (it is the agent's environment variable)");
      continue;
    }
    auto sf = w.fields(n.val(i), path, {"hosts"});
    if (!sf) continue;
    SecretDecl d;
    d.name = key.value;
    d.key_path = path;
    d.mark = key.mark;
    const YNode* hosts = w.required(*sf, "hosts");
    if (hosts == nullptr) continue;
    const std::string hpath = join(path, "hosts");
    if (hosts->kind != Kind::sequence) {
      w.error(*hosts, hpath, std::string("must be a list of host names, got ") + describe(*hosts));
      continue;
    }
    if (hosts->items.empty()) {
      w.error(*hosts, hpath, "must name at least one host the value may be sent to");
      continue;
    }
    bool ok = true;
    for (std::size_t j = 0; j < hosts->items.size(); ++j) {
      const YNode& h = hosts->items[j];
      const std::string jpath = index(hpath, j);
      auto s = w.string(h, jpath);
      if (!s) {
        ok = false;
        continue;
      }
      auto host = normalise_host(*s, /*allow_wildcard=*/false);
      if (!host) {
        const bool wildcard = s->rfind("*.", 0) == 0;
        w.error(h, jpath,
                quote(*s) + (wildcard ? " is a wildcard: a secret is bound to concrete host names only"
                                      : " must be a DNS name or an IP literal"));
        ok = false;
        continue;
      }
      if (std::find(d.hosts.begin(), d.hosts.end(), *host) != d.hosts.end()) {
        w.error(h, jpath, "duplicate host " + quote(*host));
        ok = false;
        continue;
      }
      d.hosts.push_back(*host);
      d.host_marks.push_back(h.mark);
    }
    if (ok) out.push_back(std::move(d));
  }
}

void check_secret_names(Walker& w, const Manifest& m) {
  for (const SecretDecl& d : m.secrets) {
    if (m.agent.env.count(d.name) != 0) {
      w.error(d.mark, d.key_path,
              "agent.env also sets " + d.name + ": the agent's variable of a secret holds its placeholder");
    } else if (is_reserved_env_name(d.name)) {
      w.error(d.mark, d.key_path, d.name + " is a variable the Comet sets itself; choose another name");
    }
  }
}

}  // namespace detail
}  // namespace soyaos::manifest
