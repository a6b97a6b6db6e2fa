// The Comet's credentials layer: user namespace id maps (written by the parent), then in
// the child the switch to the agent's uid/gid, every capability dropped (bounding,
// ambient, inheritable, permitted, effective) and no_new_privs.
#pragma once

#include <sys/types.h>

#include "common/result.h"
#include "policy/policy.h"

namespace soyaos::comet {

// Parent side: maps the sandbox uid/gid of `policy` in `child`'s user namespace.
// Rootless: the operator's own uid/gid (setgroups denied, as the kernel requires).
// As root: host nobody (65534), so a process that escaped would hold no host identity.
Status write_id_maps(pid_t child, const policy::Policy& policy);

// Child side, first thing: take the sandbox uid/gid so that files the setup creates have
// a mapped owner. Capabilities in the new user namespace are kept: as root the previous
// ids (host root, unmapped) were not the namespace's root, so no capability is cleared.
Status become_sandbox_ids(const policy::Policy& policy);

// Child side, after the mounts: switch to the agent's ids and drop every capability.
Status drop_privileges(const policy::Policy& policy);

// Child side: resource limits of C9 as rlimits (memory: apply_memory_limit; pids as
// RLIMIT_NPROC within the sandbox's user namespace, open files, no cores;
// the write quota is the size of the tmpfs mounts, which gives ENOSPC rather than SIGXFSZ).
Status apply_rlimits(const policy::Limits& limits);

// RLIMIT_DATA (the memory limit), set by the launcher as the very last step before execve:
// a lower limit counts the supervisor's own address space the child still shares until
// exec (large under AddressSanitizer, or after a big allocation), so setting it earlier
// could make the launcher's last allocations fail. The agent's image starts under it.
Status apply_memory_limit(const policy::Limits& limits);

}  // namespace soyaos::comet
