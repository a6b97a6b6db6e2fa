// Flags that travel, the Moon's side (flag_travel.h). The referrer body this Moon queues is
// a small JSON object:
//   {"digest": image manifest digest, "pack": "NAME@VERSION", "name", "version",
//    "reason": {"surface", "resource": "sha256:" + hex digest of the violation's resource},
//    "run_id", "flagged_at", "moon": this Moon's key id or null}
// and nothing else (no secret, no host name, no byte the agent chose: docs/registry.md).
#include "moon/flag_travel.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "common/digest.h"
#include "common/text.h"
#include "moon/chain.h"
#include "moon/consent.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr size_t kMaxResourceBytes = 1024;
constexpr size_t kMaxNameBytes = 256;  // registry, repository, pack name and version
constexpr int64_t kFirstBackoffS = 30;
constexpr int64_t kMaxBackoffS = 3600;

bool token_ok(const std::string& s, size_t max, std::string_view extra) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           extra.find(c) != std::string_view::npos;
  });
}

bool digest_ok(const std::string& d) {
  return d.size() == 71 && d.rfind("sha256:", 0) == 0 && d.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

bool name_ok(const std::string& s) {
  return !s.empty() && s.size() <= kMaxNameBytes && is_valid_utf8(s) &&
         std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::string str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The first retry delay: 30 s, or SOYAOS_FLAG_BACKOFF_S (0..3600; tests).
int64_t first_backoff_s() {
  const char* v = std::getenv("SOYAOS_FLAG_BACKOFF_S");
  if (v == nullptr || *v == '\0') return kFirstBackoffS;
  char* end = nullptr;
  const long s = std::strtol(v, &end, 10);
  if (end == nullptr || *end != '\0' || s < 0 || s > kMaxBackoffS) return kFirstBackoffS;
  return s;
}

}  // namespace

std::string check_received_flag(const ReceivedFlag& f) {
  if (!name_ok(f.name) || !name_ok(f.version)) return "names no valid pack";
  if (!digest_ok(f.tree_digest) || !digest_ok(f.manifest_digest) || !digest_ok(f.referrer))
    return "has no valid digests";
  if (!name_ok(f.registry) || !name_ok(f.repository)) return "names no valid registry and repository";
  if (!token_ok(f.run_id, 64, "-_")) return "has no valid run_id";
  if (!token_ok(f.flagged_at, 40, ":.+-")) return "has no valid flagged_at";
  if (f.surface != "network" && f.surface != "fs" && f.surface != "exec" && f.surface != "time")
    return "has no valid reason.surface";
  if (f.resource.empty() || f.resource.size() > kMaxResourceBytes || !is_valid_utf8(f.resource))
    return "has no valid reason.resource";
  if (!f.moon.empty() && !token_ok(f.moon, 80, ":")) return "has an invalid moon key id";
  return "";
}

json to_json(const ReceivedFlag& f) {
  return {{"name", f.name},
          {"version", f.version},
          {"tree_digest", f.tree_digest},
          {"registry", f.registry},
          {"repository", f.repository},
          {"manifest_digest", f.manifest_digest},
          {"referrer", f.referrer},
          {"run_id", f.run_id},
          {"flagged_at", f.flagged_at},
          {"surface", f.surface},
          {"resource", f.resource},
          {"moon", f.moon}};
}

ReceivedFlag received_flag_from_json(const json& j) {
  ReceivedFlag f;
  if (!j.is_object()) return f;
  f.name = str(j, "name");
  f.version = str(j, "version");
  f.tree_digest = str(j, "tree_digest");
  f.registry = str(j, "registry");
  f.repository = str(j, "repository");
  f.manifest_digest = str(j, "manifest_digest");
  f.referrer = str(j, "referrer");
  f.run_id = str(j, "run_id");
  f.flagged_at = str(j, "flagged_at");
  f.surface = str(j, "surface");
  f.resource = str(j, "resource");
  f.moon = str(j, "moon");
  return f;
}

Result<bool> add_received_flag(Store& store, const ReceivedFlag& f, const std::optional<Actor>& reported_by) {
  if (auto why = check_received_flag(f); !why.empty()) return make_error("a received flag " + why, EINVAL);
  const std::string where = f.registry + "/" + f.repository;
  FlagRecord rec;
  rec.name = f.name;
  rec.version = f.version;
  rec.digest = f.tree_digest;
  rec.run_id = f.run_id;
  const json reason = {{"surface", f.surface}, {"resource", f.resource}};
  rec.violation = reason.dump();
  rec.flagged_at = f.flagged_at;
  rec.origin = "flagged on " + where + " by " + (f.moon.empty() ? std::string("a Moon with no key") : "moon " + f.moon) +
               " (referrer " + f.referrer + ")";
  json data = {{"raised", false},
               {"received", true},
               {"origin", rec.origin},
               {"registry", f.registry},
               {"repository", f.repository},
               {"manifest_digest", f.manifest_digest},
               {"referrer", f.referrer},
               {"flagged_by_run", f.run_id},
               {"flagged_at", f.flagged_at},
               {"moon", f.moon.empty() ? json(nullptr) : json(f.moon)},
               {"violation", reason}};
  if (reported_by) data["reported_by"] = actor_to_json(*reported_by);
  // pack_event stamps the event's time with this Moon's clock (the body's flagged_at is the
  // registry's claim, kept as such).
  return store.add_flag(rec, pack_event("pack_flagged", f.name, f.version, f.tree_digest, std::move(data)));
}

std::string check_remote_origin(const RemoteOrigin& o) {
  if (!digest_ok(o.tree_digest) || !digest_ok(o.manifest_digest)) return "has no valid digests";
  if (!name_ok(o.registry) || !name_ok(o.repository)) return "names no valid registry and repository";
  if (!name_ok(o.name) || !name_ok(o.version)) return "names no valid pack";
  if (o.manifest_size <= 0 || o.manifest_size > (int64_t{4} << 20)) return "has no valid manifest size";
  return "";
}

Result<FlagQueueReport> queue_run_flags(Store& store, const fs::path& home, const std::string& tree_digest,
                                        const std::string& run_id, const std::string& surface,
                                        const std::string& resource) {
  FlagQueueReport report;
  auto origins = store.remote_origins(tree_digest);
  if (!origins) return origins.error();
  if (origins->empty()) return report;
  std::string moon_id;
  if (auto key = chain::MoonKey::load_public(home); key && *key) moon_id = (*key)->id();
  const std::string res = "sha256:" + sha256_hex(resource);
  for (const auto& o : *origins) {
    json body = {{"digest", o.manifest_digest},
                 {"pack", o.name + "@" + o.version},
                 {"name", o.name},
                 {"version", o.version},
                 {"reason", {{"surface", surface}, {"resource", res}}},
                 {"run_id", run_id},
                 {"flagged_at", scope::now_rfc3339()},
                 {"moon", moon_id.empty() ? json(nullptr) : json(moon_id)}};
    QueuedFlag q;
    q.registry = o.registry;
    q.repository = o.repository;
    q.manifest_digest = o.manifest_digest;
    q.manifest_size = o.manifest_size;
    q.run_id = run_id;
    q.body = body.dump();
    auto queued = store.queue_flag(q);
    if (std::find(report.registries.begin(), report.registries.end(), o.registry) == report.registries.end())
      report.registries.push_back(o.registry);
    if (!queued) {
      report.notes.push_back("warning: the flag could not be queued for " + o.registry + ": " + queued.error().describe());
    } else if (*queued == Store::Queued::full) {
      report.notes.push_back("warning: the flag is not published to " + o.registry + "/" + o.repository + ": " +
                             std::to_string(kMaxQueuedFlags) + " flags already wait for their registries " +
                             "(it stays flagged here)");
    }
  }
  return report;
}

Result<bool> claim_queued_flag(Store& store, int64_t id, const std::string& by) {
  const int64_t now = now_s();
  return store.claim_flag(id, now, now + kFlagClaimSeconds, by.substr(0, 256));
}

Status record_publish_result(Store& store, int64_t id, const std::string& referrer, const std::string& error) {
  if (!referrer.empty()) {
    if (!digest_ok(referrer)) return make_error("not a referrer digest: " + referrer, EINVAL);
    return store.flag_published(id, referrer);
  }
  auto row = store.queued_flag(id);
  if (!row) return row.error();
  if (!*row) return make_error("no queued flag " + std::to_string(id), ENOENT);
  const int64_t backoff = std::min(kMaxBackoffS, first_backoff_s() << std::min<int64_t>((*row)->attempts, 7));
  return store.flag_publish_failed(id, error.substr(0, 1024), now_s() + backoff);
}

}  // namespace soyaos::moon
