// Flags that travel between hosts (remote_flags.h; SPEC.md C12, C8 (4)): the registry I/O.
// The referrer's blob (application/vnd.soyaos.flag.v1+json) is a small JSON object built by
// the Moon (moon/flag_travel.cc):
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

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include "common/text.h"
#include "moon/flag_travel.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr size_t kMaxWarnings = 3;         // per read: the rest are counted
constexpr int64_t kPublishBatch = 64;      // queued flags tried per command

std::string str(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

// The flag body read from a registry, checked against the pack (the Moon checks the rest:
// moon::check_received_flag): nullopt (with `why`) when it is not one of ours for this pack.
std::optional<moon::ReceivedFlag> check_body(const std::string& bytes, const oci::RemotePack& pack,
                                             const std::string& referrer, std::string& why) {
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
  moon::ReceivedFlag f;
  f.name = pack.name;
  f.version = pack.version;
  f.tree_digest = pack.tree_digest;
  f.registry = pack.ref.registry;
  f.repository = pack.ref.repository;
  f.manifest_digest = pack.manifest_digest;
  f.referrer = referrer;
  f.run_id = str(b, "run_id");
  f.flagged_at = str(b, "flagged_at");
  const json reason = b.contains("reason") ? b["reason"] : json();
  f.surface = str(reason, "surface");
  f.resource = str(reason, "resource");
  f.moon = str(b, "moon");
  why = moon::check_received_flag(f);
  if (!why.empty()) return std::nullopt;
  return f;
}

}  // namespace

Status record_remote_origin(moon::MoonBackend& moon, const oci::RemotePack& pack) {
  moon::RemoteOrigin o;
  o.tree_digest = pack.tree_digest;
  o.registry = pack.ref.registry;
  o.repository = pack.ref.repository;
  o.manifest_digest = pack.manifest_digest;
  o.manifest_size = static_cast<int64_t>(pack.manifest_bytes.size());
  o.name = pack.name;
  o.version = pack.version;
  return moon.add_remote_origin(o);
}

std::vector<std::string> read_remote_flags(moon::MoonBackend& moon, oci::Client& client, const oci::RemotePack& pack) {
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
    auto f = check_body(*blob, pack, desc.digest, why);
    if (!f) {
      ignore(desc.digest, why);
      continue;
    }
    auto added = moon.add_received_flag(*f, std::nullopt);
    if (!added) {
      warnings.push_back("warning: a flag of " + where + " could not be recorded: " + added.error().describe());
    } else if (*added) {
      warnings.push_back("warning: " + pack.name + "@" + pack.version + " is flagged on " + where + " by " +
                         (f->moon.empty() ? std::string("a Moon with no key") : "moon " + f->moon) + " (referrer " +
                         desc.digest + "): " + f->surface + " " + f->resource);
    }
  }
  if (ignored > kMaxWarnings) {
    warnings.push_back("warning: " + std::to_string(ignored - kMaxWarnings) + " more flag referrers in " + where +
                       " ignored (at most " + std::to_string(kMaxFlagReferrers) + " are read)");
  }
  return warnings;
}

std::vector<std::string> queue_run_flags(moon::MoonBackend& moon, const moon::MoonBackend::TreeDigestFn& tree_digest,
                                         const std::string& run_id, const std::string& surface,
                                         const std::string& resource, std::vector<std::string>& registries) {
  auto q = moon.queue_run_flag(run_id, tree_digest, surface, resource);
  if (!q) return {"warning: the flag could not be queued for its registry: " + q.error().describe()};
  for (const auto& r : q->registries) {
    if (std::find(registries.begin(), registries.end(), r) == registries.end()) registries.push_back(r);
  }
  return q->notes;
}

std::vector<std::string> publish_queued_flags(const fs::path& home, const PublishOptions& o) {
  // A Moon to ask: a daemon (named, or answering on the home's socket), else an embedded
  // moon.db that exists. Nothing is created: no Moon, nothing queued.
  std::error_code ec;
  const char* env = std::getenv(moon::kSocketEnv);
  const bool daemon = (env != nullptr && *env != '\0') || fs::exists(moon::default_socket(home), ec);
  if (!daemon && !fs::exists(home / "moon.db", ec)) return {};
  auto m = moon::open_moon(home);
  if (!m) return {"warning: queued flags: " + m.error().describe()};
  return publish_queued_flags(**m, home, o);
}

std::vector<std::string> publish_queued_flags(moon::MoonBackend& moon, const fs::path& home, const PublishOptions& o) {
  std::vector<std::string> notes;
  auto rows = moon.queued_flags(o.registry, o.honour_backoff, kPublishBatch, /*run_uid=*/-1);
  if (!rows) return {"warning: queued flags: " + rows.error().describe()};
  std::map<std::string, std::vector<moon::QueuedFlag>> by_registry;
  for (auto& r : *rows) by_registry[r.registry].push_back(std::move(r));
  const std::string claimer = "soyaos pid " + std::to_string(::getpid()) + " uid " + std::to_string(::getuid());
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
      // One publisher per flag: the client's gate, another command and `moon serve` may all
      // have read it as queued; only the one that claims it pushes it.
      auto claimed = moon.claim_queued_flag(f.id, claimer);
      if (!claimed) {
        notes.push_back("warning: queued flags: " + claimed.error().describe());
        break;
      }
      if (!*claimed) continue;  // published meanwhile, or another publisher is at it
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
        notes.push_back("published " + what + " as referrer " + referrer);
        if (auto s = moon.flag_publish_result(f.id, referrer, ""); !s)
          notes.push_back("warning: the Moon did not record it: " + s.error().describe());
        continue;
      }
      notes.push_back("warning: " + what + " stays queued: " + error);
      if (auto s = moon.flag_publish_result(f.id, "", error); !s)
        notes.push_back("warning: the Moon did not record the failure: " + s.error().describe());
      break;  // the registry is unreachable or refuses: the rest wait for the next try
    }
  }
  return notes;
}

std::vector<std::string> remote_flag_lines(moon::MoonBackend& moon, const oci::RemotePack& pack) {
  std::vector<std::string> out;
  auto flags = moon.flags(pack.name, pack.version, pack.tree_digest);
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

json remote_flags_json(moon::MoonBackend& moon, const oci::RemotePack& pack) {
  json out = json::array();
  auto flags = moon.flags(pack.name, pack.version, pack.tree_digest);
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
