#include "supervisor/provenance.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/content_digest.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "supervisor/egress_plan.h"

namespace soyaos::supervisor {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

std::string entry_text(const manifest::EgressEntry& e) {
  return egress_target(e.host, e.port, manifest::to_string(e.protocol));
}

std::string address_text(const policy::IpAddress& a, uint16_t port) {
  const std::string host = policy::to_string(a);
  return (a.v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

json run_user() {
  const uid_t uid = ::getuid();
  json user = {{"uid", uid}, {"name", nullptr}};
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    user["name"] = valid_utf8(found->pw_name);
  }
  return user;
}

json capabilities_in_force(const manifest::Manifest& m, const policy::Policy& policy,
                           const std::vector<std::string>& mounts) {
  json egress;
  if (policy.egress_any) {
    egress = "*";
  } else {
    egress = json::array();
    for (const auto& e : policy.egress) egress.push_back(entry_text(e));
  }
  json read = json::array(), write = json::array(), mount_list = json::array();
  for (const auto& p : policy.fs.read) read.push_back(valid_utf8(p));
  for (const auto& p : policy.fs.write) write.push_back(valid_utf8(p));
  for (const auto& p : mounts) mount_list.push_back(valid_utf8(p));
  return {{"egress", std::move(egress)},
          {"fs", {{"read", std::move(read)}, {"write", std::move(write)}}},
          {"determinism_tier", manifest::to_string(m.capabilities.tier)},
          {"resources",
           {{"memory_bytes", policy.limits.memory_bytes},
            {"pids", policy.limits.pids},
            {"timeout_ms", policy.limits.timeout_ms},
            {"grace_ms", policy.limits.grace_ms},
            {"write_quota_bytes", policy.limits.write_quota_bytes},
            {"open_files", policy.limits.open_files}}},
          {"mounts", std::move(mount_list)}};
}

json operator_policy(const policy::OperatorNetwork& n) {
  json deny = json::array(), allow_private = json::array(), proxy_allow = json::array(), ca_files = json::array();
  for (const auto& d : n.egress_deny) deny.push_back(d);
  for (const auto& c : n.allow_private) allow_private.push_back(policy::to_string(c));
  for (const auto& e : n.proxy_allow) proxy_allow.push_back(entry_text(e));
  for (const auto& f : n.tls_ca_files) ca_files.push_back(valid_utf8(f));
  json connect_to = json::object();
  for (const auto& [from, to] : n.connect_to) {
    const bool v6 = from.first.find(':') != std::string::npos;
    connect_to[(v6 ? "[" + from.first + "]" : from.first) + ":" + std::to_string(from.second)] =
        address_text(to.addr, to.port);
  }
  json hosts = json::object();
  for (const auto& [name, addrs] : n.dns_hosts) {
    json list = json::array();
    for (const auto& a : addrs) list.push_back(policy::to_string(a));
    hosts[name] = std::move(list);
  }
  return {{"egress_deny", std::move(deny)},
          {"allow_private", std::move(allow_private)},
          {"connect_to", std::move(connect_to)},
          {"proxy_allow", std::move(proxy_allow)},
          {"dns_hosts", std::move(hosts)},
          {"dns_upstream", n.dns_upstream ? json(address_text(n.dns_upstream->server, n.dns_upstream->port))
                                          : json("system")},
          {"tls_ca_files", std::move(ca_files)}};
}

Result<json> inputs_record(const std::vector<policy::InputSpec>& inputs) {
  json out = json::array();
  if (inputs.empty()) return out;
  auto targets = policy::input_targets(inputs);
  if (!targets) return targets.error();
  for (size_t i = 0; i < inputs.size(); ++i) {
    // An input the digest cannot describe (e.g. a symlink out of it, which the Comet shows
    // as absent) still runs: the record says why it has no digest instead of refusing.
    auto digest = input_digest(inputs[i].path);
    std::error_code ec;
    const fs::path host = fs::absolute(inputs[i].path, ec);
    json entry = {{"name", inputs[i].name.empty() ? json(nullptr) : json(inputs[i].name)},
                  {"path", valid_utf8((*targets)[i])},
                  {"host_path", valid_utf8((ec ? inputs[i].path : host).string())},
                  {"digest", digest ? json(*digest) : json(nullptr)}};
    if (!digest) entry["digest_error"] = valid_utf8(digest.error().describe());
    out.push_back(std::move(entry));
  }
  return out;
}

json output_digests(const OutputCapture& captured, bool out_collected, const std::string& out_dir, std::string& error) {
  json tree = nullptr;
  if (out_collected) {
    auto d = out_tree_digest(fs::path(out_dir));
    if (d) {
      tree = *d;
    } else {
      error = "digest of the collected /workdir/out: " + d.error().describe();
    }
  }
  return {{"stdout", {{"digest", captured.out_digest}, {"bytes", captured.out_bytes}}},
          {"stderr", {{"digest", captured.err_digest}, {"bytes", captured.err_bytes}}},
          {"tree_digest", std::move(tree)}};
}

}  // namespace soyaos::supervisor
