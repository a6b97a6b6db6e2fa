#include "comet/seccomp_notify.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace soyaos::comet {
namespace {

// Added in Linux 6.6; not in the installed uapi headers (6.1).
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

// The kernel's struct seccomp_notif may grow; the receive buffer must be at least as large
// as the running kernel says (SECCOMP_GET_NOTIF_SIZES), asked once per process.
size_t notif_size() {
  static const size_t size = [] {
    seccomp_notif_sizes sizes{};
    // SAFETY: raw seccomp(2) query, fills `sizes`; on failure fall back to our header's size.
    if (::syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return sizeof(seccomp_notif);
    return std::max<size_t>(sizes.seccomp_notif, sizeof(seccomp_notif));
  }();
  return size;
}

Status send_response(const UniqueFd& listener, const seccomp_notif_resp& resp, const char* what) {
  seccomp_notif_resp r = resp;
  for (;;) {
    // SAFETY: SECCOMP_IOCTL_NOTIF_SEND reads `r`.
    if (::ioctl(listener.get(), SECCOMP_IOCTL_NOTIF_SEND, &r) == 0) return {};
    if (errno == EINTR) continue;
    return errno_error(std::string("ioctl SECCOMP_IOCTL_NOTIF_SEND ") + what + " id " +
                       std::to_string(resp.id));
  }
}

// Copies up to `len` bytes at `addr` in `pid` into `out`; returns the number of bytes read
// (may be short at an unmapped page), or -1 with errno.
ssize_t read_remote(pid_t pid, uint64_t addr, char* out, size_t len, UniqueFd& mem_fd) {
  if (!mem_fd) {
    iovec local{out, len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    // SAFETY: process_vm_readv copies from the agent into our buffer `out` of `len` bytes.
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n >= 0 || (errno != EPERM && errno != ENOSYS)) return n;
    // Fallback: /proc/PID/mem (checked with FSCREDS instead of REALCREDS; works where
    // process_vm_readv is filtered or compiled out).
    std::string path = "/proc/" + std::to_string(pid) + "/mem";
    mem_fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!mem_fd) return -1;
  }
  return ::pread(mem_fd.get(), out, len, static_cast<off_t>(addr));
}

}  // namespace

Result<Notification> receive_notification(const UniqueFd& listener) {
  std::vector<unsigned char> buf(notif_size());
  for (;;) {
    std::memset(buf.data(), 0, buf.size());  // the kernel requires a zeroed buffer
    // SAFETY: SECCOMP_IOCTL_NOTIF_RECV writes at most SECCOMP_GET_NOTIF_SIZES bytes.
    if (::ioctl(listener.get(), SECCOMP_IOCTL_NOTIF_RECV, buf.data()) == 0) break;
    if (errno == EINTR) continue;
    return errno_error("ioctl SECCOMP_IOCTL_NOTIF_RECV");
  }
  seccomp_notif raw{};
  std::memcpy(&raw, buf.data(), sizeof(raw));
  Notification n;
  n.id = raw.id;
  n.pid = raw.pid;
  n.nr = raw.data.nr;
  n.arch = raw.data.arch;
  n.instruction_pointer = raw.data.instruction_pointer;
  for (int i = 0; i < 6; ++i) n.args[i] = raw.data.args[i];
  return n;
}

bool notification_valid(const UniqueFd& listener, uint64_t id) {
  // SAFETY: SECCOMP_IOCTL_NOTIF_ID_VALID reads the id.
  return ::ioctl(listener.get(), SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

Status respond_continue(const UniqueFd& listener, uint64_t id) {
  seccomp_notif_resp resp{};
  resp.id = id;
  resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  return send_response(listener, resp, "continue");
}

Status respond_error(const UniqueFd& listener, uint64_t id, int err) {
  if (err <= 0) return make_error("respond_error: errno must be positive", EINVAL);
  seccomp_notif_resp resp{};
  resp.id = id;
  resp.error = -err;
  return send_response(listener, resp, "error");
}

Status respond_value(const UniqueFd& listener, uint64_t id, int64_t value) {
  seccomp_notif_resp resp{};
  resp.id = id;
  resp.val = value;
  return send_response(listener, resp, "value");
}

Status respond_with_fd(const UniqueFd& listener, uint64_t id, const UniqueFd& fd, bool cloexec) {
  seccomp_notif_addfd addfd{};
  addfd.id = id;
  // SEND: installing the fd and answering the syscall with its number are one atomic step.
  addfd.flags = SECCOMP_ADDFD_FLAG_SEND;
  addfd.srcfd = static_cast<uint32_t>(fd.get());
  addfd.newfd_flags = cloexec ? O_CLOEXEC : 0;
  for (;;) {
    // SAFETY: SECCOMP_IOCTL_NOTIF_ADDFD reads `addfd`; the kernel duplicates fd into the agent.
    if (::ioctl(listener.get(), SECCOMP_IOCTL_NOTIF_ADDFD, &addfd) >= 0) return {};
    if (errno == EINTR) continue;
    return errno_error("ioctl SECCOMP_IOCTL_NOTIF_ADDFD id " + std::to_string(id));
  }
}

Result<std::string> read_agent_string(const UniqueFd& listener, uint64_t id, pid_t pid,
                                      uint64_t addr) {
  if (addr == 0) return make_error("read_agent_string: NULL pointer", EFAULT);
  std::string out;
  char chunk[PATH_MAX];
  UniqueFd mem_fd;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  while (out.size() < PATH_MAX) {
    // Never read across a page boundary in one go: the next page may be unmapped while the
    // string ends before it.
    uint64_t cur = addr + out.size();
    size_t len = std::min<uint64_t>(page - cur % page, PATH_MAX - out.size());
    ssize_t n = read_remote(pid, cur, chunk, len, mem_fd);
    if (n <= 0) {
      int saved = n < 0 ? errno : EFAULT;
      return make_error("read agent memory pid " + std::to_string(pid), saved);
    }
    const void* nul = std::memchr(chunk, '\0', static_cast<size_t>(n));
    if (nul != nullptr) {
      out.append(chunk, static_cast<const char*>(nul) - chunk);
      // The pid could have exited and been reused while we read: only trust the bytes if the
      // thread is still blocked in the notified syscall.
      if (!notification_valid(listener, id)) {
        return make_error("read_agent_string: notification " + std::to_string(id) + " no longer valid",
                          ENOENT);
      }
      return out;
    }
    out.append(chunk, static_cast<size_t>(n));
  }
  return make_error("read_agent_string: no NUL within PATH_MAX", ENAMETOOLONG);
}

Status enable_sync_wakeup(const UniqueFd& listener) {
  // SAFETY: SECCOMP_IOCTL_NOTIF_SET_FLAGS takes the flags by value.
  if (::ioctl(listener.get(), SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, 0) != 0) {
    return errno_error("ioctl SECCOMP_IOCTL_NOTIF_SET_FLAGS SYNC_WAKE_UP");
  }
  return {};
}

}  // namespace soyaos::comet
