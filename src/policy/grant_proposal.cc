#include "policy/grant_proposal.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <string_view>

#include "common/text.h"
#include "manifest/manifest.h"
#include "policy/runtime_layer.h"

namespace soyaos::policy {
namespace {

using manifest::path_covers;

constexpr const char* kWorkdir = "/workdir";
constexpr const char* kOut = "/workdir/out";

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string parent_of(const std::string& path) {
  const size_t last = path.find_last_of('/');
  return last == 0 || last == std::string::npos ? std::string("/") : path.substr(0, last);
}

// Inside what the Comet owns: the runtime layer and generated files (manifest's reserved
// list), the runtime layer's probe table (docs/sandbox.md "Runtime layer"), and /sys
// (never mounted). `or_covers`: also a directory that would contain one of them (a grouping
// must not climb to a runtime-layer directory).
bool owned_by_comet(const std::string& path, bool or_covers) {
  if (manifest::is_comet_reserved(path) || path_covers("/sys", path)) return true;
  for (const RuntimeProbe& row : runtime_probes()) {
    if (path_covers(row.path, path) || (or_covers && path_covers(path, row.path))) return true;
  }
  return false;
}

// A directory a grouping or a bound may propose instead of what is under it.
bool groupable_dir(const std::string& dir, bool write) {
  if (dir == "/" || owned_by_comet(dir, true) || path_covers(dir, kWorkdir)) return false;
  // Reads under /workdir are never denied; writes there are grouped only inside /workdir/out.
  return write ? !path_covers(kWorkdir, dir) || path_covers(kOut, dir) : !path_covers(kWorkdir, dir);
}

// The part of the owned tree a path is in, for the not-grantable note: "/etc", "/proc".
std::string owned_area(const std::string& path) {
  const size_t second = path.find('/', 1);
  return second == std::string::npos ? path : path.substr(0, second);
}

// ---- aggregation ----------------------------------------------------------------------

struct Agg {
  uint64_t count = 0;
  std::set<std::string> resources;  // distinct denied resources (bounded by the callers' events)
  void add(const std::string& resource, uint64_t n) {
    count += n;
    resources.insert(resource);
  }
  void merge(const Agg& o) {
    count += o.count;
    resources.insert(o.resources.begin(), o.resources.end());
  }
};

std::vector<std::string> examples_of(const Agg& a) {
  std::vector<std::string> out;
  for (const auto& r : a.resources) {
    if (out.size() == kMaxProposalExamples) break;
    out.push_back(r);
  }
  return out;
}

// Folds every candidate covered by another into it, then (once) groups two or more
// candidates of one directory into that directory when it may be proposed.
void fold(std::map<std::string, Agg>& c) {
  for (auto it = c.begin(); it != c.end();) {
    // Sorted: a covering prefix sorts before what it covers, but not necessarily right
    // before it ("/a", "/a-b", "/a/x"): look at every earlier candidate that is a prefix.
    bool folded = false;
    std::string p = parent_of(it->first);
    while (p != "/") {
      auto cover = c.find(p);
      if (cover != c.end() && cover != it) {
        cover->second.merge(it->second);
        it = c.erase(it);
        folded = true;
        break;
      }
      p = parent_of(p);
    }
    if (!folded) ++it;
  }
}

void group(std::map<std::string, Agg>& c, bool write) {
  std::map<std::string, std::vector<std::string>> by_dir;
  for (const auto& [path, agg] : c) by_dir[parent_of(path)].push_back(path);
  for (const auto& [dir, paths] : by_dir) {
    if (paths.size() < 2 || !groupable_dir(dir, write)) continue;
    Agg merged;
    for (const auto& p : paths) {
      merged.merge(c[p]);
      c.erase(p);
    }
    c[dir].merge(merged);
  }
  fold(c);
}

// Past the bound, propose parents (never past what groupable_dir allows) until it fits;
// what still does not fit is counted in `omitted`.
void bound(std::map<std::string, Agg>& c, bool write, uint64_t& omitted) {
  while (c.size() > kMaxFsProposals) {
    std::map<std::string, Agg> up;
    bool changed = false;
    for (auto& [path, agg] : c) {
      const std::string dir = parent_of(path);
      if (groupable_dir(dir, write)) {
        up[dir].merge(agg);
        changed = true;
      } else {
        up[path].merge(agg);
      }
    }
    c = std::move(up);
    fold(c);
    if (!changed) break;
  }
  if (c.size() <= kMaxFsProposals) return;
  // Keep the most used; the others are counted.
  std::vector<std::pair<std::string, Agg>> v(c.begin(), c.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
  c.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < kMaxFsProposals) {
      c.insert(std::move(v[i]));
    } else {
      omitted += v[i].second.resources.size();
    }
  }
}

struct Triple {
  uint16_t port = 0;
  std::string protocol;
  friend bool operator<(const Triple& a, const Triple& b) {
    return a.port != b.port ? a.port < b.port : a.protocol < b.protocol;
  }
};

struct HostAgg {
  Agg dns;  // names refused before any connection
  std::map<Triple, Agg> triples;
  uint64_t total() const {
    uint64_t n = dns.count;
    for (const auto& [t, a] : triples) n += a.count;
    return n;
  }
};

struct HttpKey {
  std::string entry, method, path;
  friend bool operator<(const HttpKey& a, const HttpKey& b) {
    return std::tie(a.entry, a.method, a.path) < std::tie(b.entry, b.method, b.path);
  }
};

struct NotGrantable {
  std::string surface, access, what, note;
  Agg agg;
};

class Builder {
 public:
  void add(const DeniedAttempt& a) {
    const uint64_t n = a.count == 0 ? 1 : a.count;
    if (a.surface == "fs") {
      add_fs(a, n);
    } else if (a.surface == "network") {
      add_network(a, n);
    } else if (a.surface == "exec") {
      if (a.resource == "process") {
        refuse("exec", "", "fork",
               "a Comet runs one process (threads are fine): fork and clone of a process are never granted (C3); "
               "do the work in-process",
               a.resource, n);
      } else {
        refuse("exec", "", "exec",
               "a Comet executes its runtime's interpreter once: exec is never granted (C3); do the work in-process "
               "(a library instead of a program)",
               a.resource, n);
      }
    } else if (a.surface == "time") {
      refuse("time", "", "set", "setting clocks is never granted (C4); reading them works", a.resource, n);
    } else {
      refuse(a.surface, a.access, a.access.empty() ? a.surface : a.access, "no manifest entry can allow this", a.resource, n);
    }
  }

  GrantProposals finish() {
    GrantProposals out;
    out.omitted_not_grantable = omitted_;
    for (bool write : {false, true}) {
      auto& c = write ? write_ : read_;
      group(c, write);
      uint64_t& left_out = write ? out.omitted_write : out.omitted_read;
      bound(c, write, left_out);
      for (const auto& [path, agg] : c) out.items.push_back(fs_proposal(path, agg, write));
    }
    egress(out);
    for (const auto& [key, agg] : http_) {
      GrantProposal p;
      p.grantable = true;
      p.surface = "network";
      p.section = key.entry + ".http";
      p.method = key.method;
      p.path = key.path;
      p.entry = "- {method: " + yaml_scalar(key.method) + ", path: " + yaml_scalar(key.path) + "}";
      p.covers = key.method + " " + key.path + ": " + plural(agg.count, "request", "requests");
      p.count = agg.count;
      p.examples = examples_of(agg);
      out.items.push_back(std::move(p));
    }
    for (const auto& ng : refused_) {
      GrantProposal p;
      p.surface = ng.surface;
      p.access = ng.access;
      p.note = ng.note;
      p.count = ng.agg.count;
      p.examples = examples_of(ng.agg);
      const size_t distinct = ng.agg.resources.size();
      std::string what = ng.what;
      if (what == "fork") {
        what = "fork or clone of a new process";
      } else if (distinct == 1) {
        what += " " + *ng.agg.resources.begin();
      } else {
        what += " (" + std::to_string(distinct) + " distinct: " + p.examples.front() + ", …)";
      }
      p.covers = what + ": " + plural(ng.agg.count, "attempt", "attempts");
      out.items.push_back(std::move(p));
    }
    out.omitted = out.omitted_read + out.omitted_write + out.omitted_egress + out.omitted_not_grantable;
    return out;
  }

 private:
  void refuse(const std::string& surface, const std::string& access, const std::string& what, const std::string& note,
              const std::string& resource, uint64_t n) {
    for (auto& ng : refused_) {
      if (ng.surface == surface && ng.access == access && ng.what == what && ng.note == note) {
        ng.agg.add(resource, n);
        return;
      }
    }
    if (refused_.size() == kMaxNotGrantable) {
      ++omitted_;
      return;
    }
    refused_.push_back({surface, access, what, note, {}});
    refused_.back().agg.add(resource, n);
  }

  void add_fs(const DeniedAttempt& a, uint64_t n) {
    const bool write = a.access == "write";
    const std::string& path = a.resource;
    const char* verb = write ? "write" : "read";
    if (manifest::is_normalised_absolute(path) && !is_valid_utf8(path)) {
      refuse("fs", a.access, verb, "the path is not valid UTF-8, which soyapack.yaml cannot hold", path, n);
      return;
    }
    if (!manifest::is_normalised_absolute(path)) {
      refuse("fs", a.access, verb,
             "the Comet could not name the path (a descriptor or an unresolvable directory), so no entry can be "
             "proposed; the events show what the agent held",
             path, n);
      return;
    }
    if (write && path_covers(kOut, path)) {
      write_[kOut].add(path, n);
      return;
    }
    if (path_covers(kWorkdir, path)) {
      if (write) {
        refuse("fs", "write", "write",
               path_covers("/workdir/inputs", path)
                   ? "inputs are read-only (C2): write results under /workdir/out (declared in capabilities.fs.write)"
                   : "/workdir is the pack and is never writable (M5): write under /workdir/out or a scratch path "
                     "such as /tmp (declared in capabilities.fs.write)",
               path, n);
      } else {
        refuse("fs", "read", "read",
               "/workdir is always readable: the path is excluded from the pack (.soyaignore, .git/, .env*) or "
               "absent",
               path, n);
      }
      return;
    }
    if (owned_by_comet(path, false)) {
      const std::string area = owned_area(path);
      refuse("fs", a.access, verb,
             area + " belongs to the Comet (its runtime layer or kernel interfaces): a pack cannot " +
                 (write ? std::string("make it writable; use a scratch path such as /tmp")
                        : std::string("add host files there; ship the file in the pack or pass it with --input")),
             path, n);
      return;
    }
    if (!write) {
      read_[path].add(path, n);
      return;
    }
    // A writable path is a directory the Comet creates: the one the agent writes in, or the
    // path itself when the agent made it (mkdir) or it is a top-level directory (/data).
    const bool made = a.syscall == "mkdir" || a.syscall == "mkdirat";
    std::string dir = made ? path : parent_of(path);
    if (dir == "/") dir = path;
    if (owned_by_comet(dir, false)) {
      refuse("fs", "write", "write",
             owned_area(dir) + " belongs to the Comet's runtime layer: use a scratch path such as /tmp", path, n);
      return;
    }
    write_[dir].add(path, n);
  }

  void add_network(const DeniedAttempt& a, uint64_t n) {
    const std::string& r = a.resource;
    const std::string& d = a.detail;
    const auto operator_note = [&] {
      return std::string(
          "denied by the operator's policy (egress.deny in the Moon configuration), whatever the manifest declares");
    };
    if (r.rfind("dns:", 0) == 0) {
      const std::string name = r.substr(4);
      if (a.errno_name == "REFUSED") {
        refuse("network", "", "query",
               "only A and AAAA queries are ever answered (C6): DNS cannot carry data; resolve the name and connect",
               r, n);
      } else if (d.find("egress.deny") != std::string::npos) {
        refuse("network", "", "connect", operator_note(), r, n);
      } else if (!d.empty() || name.empty()) {
        refuse("network", "", "look up", "not a host name an entry can name (" + d + ")", r, n);
      } else {
        host_agg(name).dns.add(r, n);
      }
      return;
    }
    // An http rule refusal: "METHOD scheme://authority/path".
    const size_t space = r.find(' ');
    const size_t scheme = r.find("://");
    if (space != std::string::npos && scheme != std::string::npos && scheme > space) {
      const std::string method = r.substr(0, space);
      const size_t path_at = r.find('/', scheme + 3);
      static constexpr std::string_view kNoRule = "no http rule of ";
      if (d.rfind(kNoRule, 0) == 0 && path_at != std::string::npos) {
        const size_t allows = d.find(" allows ", kNoRule.size());
        const std::string entry = d.substr(kNoRule.size(), allows == std::string::npos ? 0 : allows - kNoRule.size());
        if (entry.rfind("capabilities.egress[", 0) == 0) {
          http_[{entry, method, r.substr(path_at)}].add(r, n);
          return;
        }
      }
      refuse("network", "", "request", "refused by the gateway, not for want of a rule: " + d, r, n);
      return;
    }
    if (r.rfind("Moon proxy", 0) == 0 || d.rfind("Moon proxy", 0) == 0) {
      refuse("network", "", "request",
             "the Moon proxy's allowlist is the operator's (proxy.allow in the Moon configuration)", r, n);
      return;
    }
    // "HOST:PORT/PROTOCOL", HOST an IPv6 literal in brackets, or "NAME[ADDRESS]" for an
    // upstream answer the gateway refused.
    const size_t slash = r.rfind('/');
    const size_t colon = slash == std::string::npos ? std::string::npos : r.rfind(':', slash);
    unsigned port = 0;
    bool port_ok = colon != std::string::npos && slash > colon + 1 && slash - colon - 1 <= 5;
    for (size_t i = colon + 1; port_ok && i < slash; ++i) {
      port_ok = r[i] >= '0' && r[i] <= '9';
      if (port_ok) port = port * 10 + static_cast<unsigned>(r[i] - '0');
    }
    port_ok = port_ok && port >= 1 && port <= 65535;
    std::string host = port_ok ? r.substr(0, colon) : std::string();
    std::string protocol = port_ok ? r.substr(slash + 1) : std::string();
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (!port_ok || host.empty() || host.find_first_of("[]") != std::string::npos) {
      if (d.find("egress.deny") != std::string::npos) {
        refuse("network", "", "connect", operator_note(), r, n);
      } else if (host.find('[') != std::string::npos) {
        refuse("network", "", "connect",
               "the name resolved to an address the gateway refuses (" + d +
                   "): the operator decides (egress.allow_private, dns.hosts in the Moon configuration)",
               r, n);
      } else {
        refuse("network", "", "connect", "the destination could not be named" + (d.empty() ? "" : ": " + d), r, n);
      }
      return;
    }
    if (d.empty() || d == "no entry allows this destination" || d.rfind("egress \"*\" covers TCP only", 0) == 0) {
      // As seen: the gateway's protocol when it read the first bytes, else the packet's.
    } else if (d == "TLS on an entry that is not https") {
      protocol = "https";
    } else if (d == "plaintext HTTP on an https entry") {
      protocol = "http";
    } else if (d.rfind("not a TLS ClientHello on an https entry", 0) == 0 ||
               d.rfind("not an HTTP/1.x request", 0) == 0) {
      protocol = "tcp";
    } else if (d.find("egress.deny") != std::string::npos) {
      refuse("network", "", "connect", operator_note(), r, n);
      return;
    } else {
      refuse("network", "", "connect", "the connection broke its entry's rule (" + d + "): fix the client", r, n);
      return;
    }
    if (!manifest::protocol_from_string(protocol) || protocol == "moon-proxy") protocol = "tcp";
    host_agg(host).triples[{static_cast<uint16_t>(port), protocol}].add(r, n);
  }

  HostAgg& host_agg(const std::string& host) { return hosts_[host]; }

  void egress(GrantProposals& out) {
    // Bounded: the most used hosts first, the rest counted.
    std::vector<std::pair<std::string, const HostAgg*>> hosts;
    for (const auto& [h, agg] : hosts_) hosts.emplace_back(h, &agg);
    std::stable_sort(hosts.begin(), hosts.end(),
                     [](const auto& a, const auto& b) { return a.second->total() > b.second->total(); });
    if (hosts.size() > kMaxEgressProposals) {
      for (size_t i = kMaxEgressProposals; i < hosts.size(); ++i) {
        out.omitted_egress += hosts[i].second->dns.resources.size();
        for (const auto& [t, a] : hosts[i].second->triples) out.omitted_egress += a.resources.size();
      }
      hosts.resize(kMaxEgressProposals);
    }
    std::sort(hosts.begin(), hosts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [host, agg] : hosts) {
      if (agg->triples.empty()) {
        GrantProposal p = egress_proposal(host, 0, "", agg->dns);
        p.complete = false;
        p.note = "the name was refused before any connection, so its port and protocol are unknown "
                 "(`soyaos pack learn` finds them)";
        out.items.push_back(std::move(p));
        continue;
      }
      bool first = true;
      for (const auto& [t, a] : agg->triples) {
        Agg all = a;
        if (first) all.merge(agg->dns);  // the name's lookups led to this connection
        first = false;
        out.items.push_back(egress_proposal(host, t.port, t.protocol, all));
      }
    }
  }

  static GrantProposal egress_proposal(const std::string& host, uint16_t port, const std::string& protocol,
                                       const Agg& agg) {
    GrantProposal p;
    p.grantable = true;
    p.surface = "network";
    p.section = "capabilities.egress";
    p.host = host;
    p.port = port;
    p.protocol = protocol;
    p.entry = "- {host: " + yaml_scalar(host) + ", port: " + (port == 0 ? std::string("PORT") : std::to_string(port)) +
              ", protocol: " + (protocol.empty() ? std::string("PROTOCOL") : protocol) + "}";
    const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    p.covers = (port == 0 ? "dns:" + host : shown + ":" + std::to_string(port) + "/" + protocol) + ": " +
               plural(agg.count, "attempt", "attempts");
    p.count = agg.count;
    p.examples = examples_of(agg);
    return p;
  }

  static GrantProposal fs_proposal(const std::string& path, const Agg& agg, bool write) {
    GrantProposal p;
    p.grantable = true;
    p.surface = "fs";
    p.access = write ? "write" : "read";
    p.section = write ? "capabilities.fs.write" : "capabilities.fs.read";
    p.path = path;
    p.entry = "- " + yaml_scalar(path);
    const bool single = agg.resources.size() == 1 && *agg.resources.begin() == path;
    p.covers = (single ? path : path + "/*") + ": " +
               plural(agg.count, write ? "write" : "read", write ? "writes" : "reads");
    p.count = agg.count;
    p.examples = examples_of(agg);
    return p;
  }

  std::map<std::string, Agg> read_, write_;
  std::map<std::string, HostAgg> hosts_;
  std::map<HttpKey, Agg> http_;
  std::vector<NotGrantable> refused_;
  uint64_t omitted_ = 0;
};

// Decodes one code point of valid UTF-8 at `i` (valid_utf8 ran first), advancing `i`.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  if (i + static_cast<size_t>(len) > s.size()) len = 1;
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1FU) : len == 3 ? (b & 0x0FU) : (b & 0x07U);
  for (int k = 1; k < len; ++k) cp = (cp << 6U) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3FU);
  i += static_cast<size_t>(len);
  return cp;
}

bool needs_escape(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF;
}

}  // namespace

std::string yaml_scalar(const std::string& raw) {
  const std::string text = valid_utf8(raw);
  static constexpr std::string_view kWords[] = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"};
  bool plain = !text.empty() && text == raw;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                    c == '.' || c == '_' || c == '-' || c == '+' || c == '@';
    plain = plain && ok;
  }
  if (plain) {
    const char c0 = text.front();
    plain = c0 != '-' && c0 != '@' && c0 != '.' && c0 != '+';
    std::string lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (auto w : kWords) plain = plain && lower != w;
    // A number would not read back as the same string.
    // (An IPv4 address, with its three dots, is no number: it stays plain.)
    plain = plain && (lower.find_first_not_of("0123456789.+-e") != std::string::npos ||
                      std::count(lower.begin(), lower.end(), '.') > 1);
  }
  if (plain) return text;
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const uint32_t cp = next_code_point(text, i);
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (needs_escape(cp)) {
      char buf[16];
      if (cp <= 0xFF) {
        (void)std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
      } else {
        (void)std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out.append(text, start, i - start);
    }
  }
  return out + "\"";
}

GrantProposals propose_grants(std::span<const DeniedAttempt> attempts) {
  Builder b;
  for (const auto& a : attempts) b.add(a);
  return b.finish();
}

std::string hint_line(const GrantProposal& p) {
  if (!p.grantable) return "not grantable: " + escape_for_terminal(p.covers) + "  (" + escape_for_terminal(p.note) + ")";
  std::string line = "to allow: add  " + escape_for_terminal(p.entry) + "  under " + escape_for_terminal(p.section) +
                     "  (" + escape_for_terminal(p.covers);
  if (!p.note.empty()) line += "; " + escape_for_terminal(p.note);
  return line + ")";
}

}  // namespace soyaos::policy
