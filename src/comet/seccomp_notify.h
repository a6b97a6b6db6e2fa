// Thin wrappers over the seccomp user-notification ioctls, used by the supervisor loop.
// The notification path only OBSERVES: the kernel re-reads agent memory after CONTINUE, so
// anything read here must never widen access (mounts and Landlock enforce; see DESIGN.md).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace soyaos::comet {

struct Notification {
  uint64_t id = 0;                   // cookie for respond_* / notification_valid
  uint32_t pid = 0;                  // tid of the agent thread, in the supervisor's PID ns
  int32_t nr = 0;                    // syscall number (x86_64)
  uint64_t args[6] = {};             // raw 64-bit syscall arguments
  uint32_t arch = 0;                 // AUDIT_ARCH_* (always AUDIT_ARCH_X86_64 with our filter)
  uint64_t instruction_pointer = 0;  // agent's IP at the syscall
};

// SECCOMP_IOCTL_NOTIF_RECV, buffer sized from SECCOMP_GET_NOTIF_SIZES. Blocks unless the
// listener is polled readable first. ENOENT: the agent's syscall was interrupted before we
// received it (retry on the next readiness).
Result<Notification> receive_notification(const UniqueFd& listener);

// SECCOMP_IOCTL_NOTIF_ID_VALID: true while the agent thread is still blocked in that syscall.
bool notification_valid(const UniqueFd& listener, uint64_t id);

// Lets the syscall run as the agent issued it (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
Status respond_continue(const UniqueFd& listener, uint64_t id);

// Fails the syscall: the agent sees -1 / errno == err (err > 0).
Status respond_error(const UniqueFd& listener, uint64_t id, int err);

// Completes the syscall without running it: the agent sees `value` returned (sysinfo: 0,
// after the supervisor wrote the agent's view into its buffer).
Status respond_value(const UniqueFd& listener, uint64_t id, int64_t value);

// Answers the syscall (an open) with a new fd in the agent that refers to `fd`'s open file
// (SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SEND, Linux >= 5.14): the agent sees
// the open succeed. Used for the runtime layer's served /proc files, never for a path the
// agent named: the supervisor opened `fd` itself.
Status respond_with_fd(const UniqueFd& listener, uint64_t id, const UniqueFd& fd, bool cloexec);

// Reads a NUL-terminated string (at most PATH_MAX bytes including the NUL) at `addr` in
// thread `pid` with process_vm_readv (fallback: pread on /proc/PID/mem), then checks that
// notification `id` is still valid, so the bytes came from the process that is blocked
// in that syscall. ENAMETOOLONG when no NUL within PATH_MAX; ENOENT when the notification
// went stale.
Result<std::string> read_agent_string(const UniqueFd& listener, uint64_t id, pid_t pid,
                                      uint64_t addr);

// SECCOMP_IOCTL_NOTIF_SET_FLAGS(SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) (Linux >= 6.6): the
// kernel wakes the supervisor on the same CPU, making a round trip cheaper. Returns an
// error with EINVAL/ENOTTY on kernels without it; callers may ignore that (an optimisation).
Status enable_sync_wakeup(const UniqueFd& listener);

}  // namespace soyaos::comet
