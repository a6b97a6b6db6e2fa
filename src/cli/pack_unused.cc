#include "cli/pack_unused.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "policy/http_rules.h"
#include "supervisor/run.h"

namespace soyaos::cli {
namespace {

using Json = nlohmann::ordered_json;

// A run's requests that went upstream on intercepted connections (http_request events),
// kept up to a bound: an agent chooses how many it makes.
constexpr size_t kMaxRequestsKept = 10000;

struct Request {
  std::string entry, method, path, host;
};

// What the runs used, one flag per declared grant.
struct Usage {
  std::vector<bool> read, write, egress, secrets;
  std::map<std::string, bool> rules;  // http rule key path -> used

  explicit Usage(const manifest::Manifest& m)
      : read(m.capabilities.fs_read.size()),
        write(m.capabilities.fs_write.size()),
        egress(m.capabilities.egress.size()),
        secrets(m.secrets.size()) {
    for (const auto& e : m.capabilities.egress) {
      for (const auto& r : e.http) rules[r.key_path] = false;
    }
  }
};

bool print_out(const std::string& s) {
  return std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0;
}

// Marks the fs entries that would have allowed `path`; returns how many were newly marked.
// A write entry allows reads below it too (as the fs layer does).
size_t mark_fs(const manifest::Manifest& m, Usage& u, const std::string& access, const std::string& path) {
  size_t added = 0;
  auto mark = [&](const std::vector<manifest::FsPath>& list, std::vector<bool>& used) {
    bool any = false;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!manifest::path_covers(list[i].path, path)) continue;
      any = true;
      if (!used[i]) {
        used[i] = true;
        ++added;
      }
    }
    return any;
  };
  if (access == "read" && mark(m.capabilities.fs_read, u.read)) return added;
  (void)mark(m.capabilities.fs_write, u.write);
  return added;
}

// What the Comet reads whatever the manifest says: the entrypoint, and the inputs of runs
// that have some (as `pack test` counts them).
void mark_always_read(const manifest::Manifest& m, const std::vector<PackRunSpec>& runs, Usage& u) {
  const bool inputs = std::any_of(runs.begin(), runs.end(), [](const PackRunSpec& r) { return !r.inputs.empty(); });
  for (size_t i = 0; i < m.capabilities.fs_read.size(); ++i) {
    const std::string& p = m.capabilities.fs_read[i].path;
    if (manifest::path_covers(p, "/workdir/" + m.agent.entrypoint)) u.read[i] = true;
    if (inputs && (manifest::path_covers(p, "/workdir/inputs") || manifest::path_covers("/workdir/inputs", p))) {
      u.read[i] = true;
    }
  }
}

void mark_network(const manifest::Manifest& m, const supervisor::RunReport& report,
                  const std::vector<Request>& requests, Usage& u) {
  const auto& egress = m.capabilities.egress;
  for (size_t i = 0; i < egress.size(); ++i) {
    const std::string key = egress[i].protocol == manifest::Protocol::moon_proxy ? "moon-proxy" : egress[i].key_path;
    if (std::find(report.egress_used.begin(), report.egress_used.end(), key) != report.egress_used.end()) {
      u.egress[i] = true;
    }
  }
  for (const auto& r : requests) {
    for (const auto& e : egress) {
      if (e.key_path != r.entry || e.http.empty()) continue;
      auto match = policy::match_http_rules(r.method, r.path, e.http, e.key_path);
      if (match.allowed) u.rules[match.rule] = true;
    }
    for (size_t s = 0; s < m.secrets.size(); ++s) {
      const auto& hosts = m.secrets[s].hosts;
      if (std::find(hosts.begin(), hosts.end(), r.host) != hosts.end()) u.secrets[s] = true;
    }
  }
}

std::string egress_text(const manifest::EgressEntry& e) {
  return "{host: " + e.host + ", port: " + std::to_string(e.port) + ", protocol: " + manifest::to_string(e.protocol) +
         "}";
}

}  // namespace

int report_unused(const UnusedRequest& req) {
  const manifest::Manifest& m = *req.manifest;
  Usage used(m);
  mark_always_read(m, req.runs, used);
  Json rounds = Json::array();
  std::vector<std::string> notes;
  for (int round = 1; round <= req.max_rounds; ++round) {
    size_t added = 0;
    Json round_json = {{"round", round}, {"runs", Json::array()}};
    for (const auto& spec : req.runs) {
      std::vector<Request> requests;
      std::mutex mu;
      const Usage in_force = used;  // this round's manifest: the fs entries used so far
      auto run = run_in_comet(req.ctx, spec, [&](supervisor::RunRequest& r) {
        r.learn = true;
        r.learn_record = {{"round", round}, {"example", spec.name}, {"unused", true}};
        r.amend_manifest = [&in_force](manifest::Manifest& mm) {
          auto keep = [](std::vector<manifest::FsPath>& list, const std::vector<bool>& flags) {
            std::vector<manifest::FsPath> kept;
            for (size_t i = 0; i < list.size() && i < flags.size(); ++i) {
              if (flags[i]) kept.push_back(list[i]);
            }
            list = std::move(kept);
          };
          keep(mm.capabilities.fs_read, in_force.read);
          keep(mm.capabilities.fs_write, in_force.write);
        };
        auto moon = r.hooks.on_event;
        r.hooks.on_event = [moon, &requests, &mu](const scope::RunContext& c, const scope::Event& ev) {
          if (moon) moon(c, ev);
          if (ev.type != "http_request" || ev.data == nullptr || !ev.data->is_object()) return;
          const auto& d = *ev.data;
          std::lock_guard lock(mu);
          if (requests.size() >= kMaxRequestsKept) return;
          requests.push_back({d.value("manifest_entry", ""), d.value("method", ""), d.value("path", ""),
                              d.value("host", "")});
        };
      });
      if (run.never_ran) {
        std::fprintf(stderr, "soyaos pack learn: round %d, %s: the Comet could not start: %s\n", round,
                     escape_for_terminal(spec.name).c_str(), escape_for_terminal(run.error).c_str());
        return supervisor::kExitSetup;
      }
      const auto& report = run.report;
      for (const auto& v : report.violations) {
        if (v.surface == "fs") added += mark_fs(m, used, v.access, v.resource);
      }
      for (const auto& agg : report.violation_aggregates) {
        if (agg.first.surface == "fs") added += mark_fs(m, used, agg.first.access, agg.first.resource);
      }
      for (const auto& out : run.outputs) added += mark_fs(m, used, "write", out);
      mark_network(m, report, requests, used);
      if (report.outcome.ending == supervisor::Ending::timed_out) {
        notes.push_back("round " + std::to_string(round) + ", " + spec.name +
                        ": timed out (resources.timeout): grants it would have used later are not known");
      }
      round_json["runs"].push_back({{"name", valid_utf8(spec.name)},
                                    {"run_id", report.run_id},
                                    {"exit_code", report.exit_code}});
      const int sig = report.outcome.stop_signal != 0 ? report.outcome.stop_signal
                                                       : supervisor::take_pending_stop_signal();
      if (sig != 0) {
        std::fprintf(stderr, "soyaos pack learn: interrupted (signal %d) in round %d; nothing reported\n", sig, round);
        return 128 + sig;
      }
    }
    round_json["new"] = added;
    rounds.push_back(round_json);
    if (!req.json) {
      std::fprintf(stderr, "round %d: %zu run%s, %zu more fs entr%s used\n", round, req.runs.size(),
                   req.runs.size() == 1 ? "" : "s", added, added == 1 ? "y" : "ies");
    }
    if (added == 0) break;
  }

  // What no run used. Private scratch (/tmp) is the Comet's own tmpfs: never listed (SP113).
  const auto& caps = m.capabilities;
  Json reads = Json::array(), writes = Json::array(), egress = Json::array(), http = Json::array(),
       secrets = Json::array();
  std::vector<std::string> lines;
  for (size_t i = 0; i < caps.fs_read.size(); ++i) {
    if (used.read[i]) continue;
    reads.push_back({{"key_path", caps.fs_read[i].key_path}, {"path", valid_utf8(caps.fs_read[i].path)}});
    lines.push_back(caps.fs_read[i].key_path + ": " + caps.fs_read[i].path);
  }
  for (size_t i = 0; i < caps.fs_write.size(); ++i) {
    if (used.write[i] || manifest::is_private_scratch(caps.fs_write[i].path)) continue;
    writes.push_back({{"key_path", caps.fs_write[i].key_path}, {"path", valid_utf8(caps.fs_write[i].path)}});
    lines.push_back(caps.fs_write[i].key_path + ": " + caps.fs_write[i].path);
  }
  for (size_t i = 0; i < caps.egress.size(); ++i) {
    const auto& e = caps.egress[i];
    if (!used.egress[i]) {
      egress.push_back({{"key_path", e.key_path},
                        {"host", e.host},
                        {"port", e.port},
                        {"protocol", manifest::to_string(e.protocol)}});
      lines.push_back(e.key_path + ": " + egress_text(e));
      continue;  // its rules go with it
    }
    for (const auto& r : e.http) {
      if (used.rules[r.key_path]) continue;
      http.push_back({{"key_path", r.key_path}, {"method", r.method}, {"path", valid_utf8(r.path)}});
      lines.push_back(r.key_path + ": {method: " + r.method + ", path: " + r.path + "}");
    }
  }
  for (size_t s = 0; s < m.secrets.size(); ++s) {
    if (used.secrets[s]) continue;
    std::string hosts;
    for (const auto& h : m.secrets[s].hosts) hosts += (hosts.empty() ? "" : ", ") + h;
    secrets.push_back({{"key_path", m.secrets[s].key_path}, {"name", m.secrets[s].name}, {"hosts", m.secrets[s].hosts}});
    lines.push_back(m.secrets[s].key_path + ": no request went to its hosts (" + hosts + ")");
  }
  const bool any = !lines.empty();
  if (req.json) {
    Json doc = {{"pack", m.name},
                {"version", m.version},
                {"rounds", rounds},
                {"unused",
                 {{"fs", {{"read", reads}, {"write", writes}}},
                  {"egress", egress},
                  {"http", http},
                  {"secrets", secrets}}},
                {"run_notes", notes}};
    if (!print_out(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n")) return 1;
  } else {
    const std::string runs = std::to_string(req.runs.size()) + (req.runs.size() == 1 ? " run" : " runs");
    std::string out = any ? "declared but used by no run (" + runs + "):\n"
                          : "every declared grant was used (" + runs + ")\n";
    for (const auto& l : lines) out += "  " + escape_for_terminal(l) + "\n";
    if (!print_out(out)) return 1;
    for (const auto& n : notes) std::fprintf(stderr, "%s\n", escape_for_terminal(n).c_str());
  }
  return any ? 1 : 0;
}

}  // namespace soyaos::cli
