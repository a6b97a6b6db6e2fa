// The one place where a pack from a registry is judged before it is used (SPEC.md C12):
// signatures and trust, approvals and consent. Every path that uses a remote pack calls
// remote_pack_gate() after its manifest and config are known (digest pinned) and before
// the layer is downloaded, extracted or run: `pack pull REF`, `run REF` (also when it
// runs offline from HOME/remote, then with client == nullptr), `pack inspect REF`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "oci/client.h"
#include "oci/pack.h"

namespace soyaos::cli {

// A pack signature in a registry (docs/signing.md "Signatures in registries"): an OCI
// artifact whose subject is the pack's image manifest and whose one layer is the .minisig.
inline constexpr const char* kSignatureArtifactType = "application/vnd.soyaos.pack.signature.v0";
inline constexpr const char* kSignatureMediaType = "application/vnd.soyaos.pack.signature.v0+minisign";

enum class GateUse { pull, run, inspect };

struct GateRequest {
  const oci::RemotePack& pack;  // pack.ref as the user typed it; pack.manifest_digest pinned
  oci::Client* client;          // nullptr when the pack comes from HOME/remote without network
  GateUse use;
  bool approve = false;         // `pull --approve`
  std::filesystem::path home;   // $SOYAOS_HOME
};

struct GateDecision {
  int exit_code = 0;                // 0: go on; else the command exits with it (pull 1, run 125)
  std::string message;              // printed on stderr when refused
  std::vector<std::string> notes;   // printed on stderr in any case (warnings)
  std::vector<std::string> lines;   // `inspect`: extra "key: value" lines for the text output
  nlohmann::ordered_json flags = nlohmann::ordered_json::array();  // `inspect`: the flags the Moon holds
};

GateDecision remote_pack_gate(const GateRequest& request);

// `soyaos pack approve REF` (remote_gate.cc): the trust check as at pull (a pack that fails
// it is not approved), then the capabilities (the diff against the newest approval, or all
// of them for a first version) are printed on stdout and the approval recorded, whether or
// not the version is wider. exit_code 0 approved, 1 refused (message says why).
// `pack list`: where a pulled pack stands with the operator — what the gate of an offline
// `run REF` would decide now (trust against the signatures the Moon kept, then consent;
// nothing fetched, nothing recorded). `state`: "approved", "runs (no wider than the
// approved REF)", "needs approval (first version of REPO)", "needs approval (wider than the
// approved REF)", or "refused (signature: WHY)" when a trust scope covers the repository
// and no kept signature satisfies it.
struct ConsentSummary {
  bool approved = false;  // this digest was approved
  bool trusted = true;    // no trust scope matches, or the kept signatures satisfy it
  bool runs = false;      // trusted, and approved or no wider than the newest approval
  std::string signature = "not required";  // or "verified (key K)", "refused: WHY"
  std::string state;
};
Result<ConsentSummary> consent_summary(const oci::RemotePack& pack, const std::filesystem::path& home);

GateDecision approve_remote_pack(const oci::RemotePack& pack, oci::Client& client, const std::filesystem::path& home);

}  // namespace soyaos::cli
