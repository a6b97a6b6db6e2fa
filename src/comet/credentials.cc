#include "comet/credentials.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/unique_fd.h"

namespace soyaos::comet {
namespace {

Status write_proc_file(pid_t pid, const char* name, const std::string& content) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return errno_error("open " + path);
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return errno_error("write " + path + " '" + content + "'");
  }
  return {};
}

}  // namespace

// Whether /proc/self/{uid,gid}_map maps the whole run-id range (true in the initial user
// namespace; a "root" inside a container's user namespace usually has 65536 ids only).
bool run_ids_mapped(const char* file) {
  UniqueFd fd(::open(file, O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char buf[4096] = {};
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  const char* p = buf;
  for (;;) {
    unsigned long long inside = 0, outside = 0, count = 0;
    int used = 0;
    // NOLINTNEXTLINE(cert-err34-c): three numbers per line, checked through the count
    if (std::sscanf(p, " %llu %llu %llu%n", &inside, &outside, &count, &used) != 3) return false;
    if (inside <= kRunIdBase && inside + count >= uint64_t{kRunIdBase} + kRunIdSpan) return true;
    p += used;
  }
}

bool use_run_ids() {
  static const bool mapped = ::geteuid() == 0 && run_ids_mapped("/proc/self/uid_map") &&
                             run_ids_mapped("/proc/self/gid_map");
  return mapped;
}

uid_t run_host_uid() {
  if (::geteuid() != 0) return ::geteuid();
  if (!use_run_ids()) return kFallbackHostId;
  return kRunIdBase + static_cast<uid_t>(::gettid()) % kRunIdSpan;
}

gid_t run_host_gid() {
  if (::geteuid() != 0) return ::getegid();
  if (!use_run_ids()) return kFallbackHostId;
  return kRunIdBase + static_cast<gid_t>(::gettid()) % kRunIdSpan;
}

Status enter_run_ids(uid_t uid, gid_t gid) {
  // SAFETY: raw setresgid/setresuid change only this thread's credentials. The real and
  // saved ids stay 0, so leave_run_ids can take euid 0 (and the effective capabilities,
  // copied back from the permitted set) again.
  if (::syscall(SYS_setresgid, -1, gid, -1) != 0) return errno_error("setresgid (effective) " + std::to_string(gid));
  if (::syscall(SYS_setresuid, -1, uid, -1) != 0) {
    const int err = errno;
    leave_run_ids();
    return Error{err, "setresuid (effective) " + std::to_string(uid)};
  }
  return {};
}

void leave_run_ids() {
  // SAFETY: as above; restoring euid 0 from a saved uid of 0 cannot fail.
  (void)::syscall(SYS_setresuid, -1, 0, -1);
  (void)::syscall(SYS_setresgid, -1, 0, -1);
}

Status enter_run_ids_for_clone(uid_t uid, gid_t gid, bool into_cgroup) {
  if (auto s = enter_run_ids(uid, gid); !s) return make_error("user namespace: " + s.error().message, s.error().err);
  if (!into_cgroup) return {};
  struct __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  struct __user_cap_data_struct data[2] {};
  // SAFETY: capget/capset(2) on this thread (pid 0): glibc has no wrapper without libcap.
  if (::syscall(SYS_capget, &header, data) != 0) {
    const int err = errno;
    leave_run_ids();
    return make_error("cgroup: capget", err);
  }
  data[CAP_TO_INDEX(CAP_DAC_OVERRIDE)].effective |= CAP_TO_MASK(CAP_DAC_OVERRIDE);
  if (::syscall(SYS_capset, &header, data) != 0) {
    const int err = errno;
    leave_run_ids();
    return make_error("cgroup: capset: raise CAP_DAC_OVERRIDE for clone3 into the run's cgroup", err);
  }
  return {};
}

Status bound_user_quotas() {
  const std::pair<const char*, const char*> limits[] = {
      {"max_inotify_instances", "16"}, {"max_inotify_watches", "8192"}, {"max_fanotify_groups", "0"},
      {"max_fanotify_marks", "0"},     {"max_user_namespaces", "0"},    {"max_mnt_namespaces", "0"},
      {"max_pid_namespaces", "0"},     {"max_net_namespaces", "0"},     {"max_ipc_namespaces", "0"},
      {"max_uts_namespaces", "0"},     {"max_cgroup_namespaces", "0"},  {"max_time_namespaces", "0"},
  };
  for (const auto& [name, value] : limits) {
    const std::string path = std::string("/proc/sys/user/") + name;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd && errno == ENOENT) continue;  // a kernel without that quota
    if (!fd) return errno_error("open " + path);
    const size_t len = std::strlen(value);
    if (::write(fd.get(), value, len) != static_cast<ssize_t>(len)) {
      return errno_error("write " + std::string(value) + " to " + path);
    }
  }
  return {};
}

Status write_id_maps(pid_t child, const policy::Policy& policy, uid_t host_uid, gid_t host_gid) {
  const bool root = ::geteuid() == 0;
  if (!root) {
    // An unprivileged process may only write gid_map after denying setgroups.
    if (auto s = write_proc_file(child, "setgroups", "deny"); !s) return s;
  }
  if (auto s = write_proc_file(child, "uid_map",
                               std::to_string(policy.sandbox_uid) + " " + std::to_string(host_uid) + " 1\n");
      !s) {
    return s;
  }
  return write_proc_file(child, "gid_map",
                         std::to_string(policy.sandbox_gid) + " " + std::to_string(host_gid) + " 1\n");
}

Status become_sandbox_ids(const policy::Policy& policy) {
  // SAFETY: raw system calls, not glibc's wrappers. The child is a clone3 copy of the
  // supervisor's launcher thread (launch_thread.h), and glibc's set*id wrappers signal every
  // thread glibc believes the process has (its copied thread list) and wait for each: in
  // the new PID namespace a copied TID can name the child itself (a supervisor running as
  // PID 1, as a container's entrypoint), and the wrapper then never returned. The child
  // has exactly one thread, so the per-thread system call is the whole change.
  // setgroups is denied in rootless user namespaces, where the group list is already the
  // operator's single mapped group.
  if (::syscall(SYS_setgroups, 0, nullptr) != 0 && errno != EPERM) return errno_error("setgroups");
  if (::syscall(SYS_setresgid, policy.sandbox_gid, policy.sandbox_gid, policy.sandbox_gid) != 0) {
    return errno_error("setresgid " + std::to_string(policy.sandbox_gid));
  }
  if (::syscall(SYS_setresuid, policy.sandbox_uid, policy.sandbox_uid, policy.sandbox_uid) != 0) {
    return errno_error("setresuid " + std::to_string(policy.sandbox_uid));
  }
  return {};
}

Status drop_privileges(const policy::Policy& policy) {
  // Bounding set first: dropping it needs CAP_SETPCAP, which the next steps remove.
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      return errno_error("drop capability " + std::to_string(cap) + " from the bounding set");
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return errno_error("clear ambient capabilities");
  }
  if (auto s = become_sandbox_ids(policy); !s) return s;
  struct __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  struct __user_cap_data_struct data[2] {};
  // SAFETY: capset(2): glibc has no wrapper without libcap; all-zero sets drop everything.
  if (::syscall(SYS_capset, &header, data) != 0) return errno_error("capset to empty");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno_error("set no_new_privs");
  // The uid change reset dumpable; the supervisor reads the agent's memory (paths) through
  // process_vm_readv, which needs it.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return errno_error("set dumpable");
  return {};
}

Status apply_memory_limit(const policy::Limits& limits) {
  struct rlimit rl {limits.memory_bytes, limits.memory_bytes};
  if (::setrlimit(RLIMIT_DATA, &rl) != 0) return errno_error("setrlimit RLIMIT_DATA (memory)");
  return {};
}

Status apply_rlimits(const policy::Limits& limits) {
  struct Limit {
    int resource;
    rlim_t value;
    const char* name;
  };
  const Limit table[] = {
      {RLIMIT_NPROC, limits.pids, "RLIMIT_NPROC (pids)"},
      {RLIMIT_NOFILE, limits.open_files, "RLIMIT_NOFILE (open files)"},
      {RLIMIT_CORE, 0, "RLIMIT_CORE"},
      {RLIMIT_MEMLOCK, 0, "RLIMIT_MEMLOCK"},
      {RLIMIT_MSGQUEUE, 0, "RLIMIT_MSGQUEUE"},
  };
  for (const auto& l : table) {
    struct rlimit rl {l.value, l.value};
    if (::setrlimit(l.resource, &rl) != 0) return errno_error(std::string("setrlimit ") + l.name);
  }
  return {};
}

}  // namespace soyaos::comet
