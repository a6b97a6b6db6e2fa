// Flags that travel between hosts (remote_flags.h; SPEC.md C12, C8 (4)). The referrer's
// blob (application/vnd.soyaos.flag.v1+json) is a small JSON object:
//   {"digest": image manifest digest, "pack": "NAME@VERSION", "name", "version",
//    "reason": {"surface", "resource": "sha256:" + hex digest of the violation's resource},
//    "run_id", "flagged_at", "moon": the flagging Moon's key id or null}
// and nothing else: no secret, no host name, and no byte the agent chose. The resource (a
// path or a name the agent picked, up to 1 KiB) is published as its digest only: a flag goes
// to the pack's own registry, which its author may control, so its text would be a channel
// out of a Comet with no egress at all. Whether a flag is published at all, and its surface,
// stay visible to the registry (a few bits per run; docs/registry.md).
// A reader trusts none of it: every field is checked, and a flag is only ever a warning.
#include "cli/remote_flags.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string_view>

#include "common/digest.h"
#include "common/text.h"
#include "moon/chain.h"
#include "moon/consent.h"
#include "scope/events.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr size_t kMaxResourceBytes = 1024;
constexpr size_t kMaxWarnings = 3;         // per read: the rest are counted
constexpr int64_t kPublishBatch = 64;      // queued flags tried per command
constexpr int64_t kFirstBackoffS = 30;
constexpr int64_t kMaxBackoffS = 3600;

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool token_ok(const std::string& s, size_t max, std::string_view extra) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           extra.find(c) != std::string_view::npos;
  });
}

std::string str(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

// The flag body read from a registry, checked: nullopt (with `why`) when it is not one of
// ours for this pack.
struct RemoteFlag {
  std::string run_id, flagged_at, surface, resource, moon;
};
std::optional<RemoteFlag> check_body(const std::string& bytes, const oci::RemotePack& pack, std::string& why) {
  const json b = json::parse(bytes, nullptr, false);
  if (!b.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  if (str(b, "digest") != pack.manifest_digest) {
    why = "names another manifest digest";
    return std::nullopt;
  }
  if (str(b, "name") != pack.name || str(b, "version") != pack.version) {
    why = "names another pack than " + pack.name + "@" + pack.version;
    return std::nullopt;
  }
  RemoteFlag f;
  f.run_id = str(b, "run_id");
  f.flagged_at = str(b, "flagged_at");
  const json reason = b.contains("reason") ? b["reason"] : json();
  f.surface = str(reason, "surface");
  f.resource = str(reason, "resource");
  f.moon = str(b, "moon");
  if (!token_ok(f.run_id, 64, "-_")) {
    why = "has no valid run_id";
  } else if (!token_ok(f.flagged_at, 40, ":.+-")) {
    why = "has no valid flagged_at";
  } else if (f.surface != "network" && f.surface != "fs" && f.surface != "exec" && f.surface != "time") {
    why = "has no valid reason.surface";
  } else if (f.resource.empty() || f.resource.size() > kMaxResourceBytes || !is_valid_utf8(f.resource)) {
    why = "has no valid reason.resource";
  } else if (!f.moon.empty() && !token_ok(f.moon, 80, ":")) {
    why = "has an invalid moon key id";
  } else {
    return f;
  }
  return std::nullopt;
}

}  // namespace

Status record_remote_origin(moon::Store& store, const oci::RemotePack& pack) {
  moon::RemoteOrigin o;
  o.tree_digest = pack.tree_digest;
  o.registry = pack.ref.registry;
  o.repository = pack.ref.repository;
  o.manifest_digest = pack.manifest_digest;
  o.manifest_size = static_cast<int64_t>(pack.manifest_bytes.size());
  o.name = pack.name;
  o.version = pack.version;
  return store.add_remote_origin(o);
}

std::vector<std::string> read_remote_flags(moon::Store& store, oci::Client& client, const oci::RemotePack& pack) {
  std::vector<std::string> warnings;
  const std::string where = pack.ref.scope();
  oci::Client::Skipped bad;  // malformed entries of the list: skipped, the others read
  auto refs = client.referrers(pack.ref.repository, pack.manifest_digest, kFlagArtifactType, &bad);
  if (!refs) {
    warnings.push_back("warning: the flags of " + where + "@" + pack.manifest_digest +
                       " could not be read: " + refs.error().describe());
    return warnings;
  }
  for (const auto& why : bad.named) warnings.push_back("warning: a flag referrer entry in " + where + " ignored: " + why);
  size_t ignored = bad.count;  // its first kMaxWarnings are named above
  auto ignore = [&](const std::string& digest, const std::string& why) {
    if (++ignored <= kMaxWarnings) warnings.push_back("warning: flag referrer " + digest + " in " + where + " ignored: " + why);
  };
  for (size_t i = 0; i < refs->size(); ++i) {
    const auto& desc = (*refs)[i];
    if (i >= kMaxFlagReferrers) {
      ++ignored;
      continue;
    }
    auto m = client.get_manifest(pack.ref.repository, desc.digest);
    if (!m) {
      ignore(desc.digest, m.error().describe());
      continue;
    }
    if (!*m) continue;  // listed but gone
    const json doc = json::parse((*m)->bytes, nullptr, false);
    if (!doc.is_object() || !doc.contains("layers") || !doc["layers"].is_array() || doc["layers"].size() != 1) {
      ignore(desc.digest, "not an artifact manifest with one layer");
      continue;
    }
    auto layer = oci::Descriptor::from_json(doc["layers"][0], "flag layer");
    if (!layer) {
      ignore(desc.digest, layer.error().describe());
      continue;
    }
    if (layer->media_type != kFlagMediaType) {
      ignore(desc.digest, "its layer has media type \"" + layer->media_type + "\"");
      continue;
    }
    if (layer->size > kMaxFlagBytes) {
      ignore(desc.digest, "its flag is larger than " + std::to_string(kMaxFlagBytes) + " bytes");
      continue;
    }
    auto blob = client.get_blob(pack.ref.repository, *layer, kMaxFlagBytes);
    if (!blob) {
      ignore(desc.digest, blob.error().describe());
      continue;
    }
    std::string why;
    auto f = check_body(*blob, pack, why);
    if (!f) {
      ignore(desc.digest, why);
      continue;
    }
    moon::FlagRecord rec;
    rec.name = pack.name;
    rec.version = pack.version;
    rec.digest = pack.tree_digest;
    rec.run_id = f->run_id;
    const json reason = {{"surface", f->surface}, {"resource", f->resource}};
    rec.violation = reason.dump();
    rec.flagged_at = f->flagged_at;
    rec.origin = "flagged on " + where + " by " + (f->moon.empty() ? std::string("a Moon with no key") : "moon " + f->moon) +
                 " (referrer " + desc.digest + ")";
    json data = {{"raised", false},
                 {"received", true},
                 {"origin", rec.origin},
                 {"registry", pack.ref.registry},
                 {"repository", pack.ref.repository},
                 {"manifest_digest", pack.manifest_digest},
                 {"referrer", desc.digest},
                 {"flagged_by_run", f->run_id},
                 {"flagged_at", f->flagged_at},
                 {"moon", f->moon.empty() ? json(nullptr) : json(f->moon)},
                 {"violation", reason}};
    auto added = store.add_flag(rec, moon::pack_event("pack_flagged", pack.name, pack.version, pack.tree_digest,
                                                      std::move(data)));
    if (!added) {
      warnings.push_back("warning: a flag of " + where + " could not be recorded: " + added.error().describe());
    } else if (*added) {
      warnings.push_back("warning: " + pack.name + "@" + pack.version + " is " + rec.origin + ": " + f->surface + " " +
                         f->resource);
    }
  }
  if (ignored > kMaxWarnings) {
    warnings.push_back("warning: " + std::to_string(ignored - kMaxWarnings) + " more flag referrers in " + where +
                       " ignored (at most " + std::to_string(kMaxFlagReferrers) + " are read)");
  }
  return warnings;
}

std::vector<std::string> queue_run_flags(const fs::path& home, const std::string& tree_digest, const std::string& run_id,
                                         const std::string& surface, const std::string& resource,
                                         std::vector<std::string>& registries) {
  std::vector<std::string> notes;
  // No store here, no registry pack recorded (the gate that pulls one opens it): opening one
  // would create it, and a client of a Moon daemon must not grow an embedded store.
  std::error_code ec;
  if (!fs::exists(home / "moon.db", ec)) return notes;
  auto store = moon::Store::open(home);
  if (!store) return {"warning: the flag could not be queued for its registry: " + store.error().describe()};
  auto origins = store->remote_origins(tree_digest);
  if (!origins) return {"warning: the flag could not be queued for its registry: " + origins.error().describe()};
  if (origins->empty()) return notes;
  std::string moon_id;
  if (auto key = moon::chain::MoonKey::load_public(home); key && *key) moon_id = (*key)->id();
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
    moon::QueuedFlag q;
    q.registry = o.registry;
    q.repository = o.repository;
    q.manifest_digest = o.manifest_digest;
    q.manifest_size = o.manifest_size;
    q.run_id = run_id;
    q.body = body.dump();
    auto queued = store->queue_flag(q);
    if (std::find(registries.begin(), registries.end(), o.registry) == registries.end()) registries.push_back(o.registry);
    if (!queued) {
      notes.push_back("warning: the flag could not be queued for " + o.registry + ": " + queued.error().describe());
    } else if (*queued == moon::Store::Queued::full) {
      notes.push_back("warning: the flag is not published to " + o.registry + "/" + o.repository + ": " +
                      std::to_string(moon::kMaxQueuedFlags) + " flags already wait for their registries " +
                      "(it stays flagged here)");
    }
  }
  return notes;
}

std::vector<std::string> publish_queued_flags(const fs::path& home, const PublishOptions& o) {
  std::vector<std::string> notes;
  std::error_code ec;
  if (!fs::exists(home / "moon.db", ec)) return notes;  // nothing queued; do not create a Moon
  auto store = moon::Store::open(home);
  if (!store) return {"warning: queued flags: " + store.error().describe()};
  auto rows = store->queued_flags(o.registry, o.honour_backoff ? now_s() : 0, kPublishBatch);
  if (!rows) return {"warning: queued flags: " + rows.error().describe()};
  std::map<std::string, std::vector<moon::QueuedFlag>> by_registry;
  for (auto& r : *rows) by_registry[r.registry].push_back(std::move(r));
  for (auto& [registry, flags] : by_registry) {
    std::optional<oci::Client> own;
    oci::Client* client = o.client != nullptr && o.client->registry() == registry ? o.client : nullptr;
    std::string open_error;
    if (client == nullptr) {
      auto opts = oci::options_for(home, registry);
      if (opts && o.quick) {
        opts->max_attempts = 1;
        opts->transport.connect_timeout_seconds = 1;
        opts->transport.stall_seconds = 2;
      }
      if (!opts) {
        open_error = opts.error().describe();
      } else if (auto c = oci::Client::open(registry, std::move(*opts)); !c) {
        open_error = c.error().describe();
      } else {
        own.emplace(std::move(*c));
        client = &*own;
      }
    }
    for (const auto& f : flags) {
      std::string error = open_error;
      std::string referrer;
      if (client != nullptr) {
        oci::Descriptor subject;
        subject.media_type = oci::kImageManifest;
        subject.digest = f.manifest_digest;
        subject.size = static_cast<uint64_t>(f.manifest_size);
        auto pushed = client->push_referrer(f.repository, subject, kFlagArtifactType, f.body, kFlagMediaType,
                                            json{{"org.soyaos.flag.run_id", f.run_id}});
        if (pushed) {
          referrer = pushed->digest;
        } else {
          error = pushed.error().describe();
        }
      }
      const std::string what = "flag of " + registry + "/" + f.repository + "@" + f.manifest_digest + " (run " + f.run_id + ")";
      if (!referrer.empty()) {
        (void)store->flag_published(f.id, referrer);
        notes.push_back("published " + what + " as referrer " + referrer);
        continue;
      }
      const int64_t backoff = std::min(kMaxBackoffS, kFirstBackoffS << std::min<int64_t>(f.attempts, 7));
      (void)store->flag_publish_failed(f.id, error, now_s() + backoff);
      notes.push_back("warning: " + what + " stays queued: " + error);
      break;  // the registry is unreachable or refuses: the rest wait for the next try
    }
  }
  return notes;
}

std::vector<std::string> remote_flag_lines(moon::Store& store, const oci::RemotePack& pack) {
  std::vector<std::string> out;
  auto flags = store.flags(pack.name, pack.version, pack.tree_digest);
  if (!flags) return {"flags:        unknown (" + flags.error().describe() + ")"};
  bool active = false;
  for (const auto& f : *flags) active = active || f.active;
  out.push_back(std::string("flagged:      ") + (active ? "yes" : "no"));
  for (const auto& f : *flags) {
    const json v = json::parse(f.violation, nullptr, false);
    const json& d = v.is_object() && v.contains("data") && v["data"].is_object() ? v["data"] : v;
    const std::string reason = str(d, "surface") + " " + str(d, "resource");
    out.push_back("  " + f.flagged_at + "  run " + f.run_id + "  [" + (f.active ? "active" : "cleared") + "]  " +
                  (f.origin.empty() ? "flagged here" : f.origin) + ": " + reason);
  }
  return out;
}

json remote_flags_json(moon::Store& store, const oci::RemotePack& pack) {
  json out = json::array();
  auto flags = store.flags(pack.name, pack.version, pack.tree_digest);
  if (!flags) return out;
  for (const auto& f : *flags) {
    json v = json::parse(f.violation, nullptr, false);
    out.push_back({{"run_id", f.run_id},
                   {"flagged_at", f.flagged_at},
                   {"active", f.active},
                   {"origin", f.origin.empty() ? json(nullptr) : json(valid_utf8(f.origin))},
                   {"violation", v.is_discarded() ? json(valid_utf8(f.violation)) : v}});
  }
  return out;
}

}  // namespace soyaos::cli
