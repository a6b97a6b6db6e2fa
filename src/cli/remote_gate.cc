// The gate's checks (remote_gate.h; SPEC.md C12, docs/signing.md): trust first (a pack in
// a `trust:` scope must be signed by a key of every matching scope; signatures come from
// the registry's referrers and from those the Moon kept at an earlier pull, so a run works
// offline), then consent (the first version of a repository, and any version wider than
// the newest approved one, needs the operator's approval). `inspect` never refuses: it
// shows where the pack stands.
#include "cli/remote_gate.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cli/print_error.h"
#include "cli/remote_flags.h"
#include "common/text.h"
#include "manifest/diagnostic_text.h"
#include "moon/backend.h"
#include "moon/config.h"
#include "moon/consent.h"
#include "moon/store.h"
#include "policy/capability_diff.h"

namespace soyaos::cli {
namespace {

using json = nlohmann::ordered_json;

// At most this many signature referrers are fetched per pack: a registry answering with
// thousands must not make a pull slow or large.
constexpr size_t kMaxSignatureReferrers = 32;
constexpr size_t kMaxSignatureBytes = size_t{64} * 1024;

const char* use_name(GateUse u) {
  switch (u) {
    case GateUse::pull: return "pull";
    case GateUse::run: return "run";
    case GateUse::inspect: return "inspect";
  }
  return "run";
}

// The .minisig texts of the signature referrers of the pack's manifest. A referrer that
// is malformed or cannot be read is skipped, not fatal: one bad entry (anyone with push
// rights can add one) must not hide a good signature behind it. What was skipped is
// described in `skipped` (at most three named, the rest counted) for the refusal message.
Result<std::vector<std::string>> fetch_signatures(oci::Client& client, const oci::RemotePack& pack,
                                                  std::string& skipped) {
  oci::Client::Skipped bad;
  auto refs = client.referrers(pack.ref.repository, pack.manifest_digest, kSignatureArtifactType, &bad);
  if (!refs) return refs.error();
  std::vector<std::string> named = bad.named;
  size_t count = bad.count;
  auto skip = [&](const std::string& digest, const std::string& why) {
    if (++count <= oci::Client::Skipped::kMaxNamed) named.push_back(digest + ": " + why);
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < refs->size(); ++i) {
    const auto& desc = (*refs)[i];
    if (i >= kMaxSignatureReferrers) {
      count += refs->size() - i;
      break;
    }
    auto m = client.get_manifest(pack.ref.repository, desc.digest);
    if (!m) {
      skip(desc.digest, m.error().describe());
      continue;
    }
    if (!*m) continue;  // listed but gone: not a signature
    const json doc = json::parse((*m)->bytes, nullptr, false);
    if (!doc.is_object() || !doc.contains("layers") || !doc["layers"].is_array() || doc["layers"].empty()) {
      skip(desc.digest, "not an artifact manifest with a layer");
      continue;
    }
    auto layer = oci::Descriptor::from_json(doc["layers"][0], "signature layer");
    if (!layer || layer->media_type != kSignatureMediaType || layer->size > kMaxSignatureBytes) {
      skip(desc.digest, "its layer is not a signature of at most " + std::to_string(kMaxSignatureBytes) + " bytes");
      continue;
    }
    auto blob = client.get_blob(pack.ref.repository, *layer, kMaxSignatureBytes);
    if (!blob) {
      skip(desc.digest, blob.error().describe());
      continue;
    }
    out.push_back(std::move(*blob));
  }
  if (count > 0) {
    skipped = std::to_string(count) + " signature referrer(s) skipped";
    for (const auto& n : named) skipped += "; " + n;
    if (count > named.size()) skipped += "; and " + std::to_string(count - named.size()) + " more";
  }
  return out;
}

// Asks on the terminal (stdin and stderr both one): true on "y" or "yes".
bool terminal_yes(const std::string& question) {
  if (::isatty(STDIN_FILENO) != 1 || ::isatty(STDERR_FILENO) != 1) return false;
  std::fprintf(stderr, "%s [y/N] ", question.c_str());
  (void)std::fflush(stderr);
  char buf[16] = {};
  if (std::fgets(buf, sizeof buf, stdin) == nullptr) return false;
  const std::string a(buf);
  return a == "y\n" || a == "Y\n" || a == "yes\n" || a == "YES\n" || a == "Yes\n";
}


// What both the gate and `pack approve` need: the configuration, the Moon, the refused
// event, and the trust verdict (signatures from the registry and those the Moon kept).
struct Judge {
  const oci::RemotePack& pack;
  const std::string repository;
  const std::string reference;
  GateUse use;
  std::optional<moon::MoonConfig> config;
  std::unique_ptr<moon::MoonBackend> moon;  // embedded, or the daemon's (SOYAOS_MOON_SOCKET)
  std::string error;

  Judge(const oci::RemotePack& p, GateUse u, const std::filesystem::path& home)
      : pack(p), repository(p.ref.scope()), reference(p.ref.str()), use(u) {
    auto cfg = moon::load_moon_config(home);
    if (!cfg.config) {
      error = "moon configuration invalid: " + (cfg.errors.empty() ? std::string() : manifest::raw_text(cfg.errors.front()));
      return;
    }
    config = std::move(*cfg.config);
    auto m = moon::open_moon(home);
    if (!m) {
      error = m.error().describe();
      return;
    }
    moon = std::move(*m);
  }

  void refused_event(const std::string& reason, const std::string& detail) {
    json data = {{"reference", valid_utf8(reference)},
                 {"repository", valid_utf8(repository)},
                 {"manifest_digest", pack.manifest_digest},
                 {"reason", reason},
                 {"detail", valid_utf8(detail)},
                 {"stage", use_name(use)},
                 {"actor", moon::actor_to_json(moon::current_actor())}};
    const json e = moon::pack_event("pack_refused", pack.name, pack.version, pack.tree_digest, std::move(data));
    (void)moon->record_pack_event(e);
  }

  // The trust verdict; `fetch_error` set when the registry's signatures could not be read.
  moon::TrustVerdict trust(oci::Client* client, std::string& fetch_error) {
    std::vector<std::string> texts;
    if (client != nullptr && !config->trust_for(repository).empty()) {
      std::string skipped;
      auto fetched = fetch_signatures(*client, pack, skipped);
      if (fetched) {
        texts = std::move(*fetched);
        fetch_error = skipped;  // shown only when no signature verified
      } else {
        fetch_error = fetched.error().describe();
      }
    }
    if (auto kept = moon->signatures(pack.manifest_digest); kept) {
      for (const auto& s : *kept) texts.push_back(s.signature);
    }
    auto v = moon::check_trust(*config, repository, pack.manifest_digest, pack.manifest_bytes, texts);
    if (!v.ok && !fetch_error.empty()) v.problem += " (the registry's signatures could not be read: " + fetch_error + ")";
    if (v.required && v.ok) {
      // Kept, so that a later run verifies offline (against the stored manifest).
      for (const auto& text : v.verified) {
        moon::SignatureRecord rec;
        rec.manifest_digest = pack.manifest_digest;
        if (auto sig = minisign::parse_signature(text); sig) rec.key_id = minisign::key_id_hex(sig->key_id);
        rec.signature = text;
        rec.reference = reference;
        rec.by = moon::current_actor();
        // Not fatal here (this pull or run verified online), but a later offline run would
        // refuse the pack: say so.
        if (auto kept = moon->add_signature(rec, nullptr); !kept) {
          print_error("", "warning: the verified signature of " + reference +
                              " was not kept, so an offline run will refuse it: " + kept.error().describe());
        }
      }
    }
    return v;
  }

  [[nodiscard]] std::string manifest_text() const {
    return pack.config_json.contains("manifest") ? pack.config_json["manifest"].dump() : "";
  }

  // The capabilities the operator approves: the diff against the newest approval, or for
  // a first version all of them (the diff against a pack that may do nothing).
  [[nodiscard]] policy::CapabilityDiff shown(const moon::ConsentVerdict& c) const {
    if (c.state != moon::ConsentState::first_version && c.last) return c.diff;
    auto parsed = manifest::parse_manifest(manifest_text(), "soyapack.yaml");
    if (!parsed.manifest) return c.diff;
    return policy::diff_capabilities(manifest::Manifest{}, *parsed.manifest);
  }
};

std::string consent_text(const moon::ConsentVerdict& c, const std::string& repository) {
  switch (c.state) {
    case moon::ConsentState::approved: return "approved";
    case moon::ConsentState::first_version: return "needs approval (first version of " + repository + ")";
    case moon::ConsentState::wider: return "needs approval (wider than the approved " + c.last->reference + ")";
    case moon::ConsentState::not_wider: return "runs (no wider than the approved " + c.last->reference + ")";
  }
  return "needs approval";
}

std::string keys_of(const moon::TrustVerdict& v) {
  std::string keys;
  for (const auto& k : v.key_ids) keys += (keys.empty() ? "" : ", ") + k;
  return keys;
}

}  // namespace

GateDecision remote_pack_gate(const GateRequest& req) {
  GateDecision d;
  const int refuse = req.use == GateUse::run ? 125 : 1;
  auto fail = [&](const std::string& why) {
    d.exit_code = refuse;
    d.message = why;
    return d;
  };
  Judge j(req.pack, req.use, req.home);
  if (!j.error.empty()) return fail(j.error);

  // ---- flags (remote_flags.h): only ever warnings, never a refusal ----
  // Only once the pack has passed the trust and consent checks (or, for inspect, its
  // signature verified where a trust scope asks for one): a registry whose pack is refused
  // is neither sent this host's queued flags nor recorded as an origin that later
  // violations are published to, and its flags are not recorded here.
  // Through a Moon daemon too: the registry I/O is this process's, the records the daemon's
  // (moon/server_flags.h), which checks them and names who sent them.
  auto apply_flags = [&] {
    moon::MoonBackend& m = *j.moon;
    if (req.client != nullptr) {
      // This command talks to the registry anyway: the flags queued for it go now.
      PublishOptions publish;
      publish.registry = req.pack.ref.registry;
      publish.client = req.client;
      for (auto& n : publish_queued_flags(m, req.home, publish)) d.notes.push_back(std::move(n));
      for (auto& n : read_remote_flags(m, *req.client, req.pack)) d.notes.push_back(std::move(n));
    }
    if (req.use == GateUse::inspect) {
      for (auto& l : remote_flag_lines(m, req.pack)) d.lines.push_back(std::move(l));
      d.flags = remote_flags_json(m, req.pack);
    } else if (auto s = record_remote_origin(m, req.pack); !s) {
      d.notes.push_back("warning: " + s.error().describe());
    }
  };

  // ---- trust ----
  std::string fetch_error;
  const auto trust = j.trust(req.client, fetch_error);
  if (req.use == GateUse::inspect) {
    if (!trust.required) {
      d.lines.push_back("signature:    not required (no trust scope matches " + j.repository + ")");
    } else if (trust.ok) {
      d.lines.push_back("signature:    verified (key " + keys_of(trust) + ")");
    } else {
      d.lines.push_back("signature:    INVALID: " + trust.problem);
    }
  } else if (!trust.ok) {
    j.refused_event("signature", trust.problem);
    return fail("refused: " + j.reference + " (" + req.pack.manifest_digest + "): signature: " + trust.problem);
  } else if (trust.required) {
    d.notes.push_back("signature verified: " + j.reference + " (key " + keys_of(trust) + ")");
  }

  // ---- consent ----
  const std::string manifest_text = j.manifest_text();
  auto c = moon::check_consent(*j.moon, j.repository, req.pack.manifest_digest, manifest_text);
  if (!c) return fail(c.error().describe());
  if (req.use == GateUse::inspect) {
    d.lines.push_back("consent:      " + consent_text(*c, j.repository));
    if (auto a = j.moon->approvals_of(req.pack.manifest_digest); a) {
      for (const auto& r : *a) {
        d.lines.push_back("approved:     " + r.approved_at + " by " +
                          (r.by.user.empty() ? "uid " + std::to_string(r.by.uid) : r.by.user) + " (" + r.repository + ")");
      }
    }
    if (trust.ok) apply_flags();
    return d;
  }
  if (!c->needs_approval()) {
    apply_flags();
    return d;
  }
  const std::string why = c->state == moon::ConsentState::first_version
                              ? "the first version of " + j.repository + " this Moon sees"
                              : "wider than the approved " + c->last->reference;
  bool approve = req.approve;
  if (!approve) {
    // The operator sees the capabilities before being asked, and in the refusal.
    std::fprintf(stderr, "%s (%s) is %s:\n%s", escape_for_terminal(j.reference).c_str(),
                 req.pack.manifest_digest.c_str(), escape_for_terminal(why).c_str(),
                 policy::format_diff_text(j.shown(*c)).c_str());
    approve = terminal_yes("Approve these capabilities?");
  }
  if (!approve) {
    j.refused_event("approval", why);
    return fail("refused: " + j.reference + " is " + why + "; approve it first: soyaos pack approve " + j.reference +
                " (or soyaos pack pull --approve " + j.reference + ")");
  }
  if (auto s = moon::record_approval(*j.moon, j.repository, req.pack.manifest_digest, j.reference, manifest_text,
                                     moon::current_actor(), *c);
      !s)
    return fail(s.error().describe());
  d.notes.push_back("approved: " + j.reference + " (" + why + ")");
  apply_flags();
  return d;
}

Result<ConsentSummary> consent_summary(const oci::RemotePack& pack, const std::filesystem::path& home) {
  auto cfg = moon::load_moon_config(home);
  if (!cfg.config) {
    return make_error("moon configuration invalid: " + (cfg.errors.empty() ? std::string() : manifest::raw_text(cfg.errors.front())));
  }
  auto m = moon::open_moon(home);
  if (!m) return m.error();
  ConsentSummary out;
  std::string problem;
  // Trust first, as the gate of an offline `run REF` checks it: the signatures the Moon
  // kept when a pull verified them (nothing is fetched, nothing recorded).
  const std::string scope = pack.ref.scope();
  if (!cfg.config->trust_for(scope).empty()) {
    std::vector<std::string> texts;
    auto kept = (*m)->signatures(pack.manifest_digest);
    if (!kept) return kept.error();
    for (const auto& k : *kept) texts.push_back(k.signature);
    const auto v = moon::check_trust(*cfg.config, scope, pack.manifest_digest, pack.manifest_bytes, texts);
    out.signature = v.ok ? "verified (key " + keys_of(v) + ")" : "refused: " + v.problem;
    out.trusted = v.ok;
    problem = v.problem;
  }
  const std::string manifest_text = pack.config_json.contains("manifest") ? pack.config_json["manifest"].dump() : "";
  auto c = moon::check_consent(**m, scope, pack.manifest_digest, manifest_text);
  if (!c) return c.error();
  out.approved = c->state == moon::ConsentState::approved;
  out.runs = out.trusted && !c->needs_approval();
  out.state = out.trusted ? consent_text(*c, scope) : "refused (signature: " + problem + ")";
  return out;
}

GateDecision approve_remote_pack(const oci::RemotePack& pack, oci::Client& client, const std::filesystem::path& home) {
  GateDecision d;
  auto fail = [&](const std::string& why) {
    d.exit_code = 1;
    d.message = why;
    return d;
  };
  Judge j(pack, GateUse::pull, home);
  if (!j.error.empty()) return fail(j.error);
  std::string fetch_error;
  const auto trust = j.trust(&client, fetch_error);
  if (!trust.ok) {
    j.refused_event("signature", trust.problem);
    return fail("refused: " + j.reference + " (" + pack.manifest_digest + "): signature: " + trust.problem);
  }
  if (trust.required) d.notes.push_back("signature verified: " + j.reference + " (key " + keys_of(trust) + ")");
  const std::string manifest_text = j.manifest_text();
  auto c = moon::check_consent(*j.moon, j.repository, pack.manifest_digest, manifest_text);
  if (!c) return fail(c.error().describe());
  if (c->state == moon::ConsentState::approved) {
    d.lines.push_back("already approved  " + j.reference + "  " + pack.manifest_digest);
    return d;
  }
  const std::string against = c->last ? "the approved " + c->last->reference : "nothing (first version)";
  d.lines.push_back("--- " + against);
  d.lines.push_back("+++ " + j.reference);
  // Raw, one entry per change: d.lines are escaped where they are printed (pack approve), once,
  // and a newline inside a value (a manifest path may hold one) is shown as \n within its
  // change's line, never as a line of its own.
  for (auto& l : policy::format_diff_lines(j.shown(*c), /*escape=*/false)) d.lines.push_back(std::move(l));
  if (auto s = moon::record_approval(*j.moon, j.repository, pack.manifest_digest, j.reference, manifest_text,
                                     moon::current_actor(), *c);
      !s)
    return fail(s.error().describe());
  d.lines.push_back(std::string("approved  ") + j.reference + "  " + pack.manifest_digest + "  (" +
                    moon::to_string(c->state) + ")");
  return d;
}

}  // namespace soyaos::cli
