// The lint engine (SPEC.md T2). Order of work:
//   1. index the declared egress entries and fs prefixes in hash maps;
//   2. resolve every tool's target against the index (near-linear, see lint.h), noting
//      which entries each tool uses and which tools are not covered;
//   3. pair uncovered tools with unused entries of the same kind (SP102, SP104);
//   4. report what is left (SP101, SP103, SP105, SP106), the read-only rules (SP107,
//      SP108), the secrets rules (SP120, SP121, secret_rules.cc) and, with --strict, the
//      least-privilege rules (SP110-SP115).
// Entries that are part of a pair are reported by no other rule.
#include "lint/lint.h"
#include "lint/secret_rules.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

// fmt compiled into this file (issue #16): soyaos then does not load libfmt.so (and, with
// SOYAOS_STATIC_CXX, no shared C++ library at all) at every start.
#define FMT_HEADER_ONLY 1
#include <fmt/format.h>

namespace soyaos::lint {

using manifest::EgressEntry;
using manifest::FsPath;
using manifest::Manifest;
using manifest::Mark;
using manifest::Protocol;
using manifest::Tier;
using manifest::Tool;
using manifest::ToolKind;

const char* to_string(Severity s) { return s == Severity::error ? "error" : "warning"; }

namespace {

constexpr std::string_view kOut = "/workdir/out";
constexpr std::string_view kWorkdir = "/workdir";

bool is_standard_fs_path(const std::string& p) {
  return p == "/workdir" || p == "/workdir/inputs" || p == "/workdir/out";
}

// SP106 / SP113 do not ask a tool or an example for the standard paths, nor for a private
// scratch path in fs.write (M6: the Comet's own tmpfs, empty at start and discarded at exit,
// e.g. /tmp): it reaches nothing of the host's, and tempfile, caches and HOME need it.
bool exempt_from_use(const std::string& p, bool write) {
  return is_standard_fs_path(p) || (write && manifest::is_private_scratch(p));
}

bool is_http_kind(ToolKind k) {
  switch (k) {
    case ToolKind::http_get:
    case ToolKind::http_post:
    case ToolKind::http_put:
    case ToolKind::http_patch:
    case ToolKind::http_delete:
    case ToolKind::llm:
      return true;
    default:
      return false;
  }
}

// M3, shared with validation so that both agree.
bool has_side_effect(const Tool& t) { return manifest::tool_has_side_effect(t); }

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string triple(const std::string& host, uint16_t port, Protocol p) {
  return fmt::format("{}/{}", host_port(host, port), manifest::to_string(p));
}

std::string index_key(std::string_view host, uint16_t port, Protocol p) {
  std::string k;
  k.reserve(host.size() + 8);
  k.append(host);
  k.push_back('\0');
  k.append(std::to_string(port));
  k.push_back('\0');
  k.push_back(static_cast<char>('0' + static_cast<int>(p)));
  return k;
}

Mark or_mark(Mark preferred, Mark fallback) { return preferred.line > 0 ? preferred : fallback; }

// A queue of unused entry indices with lazy removal of the ones already paired.
struct Pool {
  std::vector<std::size_t> items;
  std::size_t head = 0;
  // The first item not yet paired, or npos.
  std::size_t take(std::vector<char>& paired) {
    while (head < items.size() && paired[items[head]]) ++head;
    if (head == items.size()) return static_cast<std::size_t>(-1);
    std::size_t i = items[head++];
    paired[i] = 1;
    return i;
  }
};
constexpr std::size_t npos = static_cast<std::size_t>(-1);

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A multimap from a key to entry indices: one hash node per distinct key, the entries
// sharing it chained through `next` (no vector per key), lookups by string_view.
class Index {
 public:
  explicit Index(std::size_t entries = 0) : next_(entries, npos) { heads_.reserve(entries); }
  void add(std::string key, std::size_t i) {
    auto [it, inserted] = heads_.try_emplace(std::move(key), i);
    if (!inserted) {
      next_[i] = it->second;
      it->second = i;
    }
  }
  [[nodiscard]] bool empty() const { return heads_.empty(); }
  // Calls f(i) for every entry under `key`.
  template <typename F>
  void for_each(std::string_view key, F&& f) const {
    auto it = heads_.find(key);
    if (it == heads_.end()) return;
    for (std::size_t i = it->second; i != npos; i = next_[i]) f(i);
  }

 private:
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> heads_;
  std::vector<std::size_t> next_;
};

// index_key() into a reused buffer: no allocation per lookup.
std::string_view make_key(std::string& buf, std::string_view host, uint16_t port, Protocol p) {
  buf.clear();
  buf.append(host);
  buf.push_back('\0');
  buf.append(std::to_string(port));
  buf.push_back('\0');
  buf.push_back(static_cast<char>('0' + static_cast<int>(p)));
  return buf;
}

class Linter {
 public:
  Linter(const Manifest& m, const LintOptions& o) : m_(m), o_(o) {}

  std::vector<Finding> run() {
    const auto& caps = m_.capabilities;
    egress_used_.assign(caps.egress.size(), 0);
    egress_paired_.assign(caps.egress.size(), 0);
    read_used_.assign(caps.fs_read.size(), 0);
    read_paired_.assign(caps.fs_read.size(), 0);
    write_used_.assign(caps.fs_write.size(), 0);
    write_paired_.assign(caps.fs_write.size(), 0);
    tool_egress_.resize(m_.tools.size());
    tool_read_.resize(m_.tools.size());
    tool_write_.resize(m_.tools.size());

    index_entries();
    resolve_tools();
    pair_egress();
    pair_fs(caps.fs_read, read_used_, read_paired_, uncovered_read_, "capabilities.fs.read");
    pair_fs(caps.fs_write, write_used_, write_paired_, uncovered_write_, "capabilities.fs.write");
    report_unused();
    report_read_only();
    detail::lint_secrets(m_, out_);  // SP120, SP121
    if (o_.strict) {
      report_hosts();
      report_not_exercised();
      report_tier();
    }
    std::stable_sort(out_.begin(), out_.end(), [](const Finding& a, const Finding& b) {
      if (a.mark.line != b.mark.line) return a.mark.line < b.mark.line;
      if (a.mark.column != b.mark.column) return a.mark.column < b.mark.column;
      return a.rule_id < b.rule_id;
    });
    return std::move(out_);
  }

 private:
  void add(std::string_view rule, std::string message, std::string key_path, Mark mark,
           std::vector<Related> related = {}) {
    const RuleInfo* info = find_rule(rule);
    out_.push_back(Finding{std::string(rule), info ? info->severity : Severity::error, std::move(message),
                           std::move(key_path), mark, std::move(related)});
  }

  void index_entries() {
    const auto& caps = m_.capabilities;
    exact_ = Index(caps.egress.size());
    wildcard_ = Index(caps.egress.size());
    for (std::size_t i = 0; i < caps.egress.size(); ++i) {
      const EgressEntry& e = caps.egress[i];
      std::string host = lower(e.host);
      if (e.protocol == Protocol::moon_proxy) {
        proxies_.push_back(i);
      } else if (host.size() > 2 && host.compare(0, 2, "*.") == 0) {
        wildcard_.add(index_key(std::string_view(host).substr(2), e.port, e.protocol), i);
      } else {
        exact_.add(index_key(host, e.port, e.protocol), i);
      }
    }
    read_index_ = Index(caps.fs_read.size());
    write_index_ = Index(caps.fs_write.size());
    for (std::size_t i = 0; i < caps.fs_read.size(); ++i) read_index_.add(caps.fs_read[i].path, i);
    for (std::size_t i = 0; i < caps.fs_write.size(); ++i) write_index_.add(caps.fs_write[i].path, i);
  }

  // Indices of the egress entries allowing `t`, confirmed with host_matches.
  void match_egress(const manifest::ToolTarget& t, std::vector<std::size_t>& found) {
    const auto& egress = m_.capabilities.egress;
    std::string host = lower(t.host);
    auto confirm = [&](std::size_t i) {
      if (egress[i].port == t.port && egress[i].protocol == t.protocol &&
          manifest::host_matches(egress[i].host, t.host)) {
        found.push_back(i);
      }
    };
    exact_.for_each(make_key(key_buf_, host, t.port, t.protocol), confirm);
    // "*.suffix" matches names strictly below suffix: try every proper suffix of host.
    if (!wildcard_.empty()) {
      for (std::size_t dot = host.find('.'); dot != std::string::npos; dot = host.find('.', dot + 1)) {
        wildcard_.for_each(make_key(key_buf_, std::string_view(host).substr(dot + 1), t.port, t.protocol), confirm);
      }
    }
    // Through the Moon's HTTP proxy (C7), whose allowlist is the operator's: any http(s)
    // destination may be reachable, lint cannot tell more.
    if (found.empty() && (t.protocol == Protocol::https || t.protocol == Protocol::http)) {
      found.insert(found.end(), proxies_.begin(), proxies_.end());
    }
  }

  // Indices of the prefixes in `list` covering `path`: walk its ancestors.
  static void match_fs(const std::vector<FsPath>& list, const Index& index, const std::string& path,
                       std::vector<std::size_t>& found) {
    if (index.empty() || path.empty()) return;
    std::string_view p = path;
    while (true) {
      index.for_each(p, [&](std::size_t i) {
        if (manifest::path_covers(list[i].path, path)) found.push_back(i);
      });
      if (p.size() <= 1) break;
      std::size_t slash = p.rfind('/');
      if (slash == std::string_view::npos) break;
      p = slash == 0 ? p.substr(0, 1) : p.substr(0, slash);
    }
  }

  void resolve_tools() {
    const auto& caps = m_.capabilities;
    for (std::size_t ti = 0; ti < m_.tools.size(); ++ti) {
      const Tool& t = m_.tools[ti];
      if (is_http_kind(t.kind)) {
        if (!t.target || caps.egress_any) continue;
        match_egress(*t.target, tool_egress_[ti]);
        for (std::size_t i : tool_egress_[ti]) egress_used_[i] = 1;
        if (tool_egress_[ti].empty()) uncovered_egress_.push_back(ti);
      } else if (t.kind == ToolKind::fs_read) {
        match_fs(caps.fs_read, read_index_, t.path, tool_read_[ti]);
        if (tool_read_[ti].empty()) match_fs(caps.fs_write, write_index_, t.path, tool_write_[ti]);
        for (std::size_t i : tool_read_[ti]) read_used_[i] = 1;
        for (std::size_t i : tool_write_[ti]) write_used_[i] = 1;
        // M5: /workdir (the pack, its inputs and outputs) is always readable.
        bool implicit = manifest::path_covers(std::string(kWorkdir), t.path);
        if (tool_read_[ti].empty() && tool_write_[ti].empty() && !implicit) uncovered_read_.push_back(ti);
      } else if (t.kind == ToolKind::fs_write) {
        match_fs(caps.fs_write, write_index_, t.path, tool_write_[ti]);
        for (std::size_t i : tool_write_[ti]) write_used_[i] = 1;
        if (tool_write_[ti].empty()) uncovered_write_.push_back(ti);
      }
    }
  }

  static std::string tool_node(const Tool& t, const char* field) {
    return t.key_path.empty() ? fmt::format("tools.{}.{}", t.name, field) : t.key_path + "." + field;
  }

  // SP102 / SP101. Uncovered tools are paired with unused entries in passes of decreasing
  // likeness: same host, then same port and protocol, then same protocol, then any. Within
  // a pass, tools in file order take entries in declaration order. Each pass is one hash
  // lookup per tool: linear overall.
  void pair_egress() {
    const auto& egress = m_.capabilities.egress;
    auto host_key = [](std::string_view host, uint16_t, Protocol) { return lower(std::string(host)); };
    auto port_proto_key = [](std::string_view, uint16_t port, Protocol p) { return index_key("", port, p); };
    auto proto_key = [](std::string_view, uint16_t, Protocol p) { return index_key("", 0, p); };
    auto any_key = [](std::string_view, uint16_t, Protocol) { return std::string(); };
    std::vector<std::size_t> partner(m_.tools.size(), npos);
    auto pass = [&](auto key) {
      std::unordered_map<std::string, Pool> pools;
      for (std::size_t i = 0; i < egress.size(); ++i) {
        if (egress_used_[i] || egress_paired_[i] || egress[i].protocol == Protocol::moon_proxy) continue;
        pools[key(egress[i].host, egress[i].port, egress[i].protocol)].items.push_back(i);
      }
      if (pools.empty()) return;
      for (std::size_t ti : uncovered_egress_) {
        if (partner[ti] != npos) continue;
        const auto& tg = *m_.tools[ti].target;
        if (auto it = pools.find(key(tg.host, tg.port, tg.protocol)); it != pools.end()) {
          partner[ti] = it->second.take(egress_paired_);
        }
      }
    };
    pass(host_key);
    pass(port_proto_key);
    pass(proto_key);
    pass(any_key);

    for (std::size_t ti : uncovered_egress_) {
      const Tool& t = m_.tools[ti];
      const auto& tg = *t.target;
      std::string url_node = tool_node(t, "url");
      Mark url_mark = or_mark(t.url_mark, t.mark);
      std::size_t e = partner[ti];
      if (e == npos) {
        add("SP101",
            fmt::format("tools.{} uses `{}` but no capabilities.egress entry allows it", t.name,
                        triple(tg.host, tg.port, tg.protocol)),
            url_node, url_mark);
        continue;
      }
      const EgressEntry& d = egress[e];
      std::string declared = host_port(d.host, d.port);
      std::string used = host_port(tg.host, tg.port);
      if (d.protocol != tg.protocol) {
        declared += fmt::format("/{}", manifest::to_string(d.protocol));
        used += fmt::format("/{}", manifest::to_string(tg.protocol));
      }
      add("SP102", fmt::format("capabilities.egress declares `{}` but tools.{} uses `{}`", declared, t.name, used),
          d.key_path, d.mark, {Related{url_node, url_mark}});
    }
  }

  // SP104 / SP103, for one fs list (read or write), pairing in declaration order.
  void pair_fs(const std::vector<FsPath>& list, const std::vector<char>& used, std::vector<char>& paired,
               const std::vector<std::size_t>& uncovered, std::string_view list_name) {
    Pool pool;
    for (std::size_t i = 0; i < list.size(); ++i) {
      // The standard paths are never "unused" (see SP106), so they pair with nothing.
      if (!used[i] && !is_standard_fs_path(list[i].path)) pool.items.push_back(i);
    }
    for (std::size_t ti : uncovered) {
      const Tool& t = m_.tools[ti];
      std::string node = tool_node(t, "path");
      Mark mark = or_mark(t.path_mark, t.mark);
      std::size_t e = pool.take(paired);
      if (e == npos) {
        add("SP103",
            fmt::format("tools.{} {} `{}` but no {} prefix covers it", t.name,
                        t.kind == ToolKind::fs_write ? "writes" : "reads", t.path, list_name),
            node, mark);
        continue;
      }
      add("SP104", fmt::format("{} declares `{}` but tools.{} uses `{}`", list_name, list[e].path, t.name, t.path),
          list[e].key_path, list[e].mark, {Related{node, mark}});
    }
  }

  // SP105 / SP106.
  void report_unused() {
    const auto& caps = m_.capabilities;
    for (std::size_t i = 0; i < caps.egress.size(); ++i) {
      if (egress_used_[i] || egress_paired_[i]) continue;
      const EgressEntry& e = caps.egress[i];
      add("SP105", fmt::format("{} declares `{}` but no tool uses it", e.key_path, triple(e.host, e.port, e.protocol)),
          e.key_path, e.mark);
    }
    auto fs = [&](const std::vector<FsPath>& list, const std::vector<char>& used, const std::vector<char>& paired,
                  bool write) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (used[i] || paired[i] || exempt_from_use(list[i].path, write)) continue;
        add("SP106", fmt::format("{} declares `{}` but no tool uses it", list[i].key_path, list[i].path),
            list[i].key_path, list[i].mark);
      }
    };
    fs(caps.fs_read, read_used_, read_paired_, false);
    fs(caps.fs_write, write_used_, write_paired_, true);
  }

  // SP107 / SP108 (M6).
  void report_read_only() {
    const auto& caps = m_.capabilities;
    if (caps.tier != Tier::read_only) return;
    for (const Tool& t : m_.tools) {
      if (!has_side_effect(t)) continue;
      std::string what;
      if (t.kind == ToolKind::fs_write) {
        what = fmt::format("writes `{}` outside /workdir/out", t.path);
      } else if (t.kind == ToolKind::custom) {
        what = "declares side_effect: true";
      } else {
        what = "has a side effect";
      }
      add("SP107",
          fmt::format("tools.{} ({}) {} but determinism_tier is read-only", t.name, manifest::to_string(t.kind), what),
          t.key_path.empty() ? "tools." + t.name : t.key_path, t.mark);
    }
    for (std::size_t i = 0; i < caps.fs_write.size(); ++i) {
      const FsPath& p = caps.fs_write[i];
      if (write_paired_[i] || manifest::path_covers(std::string(kOut), p.path) || manifest::is_private_scratch(p.path)) {
        continue;  // M6: the output directory and private scratch are not effects
      }
      add("SP108", fmt::format("{} allows writing `{}` outside /workdir/out but determinism_tier is read-only",
                               p.key_path, p.path),
          p.key_path, p.mark);
    }
  }

  // SP110 / SP111.
  void report_hosts() {
    const auto& caps = m_.capabilities;
    if (caps.egress_any) {
      add("SP110", "capabilities.egress is \"*\": any host, any port, any protocol", "capabilities.egress",
          caps.egress_mark);
    }
    for (std::size_t i = 0; i < caps.egress.size(); ++i) {
      if (egress_paired_[i]) continue;
      const EgressEntry& e = caps.egress[i];
      if (e.host.compare(0, 2, "*.") == 0) {
        add("SP110", fmt::format("{} uses the wildcard host `{}`", e.key_path, e.host), e.key_path, e.mark);
      } else if (is_ip_literal(e.host)) {
        add("SP111", fmt::format("{} uses the IP literal `{}` instead of a DNS name", e.key_path, e.host),
            e.key_path, e.mark);
      }
    }
  }

  // SP112 / SP113: what the examples exercise, through the tools they list.
  void report_not_exercised() {
    const auto& caps = m_.capabilities;
    std::unordered_map<std::string_view, std::size_t> tool_by_name;
    for (std::size_t ti = 0; ti < m_.tools.size(); ++ti) tool_by_name.emplace(m_.tools[ti].name, ti);
    std::vector<char> tool_exercised(m_.tools.size(), 0);
    for (const auto& ex : m_.examples) {
      for (const auto& name : ex.tools) {
        if (auto it = tool_by_name.find(name); it != tool_by_name.end()) tool_exercised[it->second] = 1;
      }
    }
    std::vector<char> egress_ex(caps.egress.size(), 0), read_ex(caps.fs_read.size(), 0),
        write_ex(caps.fs_write.size(), 0);
    for (std::size_t ti = 0; ti < m_.tools.size(); ++ti) {
      if (!tool_exercised[ti]) continue;
      for (std::size_t i : tool_egress_[ti]) egress_ex[i] = 1;
      for (std::size_t i : tool_read_[ti]) read_ex[i] = 1;
      for (std::size_t i : tool_write_[ti]) write_ex[i] = 1;
    }
    for (std::size_t i = 0; i < caps.egress.size(); ++i) {
      if (egress_ex[i] || egress_paired_[i]) continue;
      const EgressEntry& e = caps.egress[i];
      add("SP112", fmt::format("{} declares `{}` but no example exercises it", e.key_path,
                               triple(e.host, e.port, e.protocol)),
          e.key_path, e.mark);
    }
    auto fs = [&](const std::vector<FsPath>& list, const std::vector<char>& ex, const std::vector<char>& paired,
                  bool write) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (ex[i] || paired[i] || exempt_from_use(list[i].path, write)) continue;
        add("SP113", fmt::format("{} declares `{}` but no example exercises it", list[i].key_path, list[i].path),
            list[i].key_path, list[i].mark);
      }
    };
    fs(caps.fs_read, read_ex, read_paired_, false);
    fs(caps.fs_write, write_ex, write_paired_, true);
  }

  // SP114 / SP115: the tier the pack needs (needed_tier(), the rule `pack learn` proposes
  // by too) against the one it declares.
  void report_tier() {
    const auto& caps = m_.capabilities;
    const Tier needed = needed_tier(m_).tier;
    const std::string tier_node = "capabilities.determinism_tier";
    Mark mark = or_mark(caps.tier_mark, Mark{});
    if (static_cast<int>(caps.tier) > static_cast<int>(needed)) {
      std::string reason = caps.tier == Tier::unrestricted ? "capabilities.egress is not \"*\""
                                                           : "no tool has a side effect";
      add("SP114",
          fmt::format("determinism_tier is {} but {}: {} is enough", manifest::to_string(caps.tier), reason,
                      manifest::to_string(needed)),
          tier_node, mark);
    }
    // SP115: stricter than needed. Validation (M6) and SP107 already refuse most of these;
    // under --strict the tier itself is reported, once, so a reviewer sees the mismatch.
    if (static_cast<int>(caps.tier) < static_cast<int>(needed)) {
      add("SP115",
          fmt::format("determinism_tier is {} but the pack needs {}", manifest::to_string(caps.tier),
                      manifest::to_string(needed)),
          tier_node, mark);
    }
  }

  const Manifest& m_;
  const LintOptions& o_;
  std::vector<Finding> out_;

  Index exact_, wildcard_;  // egress entries by (host, port, protocol); wildcards by suffix
  std::vector<std::size_t> proxies_;
  Index read_index_, write_index_;  // fs prefixes by path
  std::string key_buf_;

  std::vector<char> egress_used_, egress_paired_, read_used_, read_paired_, write_used_, write_paired_;
  std::vector<std::vector<std::size_t>> tool_egress_, tool_read_, tool_write_;
  std::vector<std::size_t> uncovered_egress_, uncovered_read_, uncovered_write_;
};

}  // namespace

std::vector<Finding> lint(const Manifest& m, const LintOptions& options) { return Linter(m, options).run(); }

TierNeed needed_tier(const Manifest& m) {
  const auto& caps = m.capabilities;
  if (caps.egress_any) return {Tier::unrestricted, "capabilities.egress is \"*\""};
  // builtin.llm has no side effect (M3): a read-only pack may call a model; its cached
  // result replays one answer (C10), which the cache_hit event states.
  for (const Tool& t : m.tools) {
    if (has_side_effect(t)) {
      return {Tier::side_effect, fmt::format("tools.{} ({}) has a side effect", t.name, manifest::to_string(t.kind))};
    }
  }
  for (const FsPath& p : caps.fs_write) {
    if (!manifest::path_covers(std::string(kOut), p.path) && !manifest::is_private_scratch(p.path)) {
      return {Tier::side_effect,
              fmt::format("{} `{}` is outside /workdir/out and not private scratch", p.key_path, p.path)};
    }
  }
  return {Tier::read_only, "no tool has a side effect and every fs.write path is /workdir/out or private scratch"};
}

std::optional<TierChange> propose_tier(const Manifest& learned) {
  const Tier declared = learned.capabilities.tier;
  const TierNeed need = needed_tier(learned);
  if (need.tier == declared) return std::nullopt;
  auto rule_name = [](std::string_view id) {
    const RuleInfo* r = find_rule(id);
    return r != nullptr ? std::string(r->name) : std::string();
  };
  if (static_cast<int>(need.tier) < static_cast<int>(declared)) {
    const std::string because = declared == Tier::unrestricted
                                    ? "capabilities.egress is not \"*\"; " + need.because
                                    : need.because;
    return TierChange{declared, need.tier, "SP114", fmt::format("SP114 {}: {}", rule_name("SP114"), because)};
  }
  // Wider only when lint refuses the manifest at its declared tier (not under --strict:
  // SP115 alone is the strict report of the same mismatch, never a reason by itself).
  for (const Finding& f : lint(learned)) {
    if (f.severity == Severity::error && (f.rule_id == "SP107" || f.rule_id == "SP108")) {
      return TierChange{declared, need.tier, f.rule_id,
                        fmt::format("{} {}: {}", f.rule_id, rule_name(f.rule_id), need.because)};
    }
  }
  return std::nullopt;
}

}  // namespace soyaos::lint
