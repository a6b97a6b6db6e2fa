// Trust and consent (consent.h).
#include "moon/consent.h"

#include <unistd.h>

#include <ctime>
#include <optional>
#include <set>
#include <utility>

#include "common/text.h"
#include "manifest/diagnostic_text.h"
#include "manifest/manifest.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using json = nlohmann::ordered_json;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

Result<manifest::Manifest> parse_pack_manifest(const std::string& text, const std::string& what) {
  auto parsed = manifest::parse_manifest(text, "soyapack.yaml");
  if (!parsed.manifest) {
    std::string first = parsed.errors.empty() ? "invalid" : manifest::raw_text(parsed.errors.front());
    return make_error("the manifest of " + what + " does not parse: " + first);
  }
  return std::move(*parsed.manifest);
}

}  // namespace

std::string signature_trusted_comment(const std::string& reference, const std::string& manifest_digest) {
  // Tabs and newlines would break the comment's fields or its line: a reference has none
  // (parsers refuse them), but the comment must stay one line whatever it is given.
  std::string ref;
  for (char c : reference) ref += (c == '\t' || c == '\n' || c == '\r') ? ' ' : c;
  return "timestamp:" + std::to_string(std::time(nullptr)) + "\tfile:" + ref + "\tdigest:" + manifest_digest;
}

std::string trusted_comment_digest(std::string_view comment) {
  while (!comment.empty()) {
    const size_t tab = comment.find('\t');
    std::string_view field = comment.substr(0, tab);
    if (field.substr(0, 7) == "digest:") return std::string(field.substr(7));
    if (tab == std::string_view::npos) break;
    comment.remove_prefix(tab + 1);
  }
  return "";
}

TrustVerdict check_trust(const MoonConfig& config, const std::string& repository, const std::string& manifest_digest,
                         std::string_view manifest_bytes, const std::vector<std::string>& signatures) {
  TrustVerdict v;
  const auto rules = config.trust_for(repository);
  for (const auto* r : rules) v.scopes.push_back(r->scope);
  v.required = !rules.empty();
  // Parse once; remember which verified for which key.
  std::vector<minisign::Signature> parsed;
  std::vector<const std::string*> texts;
  std::string malformed;
  for (const auto& text : signatures) {
    auto sig = minisign::parse_signature(text);
    if (!sig) {
      if (malformed.empty()) malformed = sig.error().message;
      continue;
    }
    parsed.push_back(std::move(*sig));
    texts.push_back(&text);
  }
  std::set<const std::string*> kept;
  std::string last_failure;
  for (const auto* rule : rules) {
    bool satisfied = false;
    for (size_t i = 0; i < parsed.size(); ++i) {
      const auto& sig = parsed[i];
      for (const auto& key : rule->keys) {
        if (key.key_id != sig.key_id) continue;
        if (auto s = minisign::verify(key, sig, manifest_bytes); !s) {
          last_failure = s.error().message;
          continue;
        }
        // The signature covers these bytes; its trusted comment must name the same digest
        // (a signature made for another digest of identical bytes cannot exist, but the
        // comment is what a person reads: it must not lie).
        if (trusted_comment_digest(sig.trusted_comment) != manifest_digest) {
          last_failure = "the signature's trusted comment names digest \"" +
                         valid_utf8(trusted_comment_digest(sig.trusted_comment)) + "\", not " + manifest_digest;
          continue;
        }
        satisfied = true;
        v.key_ids.push_back(minisign::key_id_hex(key.key_id));
        kept.insert(texts[i]);
      }
    }
    if (!satisfied && v.ok) {
      v.ok = false;
      std::string keys;
      for (const auto& k : rule->keys) keys += (keys.empty() ? "" : ", ") + minisign::key_id_hex(k.key_id);
      if (signatures.empty()) {
        v.problem = "no signature: " + repository + " is in trusted scope \"" + rule->scope +
                    "\", which requires a signature by key " + keys;
      } else {
        std::string why = !last_failure.empty() ? last_failure
                          : !malformed.empty() ? "malformed signature: " + malformed
                                               : "signed only by other keys";
        v.problem = "no valid signature by a trusted key (" + keys + ") for scope \"" + rule->scope + "\": " + why;
      }
    }
  }
  for (const auto* t : kept) v.verified.push_back(*t);
  return v;
}

const char* to_string(ConsentState s) {
  switch (s) {
    case ConsentState::approved: return "approved";
    case ConsentState::first_version: return "first_version";
    case ConsentState::wider: return "wider";
    case ConsentState::not_wider: return "not_wider";
  }
  return "wider";
}

namespace {

// Where `digest` stands given its approvals (`mine`) and the repository's newest (`last`).
Result<ConsentVerdict> judge_consent(const std::vector<ApprovalRecord>& mine, std::optional<ApprovalRecord> last,
                                     const std::string& repository, const std::string& digest,
                                     const std::string& manifest_text) {
  ConsentVerdict v;
  v.last = std::move(last);
  for (const auto& a : mine) {
    if (a.repository == repository) {
      v.state = ConsentState::approved;
      return v;
    }
  }
  if (!v.last) {
    v.state = ConsentState::first_version;
    return v;
  }
  auto from = parse_pack_manifest(v.last->manifest, v.last->reference);
  if (!from) return from.error();
  auto to = parse_pack_manifest(manifest_text, repository + "@" + digest);
  if (!to) return to.error();
  v.diff = policy::diff_capabilities(*from, *to);
  v.state = v.diff.wider() ? ConsentState::wider : ConsentState::not_wider;
  return v;
}

// Store or MoonBackend: both answer approvals_of and last_approval.
template <typename Records>
Result<ConsentVerdict> consent_of(Records& records, const std::string& repository, const std::string& digest,
                                  const std::string& manifest_text) {
  auto mine = records.approvals_of(digest);
  if (!mine) return mine.error();
  auto last = records.last_approval(repository);
  if (!last) return last.error();
  return judge_consent(*mine, std::move(*last), repository, digest, manifest_text);
}

}  // namespace

Result<ConsentVerdict> check_consent(Store& store, const std::string& repository, const std::string& digest,
                                     const std::string& manifest_text) {
  return consent_of(store, repository, digest, manifest_text);
}

Result<ConsentVerdict> check_consent(MoonBackend& moon, const std::string& repository, const std::string& digest,
                                     const std::string& manifest_text) {
  return consent_of(moon, repository, digest, manifest_text);
}

json diff_json(const policy::CapabilityDiff& diff) {
  json changes = json::array();
  for (const auto& c : diff.changes) {
    json j = {{"area", c.area}, {"change", policy::to_string(c.kind)}};
    if (c.kind == policy::ChangeKind::changed) {
      j["from"] = valid_utf8(c.from);
      j["to"] = valid_utf8(c.to);
    } else {
      j["item"] = valid_utf8(c.item);
    }
    if (!c.entry.empty()) j["entry"] = valid_utf8(c.entry);
    j["wider"] = c.wider;
    changes.push_back(std::move(j));
  }
  return {{"wider", diff.wider()}, {"changes", std::move(changes)}};
}

json pack_event(const std::string& type, const std::string& pack, const std::string& version,
                const std::string& digest, json data) {
  scope::RunContext ctx{host_name(), "", pack, version, digest};
  json event = scope::make_event(ctx, type, std::move(data));
  event["source"] = "soyaos://" + ctx.host + "/moon";
  event["data"]["run_id"] = nullptr;
  if (digest.empty()) event["data"]["digest"] = nullptr;
  return event;
}

namespace {

// The approval and its `pack_approved` event (reference, repository, digest, actor, what
// the verdict was and the changes approved).
std::pair<ApprovalRecord, json> approval_and_event(const std::string& repository, const std::string& digest,
                                                   const std::string& reference, const std::string& manifest_text,
                                                   const Actor& actor, const ConsentVerdict& verdict) {
  ApprovalRecord a;
  a.repository = repository;
  a.digest = digest;
  a.reference = reference;
  a.manifest = manifest_text;
  a.by = actor;
  std::string name, version;
  if (auto m = manifest::parse_manifest(manifest_text, "soyapack.yaml"); m.manifest) {
    name = m.manifest->name;
    version = m.manifest->version;
  }
  json data = {{"reference", valid_utf8(reference)},
               {"repository", valid_utf8(repository)},
               {"manifest_digest", digest},
               {"consent", to_string(verdict.state)},
               {"previous", verdict.last ? json(verdict.last->digest) : json(nullptr)},
               {"diff", diff_json(verdict.diff)},
               {"actor", actor_to_json(actor)}};
  return {std::move(a), pack_event("pack_approved", name, version, "", std::move(data))};
}

}  // namespace

Status record_approval(Store& store, const std::string& repository, const std::string& digest,
                       const std::string& reference, const std::string& manifest_text, const Actor& actor,
                       const ConsentVerdict& verdict) {
  auto [a, event] = approval_and_event(repository, digest, reference, manifest_text, actor, verdict);
  return store.add_approval(a, event);
}

Status record_approval(MoonBackend& moon, const std::string& repository, const std::string& digest,
                       const std::string& reference, const std::string& manifest_text, const Actor& actor,
                       const ConsentVerdict& verdict) {
  auto [a, event] = approval_and_event(repository, digest, reference, manifest_text, actor, verdict);
  return moon.add_approval(a, event);
}

}  // namespace soyaos::moon
