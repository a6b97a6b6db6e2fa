#include "moon/audit.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "moon/backend.h"
#include "moon/cache.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The run's run_finished event (the last one); nullopt when the record has none.
Result<std::optional<StoredEvent>> run_finished(Store& store, const std::string& run_id) {
  EventQuery q;
  q.run_id = run_id;
  q.type = "run_finished";
  auto events = store.query_events(q);
  if (!events) return events.error();
  if (events->empty()) return std::optional<StoredEvent>();
  return std::optional<StoredEvent>(std::move(events->back()));
}

// An event's data object ({} when it has none).
json data_of(const StoredEvent& e) {
  json j = json::parse(e.json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_object()) return json::object();
  return j["data"];
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// What differs between a cache entry and the run_finished of the run it credits.
std::vector<std::string> mismatches(const CacheEntryAudit& e, const json& d) {
  std::vector<std::string> out;
  auto differ = [&](const std::string& what, const std::string& entry, const std::string& run) {
    if (entry != run) out.push_back(what + " " + entry + " vs the run's " + (run.empty() ? "(none)" : run));
  };
  differ("pack", e.pack + "@" + e.version, str(d, "pack") + "@" + str(d, "version"));
  differ("pack digest", e.pack_digest, str(d, "digest"));
  if (!d.contains("exit_code") || !d["exit_code"].is_number_integer() || d["exit_code"].get<int64_t>() != e.exit_code)
    out.push_back("exit code " + std::to_string(e.exit_code) + " vs the run's " +
                  (d.contains("exit_code") ? d["exit_code"].dump() : "(none)"));
  if (d.contains("cache_key")) differ("key", e.key, str(d, "cache_key"));
  const json outputs = d.contains("outputs") && d["outputs"].is_object() ? d["outputs"] : json::object();
  const auto stream_digest = [&](const char* stream) -> std::optional<std::string> {
    if (!outputs.contains(stream) || !outputs[stream].is_object()) return std::nullopt;
    const json& o = outputs[stream];
    if (!o.contains("digest") || !o["digest"].is_string()) return std::nullopt;
    return o["digest"].get<std::string>();
  };
  const auto out_digest = stream_digest("stdout");
  const auto err_digest = stream_digest("stderr");
  if (!out_digest || !err_digest) {
    out.emplace_back("the run's run_finished records no output digests, so nothing proves the entry is its result");
  } else {
    differ("stdout", e.stdout_digest, *out_digest);
    differ("stderr", e.stderr_digest, *err_digest);
  }
  const auto files = outputs.value("files", uint64_t{0});
  const auto bytes = outputs.value("bytes", uint64_t{0});
  if (files != e.out_files || bytes != e.out_bytes)
    out.push_back("/workdir/out " + std::to_string(e.out_files) + " files, " + std::to_string(e.out_bytes) +
                  " bytes vs the run's " + std::to_string(files) + " files, " + std::to_string(bytes) + " bytes");
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace

std::string cache_entry_problem(const CacheEntryAudit& e, const std::optional<StoredEvent>& fin) {
  if (e.manifest_run_id != e.run_id) {
    return "the index credits run " + e.run_id + ", its manifest run " + e.manifest_run_id + " (edited)";
  }
  if (!fin) return "forged: run " + e.run_id + " has no run_finished in the record";
  auto diff = mismatches(e, data_of(*fin));
  if (diff.empty()) return "";
  return "forged: not the result run_finished (seq " + std::to_string(fin->seq) + ") records: " + join(diff);
}

Result<std::string> verify_cache_entry(MoonBackend& moon, const CacheEntryAudit& e) {
  EventQuery q;
  q.run_id = e.manifest_run_id;
  q.type = "run_finished";
  auto events = moon.query_events(q);
  if (!events) return events.error();
  std::optional<StoredEvent> fin;
  if (!events->empty()) fin = std::move(events->back());
  return cache_entry_problem(e, fin);
}

Result<AuditReport> audit_record(Store& store, const fs::path& home, const AuditOptions& options) {
  AuditReport report;
  auto chain = store.verify_chain({options.run_id, options.key});
  if (!chain) return chain.error();
  report.chain = std::move(chain.value());
  for (const auto& p : report.chain.problems) report.problems.push_back("scope: " + p);

  // ---- every cache entry is the result of the run it credits ----
  auto entries = audit_cache(home);
  if (!entries) {
    report.problems.push_back("cache: " + entries.error().describe());
  } else {
    for (const auto& e : *entries) {
      if (options.run_id && e.run_id != *options.run_id && e.manifest_run_id != *options.run_id) continue;
      ++report.cache_entries;
      const std::string name =
          "cache: entry " + e.key.substr(0, 12) + " (" + e.pack + "@" + e.version + ", run " + e.run_id + ")";
      if (!e.problem.empty()) {
        report.problems.push_back(name + ": " + e.problem);
        continue;
      }
      std::optional<StoredEvent> fin;
      if (e.manifest_run_id == e.run_id) {
        auto found = run_finished(store, e.run_id);
        if (!found) return found.error();
        fin = std::move(found.value());
      }
      if (auto problem = cache_entry_problem(e, fin); !problem.empty()) report.problems.push_back(name + ": " + problem);
    }
  }

  // ---- every cache_hit replayed what its original run recorded ----
  EventQuery hits;
  hits.type = "cache_hit";
  if (options.run_id) hits.run_id = options.run_id;
  auto events = store.query_events(hits);
  if (!events) return events.error();
  for (const auto& ev : *events) {
    const json j = json::parse(ev.json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_object()) continue;
    const json& d = j["data"];
    const std::string key = str(d, "key"), original = str(d, "original_run_id");
    const std::string name = "scope: seq " + std::to_string(ev.seq) + " (cache_hit, run " + ev.run_id + "): replayed entry " +
                             key.substr(0, 12) + " credited to run " + original;
    auto fin = run_finished(store, original);
    if (!fin) return fin.error();
    if (!*fin) {
      report.problems.push_back(name + ", which has no run_finished in the record: a forged entry was replayed");
    } else if (const json fd = data_of(**fin); fd.contains("cache_key") && str(fd, "cache_key") != key) {
      report.problems.push_back(name + ", whose run_finished (seq " + std::to_string((*fin)->seq) + ") records key " +
                                str(fd, "cache_key").substr(0, 12) + ": a forged entry was replayed");
    }
  }
  return report;
}

}  // namespace soyaos::moon
