// The gate's checks (signatures, trust, approvals) live here; see remote_gate.h. With no
// check configured every pack passes: what a pack may do is still only what its
// manifest declares, enforced by the Comet.
#include "cli/remote_gate.h"

namespace soyaos::cli {

GateDecision remote_pack_gate(const GateRequest& request) {
  (void)request;
  return {};
}

}  // namespace soyaos::cli
