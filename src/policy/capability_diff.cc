// capability_diff.h: set differences over the capability block, in a fixed order.
#include "policy/capability_diff.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "common/text.h"

namespace soyaos::policy {
namespace {

using manifest::Manifest;

int tier_rank(manifest::Tier t) {
  switch (t) {
    case manifest::Tier::read_only: return 0;
    case manifest::Tier::side_effect: return 1;
    case manifest::Tier::unrestricted: return 2;
  }
  return 2;
}

// Entries by key; an entry listed twice keeps the union of its rules.
std::map<std::string, std::set<std::string>> egress_of(const Manifest& m, std::map<std::string, bool>& any_request) {
  std::map<std::string, std::set<std::string>> out;
  if (m.capabilities.egress_any) {
    out["*"];
    any_request["*"] = true;
  }
  for (const auto& e : m.capabilities.egress) {
    const std::string key = egress_key(e);
    auto& rules = out[key];
    // No rules = any request; once any entry for the key allows any request, it stays so.
    if (e.http.empty()) any_request[key] = true;
    if (!any_request.contains(key)) any_request[key] = false;
    for (const auto& r : e.http) rules.insert(r.method + " " + r.path);
  }
  return out;
}

std::set<std::string> paths_of(const std::vector<manifest::FsPath>& v) {
  std::set<std::string> out;
  for (const auto& p : v) out.insert(p.path);
  return out;
}

std::map<std::string, std::set<std::string>> secrets_of(const Manifest& m) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& s : m.secrets) out[s.name].insert(s.hosts.begin(), s.hosts.end());
  return out;
}

void set_diff(const std::string& area, const std::set<std::string>& a, const std::set<std::string>& b,
              const std::string& entry, std::vector<CapabilityChange>& out) {
  for (const auto& x : b) {
    if (!a.contains(x)) out.push_back({area, ChangeKind::added, x, entry, "", "", true});
  }
  for (const auto& x : a) {
    if (!b.contains(x)) out.push_back({area, ChangeKind::removed, x, entry, "", "", false});
  }
}

void limit(const char* name, uint64_t a, uint64_t b, std::vector<CapabilityChange>& out) {
  if (a == b) return;
  out.push_back({std::string("limits.") + name, ChangeKind::changed, "", "", std::to_string(a), std::to_string(b),
                 b > a});
}

}  // namespace

const char* to_string(ChangeKind k) {
  switch (k) {
    case ChangeKind::added: return "added";
    case ChangeKind::removed: return "removed";
    case ChangeKind::changed: return "changed";
  }
  return "changed";
}

bool CapabilityDiff::wider() const {
  return std::any_of(changes.begin(), changes.end(), [](const CapabilityChange& c) { return c.wider; });
}

std::string egress_key(const manifest::EgressEntry& e) {
  const bool v6 = e.host.find(':') != std::string::npos;
  return (v6 ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port) + "/" + manifest::to_string(e.protocol);
}

CapabilityDiff diff_capabilities(const Manifest& from, const Manifest& to) {
  CapabilityDiff d;
  auto& out = d.changes;
  std::map<std::string, bool> any_a, any_b;
  const auto ea = egress_of(from, any_a);
  const auto eb = egress_of(to, any_b);
  std::set<std::string> keys_a, keys_b;
  for (const auto& [k, _] : ea) keys_a.insert(k);
  for (const auto& [k, _] : eb) keys_b.insert(k);
  set_diff("egress", keys_a, keys_b, "", out);
  // http rules of the entries both have.
  for (const auto& [key, rules_b] : eb) {
    auto it = ea.find(key);
    if (it == ea.end()) continue;
    const bool a_any = any_a[key], b_any = any_b[key];
    if (a_any && b_any) continue;  // any request either way
    if (!a_any && b_any) {
      out.push_back({"http", ChangeKind::removed, "every rule (any request now allowed)", key, "", "", true});
      continue;
    }
    if (a_any && !b_any) {
      for (const auto& r : rules_b) out.push_back({"http", ChangeKind::added, r, key, "", "", false});
      continue;  // rules where there were none: B only narrows
    }
    set_diff("http", it->second, rules_b, key, out);
  }
  set_diff("fs.read", paths_of(from.capabilities.fs_read), paths_of(to.capabilities.fs_read), "", out);
  set_diff("fs.write", paths_of(from.capabilities.fs_write), paths_of(to.capabilities.fs_write), "", out);
  const auto sa = secrets_of(from), sb = secrets_of(to);
  std::set<std::string> names_a, names_b;
  for (const auto& [k, _] : sa) names_a.insert(k);
  for (const auto& [k, _] : sb) names_b.insert(k);
  set_diff("secrets", names_a, names_b, "", out);
  for (const auto& [name, hosts_b] : sb) {
    auto it = sa.find(name);
    if (it != sa.end()) set_diff("secrets.hosts", it->second, hosts_b, name, out);
  }
  if (from.capabilities.tier != to.capabilities.tier) {
    out.push_back({"tier", ChangeKind::changed, "", "", manifest::to_string(from.capabilities.tier),
                   manifest::to_string(to.capabilities.tier),
                   tier_rank(to.capabilities.tier) > tier_rank(from.capabilities.tier)});
  }
  const auto& ra = from.resources;
  const auto& rb = to.resources;
  limit("memory", ra.memory_bytes, rb.memory_bytes, out);
  limit("pids", ra.pids, rb.pids, out);
  limit("timeout_ms", ra.timeout_ms, rb.timeout_ms, out);
  limit("grace_ms", ra.grace_ms, rb.grace_ms, out);
  limit("write_quota", ra.write_quota_bytes, rb.write_quota_bytes, out);
  limit("open_files", ra.open_files, rb.open_files, out);
  return d;
}

std::vector<std::string> format_diff_lines(const CapabilityDiff& diff, bool escape) {
  std::vector<std::string> out;
  for (const auto& c : diff.changes) {
    const char sign = c.kind == ChangeKind::added ? '+' : c.kind == ChangeKind::removed ? '-' : '~';
    std::string area = c.area;
    area.resize(std::max<size_t>(area.size(), 14), ' ');
    std::string what;
    if (c.kind == ChangeKind::changed) {
      what = c.from + " -> " + c.to;
    } else if (c.area == "http") {
      what = c.entry + "  " + c.item;
    } else if (c.area == "secrets.hosts") {
      what = c.entry + " -> " + c.item;
    } else {
      what = c.item;
    }
    out.push_back(std::string(1, sign) + " " + area + " " + (escape ? escape_for_terminal(what) : what) +
                  (c.wider ? "  (wider)" : ""));
  }
  if (diff.empty()) {
    out.emplace_back("no capability changes");
  } else if (diff.wider()) {
    out.emplace_back("wider: B may do what A may not");
  } else {
    out.emplace_back("narrower: B may do nothing A may not");
  }
  return out;
}

std::string format_diff_text(const CapabilityDiff& diff) {
  std::string out;
  for (const auto& l : format_diff_lines(diff, /*escape=*/true)) out += l + "\n";
  return out;
}

}  // namespace soyaos::policy
