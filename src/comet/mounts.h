// The Comet's filesystem layer: builds the sandbox's root from the Policy's mount list on
// an empty tmpfs, then pivots into it. Runs in the child, inside its new user and mount
// namespaces, before credentials are dropped.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "policy/policy.h"

namespace soyaos::comet {

struct SandboxRoot {
  UniqueFd out_dir;  // /workdir/out's tmpfs, kept open so the supervisor can collect it
};

struct OpenedSource {
  UniqueFd fd;  // O_PATH; O_RDONLY for a masked file (copied, not bound)
  bool is_dir = false;
};

// The host objects the mounts need, opened once as the invoking user.
struct MountSources {
  std::vector<OpenedSource> by_mount;  // aligned with Policy::mounts (bind kinds, pack_root)
};

// Opens every host source of the Policy's mounts. Called in the child before it takes the
// sandbox's ids: as root those are host nobody, who may not traverse the operator's
// directories (a pack under /root). Opening first also keeps sources under /tmp reachable
// (the stage tmpfs later hides /tmp).
Result<MountSources> open_mount_sources(const policy::Policy& policy);

// Applies every MountSpec in order under a fresh tmpfs, makes everything but the
// writable tmpfs mounts read-only, pivot_roots into it and detaches the host's tree.
// Errors name the mount and the target.
Result<SandboxRoot> build_sandbox_root(const policy::Policy& policy, MountSources sources);

}  // namespace soyaos::comet
