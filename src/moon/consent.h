// Trust and consent for packs that come from registries (SPEC.md C12, docs/registry.md
// "Signatures and trust", "Consent"). Two checks, both run at pull and again at run:
//
//  1. Trust: when a `trust:` scope of moon.yaml matches the pack's repository, the pack's
//     OCI image manifest (the bytes whose sha256 is the pinned digest) must carry a
//     minisign signature by one of that scope's keys whose trusted comment names that
//     digest; every matching scope must be satisfied. Unsigned, signed by another key, or
//     a digest that changed (the signature covers other bytes) is refused.
//  2. Consent: the first version of a repository, and any version whose capabilities are
//     wider than those of the newest approved version (policy/capability_diff.h), is not
//     run until the operator approves it; a version no wider needs nothing.
//
// Library code: verdicts are values; the CLI prints them and chooses the exit code.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/minisign.h"
#include "common/result.h"
#include "moon/backend.h"
#include "moon/config.h"
#include "moon/store.h"
#include "policy/capability_diff.h"

namespace soyaos::moon {

// The trusted comment `soyaos pack sign` writes: "timestamp:T\tfile:REF\tdigest:sha256:HEX"
// (minisign's own layout plus the digest, so `minisign -V` shows what was signed).
std::string signature_trusted_comment(const std::string& reference, const std::string& manifest_digest);
// The "digest:" field of a trusted comment, "" when it has none.
std::string trusted_comment_digest(std::string_view trusted_comment);

struct TrustVerdict {
  bool required = false;             // some scope matched the repository
  bool ok = true;                    // not required, or every matching scope is satisfied
  std::vector<std::string> scopes;   // the matching scopes
  std::vector<std::string> key_ids;  // the keys whose signatures verified
  std::string problem;               // !ok: why, for a message that says "signature"
  std::vector<std::string> verified; // the signature texts that verified (to keep for offline runs)
};

// Checks `signatures` (.minisig texts, e.g. fetched referrers or stored ones) of the
// manifest `manifest_bytes` (digest `manifest_digest`) of `repository` against `config`'s
// trust. Malformed signatures are skipped (named in `problem` when nothing verifies).
TrustVerdict check_trust(const MoonConfig& config, const std::string& repository, const std::string& manifest_digest,
                         std::string_view manifest_bytes, const std::vector<std::string>& signatures);

enum class ConsentState {
  approved,        // this digest was approved
  first_version,   // the repository has no approval: needs one
  wider,           // wider than the newest approved version: needs approval
  not_wider,       // no wider (narrower or equal) than the newest approved version: runs
};
const char* to_string(ConsentState);

struct ConsentVerdict {
  ConsentState state = ConsentState::first_version;
  std::optional<ApprovalRecord> last;  // the newest approval of the repository
  policy::CapabilityDiff diff;         // against `last` (wider / not_wider)
  [[nodiscard]] bool needs_approval() const {
    return state == ConsentState::first_version || state == ConsentState::wider;
  }
};

// Where pack `manifest_text` (digest `digest`) of `repository` stands. An unparsable
// manifest (here or in the last approval) is an error: never approved by default.
Result<ConsentVerdict> check_consent(Store& store, const std::string& repository, const std::string& digest,
                                     const std::string& manifest_text);
// The same through a MoonBackend (the embedded Moon or a daemon's).
Result<ConsentVerdict> check_consent(MoonBackend& moon, const std::string& repository, const std::string& digest,
                                     const std::string& manifest_text);

// Records the operator's approval (and a `pack_approved` event: reference, repository,
// digest, actor, what the verdict was and the changes approved).
Status record_approval(Store& store, const std::string& repository, const std::string& digest,
                       const std::string& reference, const std::string& manifest_text, const Actor& actor,
                       const ConsentVerdict& verdict);
// The same through a MoonBackend; a daemon records its peer as the actor.
Status record_approval(MoonBackend& moon, const std::string& repository, const std::string& digest,
                       const std::string& reference, const std::string& manifest_text, const Actor& actor,
                       const ConsentVerdict& verdict);

// The diff as JSON: {"wider": bool, "changes": [{area, change, item, entry, from, to, wider}]}.
nlohmann::ordered_json diff_json(const policy::CapabilityDiff& diff);

// A Moon event (source soyaos://HOST/moon, data.run_id null) about a pack: `pack_signed`,
// `pack_approved`, `pack_refused`. `pack`/`version` name it when known (a local
// NAME@VERSION or the manifest's); `digest` is the pack's tree digest as in every other
// event (null when not known yet, e.g. before a remote pack's layer is downloaded); the
// OCI manifest digest goes in data.manifest_digest.
nlohmann::ordered_json pack_event(const std::string& type, const std::string& pack, const std::string& version,
                                  const std::string& digest, nlohmann::ordered_json data);

}  // namespace soyaos::moon
