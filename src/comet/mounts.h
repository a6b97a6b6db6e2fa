// The Comet's filesystem layer: builds the sandbox's root from the Policy's mount list on
// an empty tmpfs, then pivots into it. Runs in the child, inside its new user and mount
// namespaces, before credentials are dropped.
#pragma once

#include "common/result.h"
#include "common/unique_fd.h"
#include "policy/policy.h"

namespace soyaos::comet {

struct SandboxRoot {
  UniqueFd out_dir;  // /workdir/out's tmpfs, kept open so the supervisor can collect it
};

// Applies every MountSpec in order under a fresh tmpfs, makes everything but the
// writable tmpfs mounts read-only, pivot_roots into it and detaches the host's tree.
// Errors name the mount and the target.
Result<SandboxRoot> build_sandbox_root(const policy::Policy& policy);

}  // namespace soyaos::comet
