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
};

GateDecision remote_pack_gate(const GateRequest& request);

}  // namespace soyaos::cli
