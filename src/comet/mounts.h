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

// Whether a mount is made from a host object (its entry in MountSources is set).
bool needs_source(const policy::MountSpec& m);

// Opens every host source of the Policy's mounts, as the invoking user. Called by the
// parent (root or the operator) through `root_prefix` = /proc/CHILD/root, so that the fds
// name mounts of the child's new mount namespace (a bind needs its source there) while the
// child holds ids that may not traverse the operator's directories (as root: the run's own
// uid, and a pack under /root). Opening before the stage tmpfs is mounted also keeps
// sources under /tmp reachable.
Result<MountSources> open_mount_sources(const policy::Policy& policy, const std::string& root_prefix);

// Applies every MountSpec in order under a fresh tmpfs, makes everything but the
// writable tmpfs mounts read-only, pivot_roots into it and detaches the host's tree.
// Errors name the mount and the target.
Result<SandboxRoot> build_sandbox_root(const policy::Policy& policy, MountSources sources);

}  // namespace soyaos::comet
