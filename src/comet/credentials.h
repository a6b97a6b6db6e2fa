// The Comet's credentials layer: user namespace id maps (written by the parent), then in
// the child the switch to the agent's uid/gid, every capability dropped (bounding,
// ambient, inheritable, permitted, effective) and no_new_privs.
#pragma once

#include <sys/types.h>

#include "common/result.h"
#include "policy/policy.h"

namespace soyaos::comet {

// As root, every Comet runs as a host uid and gid of its own (not root's, not a shared
// `nobody`): kRunIdBase + the host thread id of the supervisor thread that launches it,
// unique among the Comets alive on the host (thread ids are < pid_max <= 2^22). The range
// 1879048192-1883242495 is above systemd-nspawn's container range and below the ids the
// kernel and systemd treat specially; docs/sandbox.md "Rootless and root". The user
// namespace is created with this id as its effective uid, so the kernel's per-user
// quotas that follow the namespace's creator (inotify, fanotify, namespaces) and those
// kept per host uid (pipe buffers, epoll watches, in-flight fds, keys) are the run's own.
inline constexpr uid_t kRunIdBase = 1879048192;  // 0x70000000
inline constexpr uid_t kRunIdSpan = 1U << 22;
// Root in a user namespace that does not map that range (a container's "root"): host
// `nobody`, shared by every Comet (docs/threat-model.md).
inline constexpr uid_t kFallbackHostId = 65534;
// Root: kRunIdBase + gettid() (or kFallbackHostId); rootless: the operator's euid/egid.
// use_run_ids(): whether this process gives Comets ids of their own.
bool use_run_ids();
uid_t run_host_uid();
gid_t run_host_gid();

// Parent side: maps the sandbox uid/gid of `policy` in `child`'s user namespace to
// run_host_uid()/run_host_gid() of the thread that launched it (`host_uid`, `host_gid`).
// Rootless: the operator's own uid/gid (setgroups denied, as the kernel requires).
Status write_id_maps(pid_t child, const policy::Policy& policy, uid_t host_uid, gid_t host_gid);

// Root only, around clone3 in the launching thread: take (and give back) the run's ids as
// this thread's effective ids, so that the user namespace clone3 creates is owned by them.
// Raw per-thread syscalls: glibc's setresuid would change every thread of the supervisor.
Status enter_run_ids(uid_t uid, gid_t gid);
void leave_run_ids();

// Root only, just before the Comet's clone3: enter_run_ids, and with `into_cgroup` (clone3's
// CLONE_INTO_CGROUP, cgroup v2) also CAP_DAC_OVERRIDE in this thread's effective set: the
// kernel checks the caller's own write access to the destination's cgroup.procs and to that
// of the closest cgroup holding both it and the caller (root's files), and the run's euid has
// no effective capability left. The capability is still in the permitted set while the real
// and saved uids are 0; leave_run_ids (euid 0 again) makes effective = permitted as before.
// The child never holds it on the host: CLONE_NEWUSER gives it a set bound to its new
// namespace. On failure nothing is left changed (but dumpable, the caller's to restore).
Status enter_run_ids_for_clone(uid_t uid, gid_t gid, bool into_cgroup);

// Child side, in its new user namespace while it still holds CAP_SYS_RESOURCE there: the
// per-namespace limits of /proc/sys/user (inotify instances 16 and watches 8192, fanotify
// and new namespaces 0). Whatever the agent charges is also charged to the namespace's
// creator (the operator, rootless) up the chain, so these bound what it can take of them.
Status bound_user_quotas();

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
