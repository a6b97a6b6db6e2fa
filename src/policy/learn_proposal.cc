#include "policy/learn_proposal.h"

#include <algorithm>
#include <map>

#include "common/text.h"
#include "policy/grant_proposal.h"
#include "policy/operator_network.h"

namespace soyaos::policy {
namespace {

constexpr size_t kMaxWhy = 200;

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
  for (const auto& n : not_grantable_keys) k.push_back("not grantable " + n);
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
  // The entries come from the rule set `soyaos run`'s hints use (grant_proposal.h); what is
  // particular to learning is only which observations are attempts to grant: a name the
  // stub answered with a learning address is a lookup like a refused one, a connection the
  // gateway classified is a refused connection "as seen", and the rest are notes.
  std::vector<DeniedAttempt> attempts;
  std::map<std::string, const Seen*> first_seen;  // "surface|access|resource" -> its observation
  auto key_of = [](const std::string& surface, const std::string& access, const std::string& resource) {
    return surface + '\x1f' + access + '\x1f' + resource;
  };
  for (const auto& s : order_) {
    const Observation& o = s.o;
    const std::string by = " [" + s.used_by + "]";
    std::string detail = o.detail;
    if (o.surface == "network") {
      const bool learned = o.detail.rfind("learn: ", 0) == 0;
      if (o.resource.rfind("dns:", 0) == 0) {
        if (!learned) {
          push_capped(p.notes, p.more_notes, "dns " + o.resource.substr(4) + " refused" + by + ": " + o.errno_name +
                                                 (o.detail.empty() ? "" : " (" + o.detail + ")"));
          continue;
        }
        detail.clear();  // looked up: a name, its port and protocol still unknown
      } else {
        manifest::EgressEntry e;
        if (!parse_target(o.resource, &e) || fake_literal(e.host)) {
          push_capped(p.notes, p.more_notes,
                      "network " + o.resource + by + (o.detail.empty() ? "" : ": " + o.detail) + " (not learned)");
          continue;
        }
        if (learned) detail.clear();  // classified by the gateway: the protocol is in the resource
      }
    }
    attempts.push_back({o.surface, o.access, o.resource, o.errno_name, detail, s.count, o.syscall});
    first_seen.emplace(key_of(o.surface, o.access, o.resource), &s);
  }
  const GrantProposals g = propose_grants(attempts);
  p.more_read = g.omitted_read;
  p.more_write = g.omitted_write;
  p.more_egress = g.omitted_egress;
  p.more_not_grantable = g.omitted_not_grantable;

  // The observation a proposal is explained by: its first example that is not a bare
  // lookup (an egress entry's connection says more than the name).
  auto seen_for = [&](const GrantProposal& item) -> const Seen* {
    const Seen* found = nullptr;
    for (const auto& ex : item.examples) {
      auto it = first_seen.find(key_of(item.surface, item.access, ex));
      if (it == first_seen.end()) continue;
      if (found == nullptr || (found->o.resource.rfind("dns:", 0) == 0 && ex.rfind("dns:", 0) != 0)) found = it->second;
    }
    return found;
  };
  const auto& caps = m.capabilities;
  auto covered_by = [](const std::vector<manifest::FsPath>& list, const std::string& path) {
    return std::any_of(list.begin(), list.end(),
                       [&](const manifest::FsPath& f) { return manifest::path_covers(f.path, path); });
  };
  for (const auto& item : g.items) {
    const Seen* seen = seen_for(item);
    const std::string used_by = seen != nullptr ? seen->used_by : std::string("the run");
    if (!item.grantable) {
      // "exec /usr/bin/true: 1 attempt [the run]: a Comet executes ..."
      const std::string what =
          item.covers.rfind(item.surface + " ", 0) == 0 ? item.covers : item.surface + " " + item.covers;
      push_capped(p.not_grantable, p.more_not_grantable, what + " [" + used_by + "]: " + item.note);
      const size_t counts = what.rfind(": ");  // "...: 3 attempts"
      p.not_grantable_keys.push_back(what.substr(0, counts) + ": " + item.note);
      continue;
    }
    if (item.section == "capabilities.fs.read" || item.section == "capabilities.fs.write") {
      const bool write = item.section == "capabilities.fs.write";
      if (write ? covered_by(caps.fs_write, item.path)
                : covered_by(caps.fs_read, item.path) || covered_by(caps.fs_write, item.path)) {
        continue;
      }
      auto& list = write ? p.fs_write : p.fs_read;
      if (list.size() >= kMaxProposed) {
        ++(write ? p.more_write : p.more_read);
        continue;
      }
      std::string why = used_by + ": " + (write ? "write " : "read ") +
                        (seen != nullptr ? seen->o.resource : item.path);
      if (write && seen != nullptr && !seen->o.syscall.empty()) why += " (" + seen->o.syscall + ")";
      if (item.count > 1) why += "; " + item.covers;
      list.push_back({item.path, truncate_utf8(why, kMaxWhy)});
      continue;
    }
    if (item.section == "capabilities.egress") {
      auto proto = manifest::protocol_from_string(item.protocol);
      if (!item.complete || !proto) {
        // Looked up, never connected to: nothing says which port and protocol to allow.
        push_capped(p.names_only, p.more_names, item.host + " [" + used_by + "]");
        continue;
      }
      manifest::EgressEntry e;
      e.host = item.host;
      e.port = item.port;
      e.protocol = *proto;
      const bool have = caps.egress_any || std::any_of(caps.egress.begin(), caps.egress.end(), [&](const auto& d) {
                          return d.port == e.port && d.protocol == e.protocol &&
                                 (d.host == e.host || manifest::host_matches(d.host, e.host));
                        });
      if (have) continue;
      if (p.egress.size() >= kMaxProposed) {
        ++p.more_egress;
        continue;
      }
      const bool classified = seen != nullptr && seen->o.detail.rfind("learn: ", 0) == 0;
      const std::string why = used_by + ": " + (classified ? detail_text(seen->o.detail) : manifest::to_string(e.protocol));
      p.egress.push_back({e, truncate_utf8(why, kMaxWhy)});
      continue;
    }
    // An http rule refused on a declared entry: the editor adds no rules; said as the hint.
    push_capped(p.notes, p.more_notes,
                "to allow: add " + item.entry + " under " + item.section + " (" + item.covers + ") [" + used_by + "]");
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
