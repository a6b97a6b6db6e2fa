#include "policy/learn_proposal.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "common/text.h"
#include "policy/operator_network.h"

namespace soyaos::policy {
namespace {

constexpr size_t kMaxWhy = 200;

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

bool is_mkdir(const std::string& syscall) { return syscall == "mkdir" || syscall == "mkdirat"; }

// A canonical DNS name as the stub hands them out (lower-case LDH labels), or an IP literal.
bool plausible_host(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  if (parse_ip(host)) return true;
  return host.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") == std::string::npos &&
         host.front() != '.' && host.back() != '.' && host.find("..") == std::string::npos;
}

// "HOST:PORT/PROTOCOL" (events' egress targets; IPv6 in brackets).
bool parse_target(const std::string& r, manifest::EgressEntry* e) {
  const size_t slash = r.rfind('/');
  const size_t colon = r.rfind(':', slash);
  if (slash == std::string::npos || colon == std::string::npos || colon == 0) return false;
  auto proto = manifest::protocol_from_string(r.substr(slash + 1));
  if (!proto || *proto == manifest::Protocol::moon_proxy) return false;
  const std::string port = r.substr(colon + 1, slash - colon - 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const unsigned long n = std::stoul(port);
  if (n == 0 || n > 65535) return false;
  std::string host = r.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (!plausible_host(host)) return false;
  e->host = host;
  e->port = static_cast<uint16_t>(n);
  e->protocol = *proto;
  return true;
}

bool fake_literal(const std::string& host) {
  auto ip = parse_ip(host);
  return ip && !ip->v6 && ip->bytes[0] == 198 && (ip->bytes[1] == 18 || ip->bytes[1] == 19);
}

std::string detail_text(const std::string& detail) {
  return detail.rfind("learn: ", 0) == 0 ? detail.substr(7) : detail;
}

void push_capped(std::vector<std::string>& list, uint64_t& more, const std::string& s) {
  if (std::find(list.begin(), list.end(), s) != list.end()) return;
  if (list.size() >= kMaxListed) {
    ++more;
    return;
  }
  list.push_back(truncate_utf8(s, 2 * kMaxWhy));
}

struct Cand {
  std::string path, why;
  size_t below = 0;  // other observed paths it covers
};

// Dedupes, lets a covering path absorb what it covers, groups many siblings into their
// directory, drops what `covered` says the manifest already allows; caps the result.
std::vector<ProposedPath> settle(std::vector<Cand> cands, const std::function<bool(const std::string&)>& covered,
                                 const std::string& verb, uint64_t& more) {
  // Many siblings -> their directory (when it could be granted itself).
  std::map<std::string, size_t> per_parent;
  for (const auto& c : cands) ++per_parent[parent_of(c.path)];
  for (auto& c : cands) {
    const std::string parent = parent_of(c.path);
    if (per_parent[parent] > kGroupFiles && parent != "/" && !manifest::is_comet_reserved(parent) &&
        !manifest::path_covers("/workdir", parent)) {
      // "the run: read P" -> "the run: 12 reads below it, e.g. read P"
      const size_t colon = c.why.find(": ");
      const std::string who = colon == std::string::npos ? std::string() : c.why.substr(0, colon + 2);
      c.why = who + std::to_string(per_parent[parent]) + " " + verb + " below it, e.g. " +
              (colon == std::string::npos ? c.why : c.why.substr(colon + 2));
      c.path = parent;
    }
  }
  std::vector<Cand> out;
  for (const auto& c : cands) {
    bool absorbed = false;
    for (const auto& other : cands) {
      if (other.path != c.path && manifest::path_covers(other.path, c.path)) absorbed = true;
    }
    if (absorbed) continue;
    auto same = std::find_if(out.begin(), out.end(), [&](const Cand& o) { return o.path == c.path; });
    if (same != out.end()) {
      ++same->below;
      continue;
    }
    out.push_back(c);
  }
  std::vector<ProposedPath> result;
  for (const auto& c : out) {
    if (covered(c.path)) continue;
    if (result.size() >= kMaxProposed) {
      ++more;
      continue;
    }
    result.push_back({c.path, truncate_utf8(c.why, kMaxWhy)});
  }
  return result;
}

}  // namespace

std::string egress_yaml(const manifest::EgressEntry& e) {
  return "{host: " + e.host + ", port: " + std::to_string(e.port) + ", protocol: " + manifest::to_string(e.protocol) +
         "}";
}

std::vector<std::string> Proposal::keys() const {
  std::vector<std::string> k;
  for (const auto& e : egress) k.push_back("egress " + egress_yaml(e.entry));
  for (const auto& r : fs_read) k.push_back("read " + r.path);
  for (const auto& w : fs_write) k.push_back("write " + w.path);
  for (const auto& n : not_grantable) k.push_back("not grantable " + n);
  std::sort(k.begin(), k.end());
  return k;
}

void Learner::add(const Observation& o, const std::string& used_by, uint64_t count) {
  const std::string key = o.surface + '\x1f' + o.access + '\x1f' + o.resource;
  if (auto it = index_.find(key); it != index_.end()) {
    order_[it->second].count += count;
    return;
  }
  if (order_.size() >= kMaxObservations) {
    dropped_ += count;
    return;
  }
  index_[key] = order_.size();
  order_.push_back({o, used_by, count});
}

Proposal Learner::propose(const manifest::Manifest& m) const {
  Proposal p;
  p.observations_dropped = dropped_;
  std::vector<Cand> reads, writes;
  std::vector<ProposedEgress> egress;
  std::vector<std::pair<std::string, std::string>> names;  // (name, used_by), in order
  for (const auto& s : order_) {
    const Observation& o = s.o;
    const std::string from = s.used_by + ": ";   // "the run: ", "example basic: "
    const std::string by = " [" + s.used_by + "]";
    if (o.surface == "fs") {
      const std::string& path = o.resource;
      const std::string what = "fs " + o.access + " " + path + " (" + o.syscall + ")" + by;
      if (!manifest::is_normalised_absolute(path) || !is_valid_utf8(path)) {
        push_capped(p.not_grantable, p.more_not_grantable, what + ": not a path a manifest can name");
        continue;
      }
      if (o.access == "read") {
        if (manifest::path_covers("/workdir", path)) {
          const char* area = manifest::path_covers("/workdir/inputs", path) ? "/workdir/inputs"
                             : manifest::path_covers("/workdir/out", path)  ? "/workdir/out"
                                                                            : "/workdir";
          reads.push_back({area, from + "read " + path});
        } else if (manifest::is_comet_reserved(path)) {
          push_capped(p.not_grantable, p.more_not_grantable,
                      what + ": the Comet owns this path (`/`, the runtime layer, /etc, /proc, /dev)");
        } else {
          reads.push_back({path, from + "read " + path});
        }
        continue;
      }
      if (manifest::path_covers("/workdir/out", path)) {
        writes.push_back({"/workdir/out", from + "write " + path});
      } else if (manifest::path_covers("/workdir", path)) {
        push_capped(p.not_grantable, p.more_not_grantable, what + ": the pack (/workdir) is always read-only");
      } else {
        const std::string dir = is_mkdir(o.syscall) ? path : parent_of(path);
        if (dir == "/" || manifest::is_comet_reserved(dir)) {
          push_capped(p.not_grantable, p.more_not_grantable,
                      what + ": writable paths are directories the Comet serves, never `/` or one it owns");
        } else {
          writes.push_back({dir, from + "write " + path + " (" + o.syscall + ")"});
        }
      }
    } else if (o.surface == "network") {
      if (o.resource.rfind("dns:", 0) == 0) {
        const std::string name = o.resource.substr(4);
        if (o.detail.rfind("learn: ", 0) == 0) {
          names.emplace_back(name, s.used_by);  // listed as "NAME [the run]"
        } else {
          push_capped(p.notes, p.more_notes, "dns " + name + " refused" + by + ": " + o.errno_name +
                                                 (o.detail.empty() ? "" : " (" + o.detail + ")"));
        }
        continue;
      }
      manifest::EgressEntry e;
      if (!parse_target(o.resource, &e)) {
        push_capped(p.notes, p.more_notes,
                    "network " + o.resource + by + (o.detail.empty() ? "" : ": " + o.detail) + " (not learned)");
        continue;
      }
      if (fake_literal(e.host)) {
        push_capped(p.notes, p.more_notes, "network " + o.resource + by + ": " + o.detail + " (not learned)");
        continue;
      }
      egress.push_back({e, from + (o.detail.empty() ? manifest::to_string(e.protocol) : detail_text(o.detail))});
    } else if (o.surface == "exec") {
      push_capped(p.not_grantable, p.more_not_grantable,
                  "exec " + o.resource + " (" + o.syscall + ")" + by +
                      ": no new process or program (the seed forbids it; use the pack's own runtime)");
    } else if (o.surface == "time") {
      push_capped(p.not_grantable, p.more_not_grantable,
                  "time " + o.resource + " (" + o.syscall + ")" + by + ": setting a clock is never allowed");
    } else {
      push_capped(p.notes, p.more_notes, o.surface + " " + o.resource + by);
    }
  }

  const auto& caps = m.capabilities;
  auto covered_by = [](const std::vector<manifest::FsPath>& list, const std::string& path) {
    return std::any_of(list.begin(), list.end(),
                       [&](const manifest::FsPath& f) { return manifest::path_covers(f.path, path); });
  };
  p.fs_read = settle(
      reads, [&](const std::string& path) { return covered_by(caps.fs_read, path) || covered_by(caps.fs_write, path); },
      "reads", p.more_read);
  p.fs_write = settle(writes, [&](const std::string& path) { return covered_by(caps.fs_write, path); }, "writes",
                      p.more_write);

  std::set<std::string> hosts;
  for (const auto& c : egress) {
    const auto& e = c.entry;
    hosts.insert(e.host);
    const bool have = caps.egress_any || std::any_of(caps.egress.begin(), caps.egress.end(), [&](const auto& d) {
                        return d.port == e.port && d.protocol == e.protocol &&
                               (d.host == e.host || manifest::host_matches(d.host, e.host));
                      });
    const bool dup = std::any_of(p.egress.begin(), p.egress.end(), [&](const ProposedEgress& q) {
      return q.entry.host == e.host && q.entry.port == e.port && q.entry.protocol == e.protocol;
    });
    if (have || dup) continue;
    if (p.egress.size() >= kMaxProposed) {
      ++p.more_egress;
      continue;
    }
    p.egress.push_back({e, truncate_utf8(c.why, kMaxWhy)});
  }
  for (const auto& named : names) {
    const std::string& name = named.first;
    const std::string& by = named.second;
    const bool declared = std::any_of(caps.egress.begin(), caps.egress.end(), [&](const auto& d) {
      return d.host == name || manifest::host_matches(d.host, name);
    });
    if (hosts.count(name) != 0 || declared) continue;
    push_capped(p.names_only, p.more_names, name + " [" + by + "]");
  }
  return p;
}

void apply_proposal(manifest::Manifest& m, const Proposal& p, bool network) {
  auto& caps = m.capabilities;
  for (const auto& r : p.fs_read) {
    caps.fs_read.push_back({r.path, "capabilities.fs.read[" + std::to_string(caps.fs_read.size()) + "]", {}});
  }
  for (const auto& w : p.fs_write) {
    caps.fs_write.push_back({w.path, "capabilities.fs.write[" + std::to_string(caps.fs_write.size()) + "]", {}});
  }
  if (!network || caps.egress_any) return;
  for (const auto& e : p.egress) {
    manifest::EgressEntry entry = e.entry;
    entry.key_path = "capabilities.egress[" + std::to_string(caps.egress.size()) + "]";
    caps.egress.push_back(entry);
  }
}

}  // namespace soyaos::policy
