// The agent's seccomp table and its compilation with libseccomp. Built into the generator
// (soyaos_seccomp_gen, which embeds the compiled program in soyaos) and the unit tests, not
// into soyaos: the running supervisor never loads libseccomp (seccomp_program.cc).
#include "comet/seccomp_filter.h"

#include <errno.h>
#include <linux/fs.h>
#include <linux/fscrypt.h>
#include <linux/fsverity.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace soyaos::comet {
namespace {

// ---------------------------------------------------------------------------------------
// THE TABLE. One row per syscall (or per argument condition of a syscall) with its reason.
// Anything not listed gets the default action ERRNO(EPERM). docs/seccomp.md mirrors this.
// ---------------------------------------------------------------------------------------

constexpr uint32_t kAllow = SCMP_ACT_ALLOW;
constexpr uint32_t kNotify = SCMP_ACT_NOTIFY;
constexpr uint32_t kDefault = SCMP_ACT_ERRNO(EPERM);  // also the filter's default action
constexpr uint32_t kEnosys = SCMP_ACT_ERRNO(ENOSYS);
constexpr uint32_t kEafnosupport = SCMP_ACT_ERRNO(EAFNOSUPPORT);

// The kernel reads int/unsigned int arguments from the low 32 bits of the register: compare
// those only, so that e.g. TIOCSTI | 1<<32 is still TIOCSTI.
constexpr uint64_t kLow32 = 0xffffffffULL;
// Socket type bits that select the type (the rest are SOCK_NONBLOCK / SOCK_CLOEXEC).
constexpr uint64_t kSockTypeMask = 0xf;
// Every namespace-creating clone flag: a thread may not come with new namespaces.
constexpr uint64_t kCloneNewNs = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                 CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080  // clone3/unshare only; kept for completeness
#endif

struct Row {
  const char* syscall;
  uint32_t action;  // kDefault rows are documentation only (not added: same as the default)
  std::vector<scmp_arg_cmp> args;
  const char* reason;
};

scmp_arg_cmp arg_eq32(unsigned arg, uint64_t value) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, kLow32, value};
}

// Appends `action` rows for `syscall` matching every value whose low 32 bits (what the kernel
// reads for an int argument) are NOT in `excluded`, using only single masked comparisons: the
// complement of the excluded values' binary trie. Walking each excluded value from bit 31
// down, every branch that leads to no excluded value is one row ("these high bits equal this
// prefix, and the next bit differs"). At most 32 rows per excluded value, fewer where they
// share prefixes; every value not excluded matches exactly one row.
void rows_unless_low32(std::vector<Row>& t, const char* syscall, uint32_t action, unsigned arg,
                       std::initializer_list<uint64_t> excluded, const char* reason) {
  std::vector<std::pair<uint64_t, uint64_t>> rows;  // (mask, value), deduplicated
  for (uint64_t e : excluded) {
    e &= kLow32;
    for (int bit = 31; bit >= 0; --bit) {
      const uint64_t mask = (kLow32 << bit) & kLow32;  // bits 31..bit
      const uint64_t sibling = (e & mask) ^ (1ULL << bit);
      bool leads_to_excluded = false;
      for (uint64_t other : excluded) leads_to_excluded |= ((other & kLow32) & mask) == sibling;
      if (leads_to_excluded) continue;
      if (std::find(rows.begin(), rows.end(), std::make_pair(mask, sibling)) == rows.end()) {
        rows.emplace_back(mask, sibling);
      }
    }
  }
  for (const auto& [mask, value] : rows) {
    t.push_back({syscall, action, {{arg, SCMP_CMP_MASKED_EQ, mask, value}}, reason});
  }
}

std::vector<Row> agent_table(bool observe_paths) {
  std::vector<Row> t;
  auto allow = [&t](const char* name, const char* reason) { t.push_back({name, kAllow, {}, reason}); };
  auto notify = [&t](const char* name, const char* reason) { t.push_back({name, kNotify, {}, reason}); };
  auto deny = [&t](const char* name, const char* reason) { t.push_back({name, kDefault, {}, reason}); };

  // --- NOTIFY: the supervisor observes (and answers) these --------------------------------
  notify("execve", "C3: only the runtime's first exec is let through; later ones are violations");
  notify("execveat", "C3: same as execve (fexecve, memfd exec)");
  notify("fork", "C3: new processes are violations (EPERM)");
  notify("vfork", "C3: new processes are violations (EPERM)");
  t.push_back({"clone", kNotify, {{0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0}},
               "C3: clone without CLONE_THREAD makes a process: observed, answered EPERM"});
  const char* kPath = "C2: path syscall, observed for violation reports (mounts+Landlock enforce)";
  for (const char* n : {"open", "openat", "openat2", "creat", "mkdir", "mkdirat", "unlink",
                        "unlinkat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat",
                        "symlink", "symlinkat", "truncate", "mknod", "mknodat"}) {
    if (observe_paths) {
      notify(n, kPath);
    } else {
      allow(n, "benchmark baseline only: path syscalls unobserved (mounts+Landlock still enforce)");
    }
  }
  const char* kClock = "C4: setting a clock is a violation (EPERM), reported by the supervisor";
  for (const char* n : {"clock_settime", "settimeofday", "adjtimex", "clock_adjtime"}) notify(n, kClock);

  // --- Special errno ----------------------------------------------------------------------
  // clone3's flags live in user memory, which BPF cannot read: the supervisor reads them to
  // report a process (C3: EPERM + violation) and answers ENOSYS for a thread, so that glibc
  // falls back to clone(2), whose flags the rows below inspect. It never lets clone3 run, so
  // what a racing thread writes there changes at most the report, never the outcome.
  notify("clone3", "C3: a process is a violation (EPERM); a thread gets ENOSYS and glibc falls back to clone");
  // Families are int: compared on the low 32 bits like the kernel reads them. The ALLOW rows
  // below take AF_UNIX/AF_INET/AF_INET6; every other family fails like an absent one.
  rows_unless_low32(t, "socket", kEafnosupport, 0, {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK},
                    "C5: packet, vsock, AF_ALG, bluetooth...: EAFNOSUPPORT (what a kernel "
                    "without the family says; glibc and runtimes fall back quietly)");
  // AF_NETLINK: only NETLINK_ROUTE (protocol 0), raw or datagram, which glibc's getifaddrs(3)
  // needs (node os.networkInterfaces(), python socket.if_nameindex()). The agent holds no
  // capability over its network namespace, so the kernel answers every request that would
  // change something (RTM_NEW*/DEL*/SET*) with EPERM before looking at it; only dumps of the
  // sandbox's own lo and veth remain (docs/threat-model.md). Every other protocol
  // (NETLINK_NETFILTER, SOCK_DIAG, AUDIT, ...) and type: EAFNOSUPPORT, as for other families.
  const scmp_arg_cmp netlink = arg_eq32(0, AF_NETLINK);
  const char* kNetlinkOther = "C5: netlink protocols other than NETLINK_ROUTE: EAFNOSUPPORT";
  for (int bit = 0; bit < 32; ++bit) {
    const uint64_t m = 1ULL << bit;
    t.push_back({"socket", kEafnosupport, {netlink, {2, SCMP_CMP_MASKED_EQ, m, m}}, kNetlinkOther});
  }
  const char* kNetlinkType = "C5: NETLINK_ROUTE of a type other than SOCK_RAW/SOCK_DGRAM: EAFNOSUPPORT";
  for (uint64_t bit : {0x4ULL, 0x8ULL}) {
    t.push_back({"socket", kEafnosupport, {netlink, {1, SCMP_CMP_MASKED_EQ, bit, bit}, arg_eq32(2, 0)}, kNetlinkType});
  }
  t.push_back({"socket", kEafnosupport, {netlink, {1, SCMP_CMP_MASKED_EQ, 0xe, 0}, arg_eq32(2, 0)}, kNetlinkType});
  rows_unless_low32(t, "socketpair", kEafnosupport, 0, {AF_UNIX}, "C5: only AF_UNIX pairs");

  // --- ALLOW with conditions --------------------------------------------------------------
  t.push_back({"clone", kAllow, {{0, SCMP_CMP_MASKED_EQ, CLONE_THREAD | kCloneNewNs, CLONE_THREAD}},
               "threads (pthread_create) are fine; a thread with new namespaces is refused (default)"});
  t.push_back({"socket", kAllow, {arg_eq32(0, AF_UNIX)}, "local IPC (any type)"});
  for (int family : {AF_INET, AF_INET6}) {
    for (int type : {SOCK_STREAM, SOCK_DGRAM}) {
      t.push_back({"socket", kAllow,
                   {arg_eq32(0, static_cast<uint64_t>(family)),
                    {1, SCMP_CMP_MASKED_EQ, kSockTypeMask, static_cast<uint64_t>(type)}},
                   "TCP/UDP; egress is decided by the network layer. SOCK_RAW/SOCK_PACKET: EPERM"});
    }
  }
  for (int type : {SOCK_RAW, SOCK_DGRAM}) {
    t.push_back({"socket", kAllow,
                 {netlink, {1, SCMP_CMP_MASKED_EQ, kSockTypeMask, static_cast<uint64_t>(type)}, arg_eq32(2, 0)},
                 "NETLINK_ROUTE, read-only for the agent (no CAP_NET_ADMIN): getifaddrs(3), if_nameindex(3)"});
  }
  t.push_back({"socketpair", kAllow, {arg_eq32(0, AF_UNIX)}, "local IPC"});
  // libseccomp cannot add a conditional rule whose action equals the default (EACCES), and an
  // unconditional ALLOW would override it; so these are written as "ALLOW unless the low 32
  // bits equal one of ...", which refuses exactly those values with the default EPERM.
  rows_unless_low32(t, "ioctl", kAllow, 1,
                    {TIOCSTI, TIOCLINUX, FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_SETVERSION,
                     FS_IOC32_SETVERSION, FS_IOC_FSSETXATTR, FS_IOC_ENABLE_VERITY, FS_IOC_SET_ENCRYPTION_POLICY},
                    "C5: everything but TIOCSTI (pushes input into the terminal) and TIOCLINUX "
                    "(reads/inserts console contents), compared on the low 32 bits: EPERM; and "
                    "the inode-changing requests below, which are observed");
  // Inode changes through an fd (flags such as immutable/append, fsxattr, generation,
  // fs-verity, an encryption policy): observed like fchmod, so that one on a file outside
  // fs.write is EACCES and reported (the read-only mount alone would say EROFS, unseen).
  for (uint64_t req : {FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_SETVERSION, FS_IOC32_SETVERSION,
                       FS_IOC_FSSETXATTR, FS_IOC_ENABLE_VERITY, FS_IOC_SET_ENCRYPTION_POLICY}) {
    t.push_back({"ioctl", kNotify, {arg_eq32(1, req)},
                 "C2: an inode change through an fd, observed (EACCES outside fs.write; reported)"});
  }
  rows_unless_low32(t, "prctl", kAllow, 0, {PR_SET_SECCOMP},
                     "everything but PR_SET_SECCOMP (C5: no filters of the agent's own): EPERM");
  for (uint64_t persona : {0x0ULL, 0x8ULL, 0x20000ULL, 0x20008ULL, 0xffffffffULL}) {
    t.push_back({"personality", kAllow, {arg_eq32(0, persona)},
                 "query (0xffffffff) and the PER_LINUX variants Docker allows; others EPERM"});
  }
  t.push_back({"prlimit64", kAllow, {{0, SCMP_CMP_EQ, 0, 0}},
               "own limits only; raising a hard limit needs a capability the agent lacks"});

  // --- ALLOW: memory ----------------------------------------------------------------------
  const char* kMem = "memory management";
  for (const char* n : {"brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync",
                        "mincore", "mlock", "mlock2", "munlock", "membarrier", "pkey_alloc",
                        "pkey_free", "pkey_mprotect", "get_mempolicy"}) {
    allow(n, kMem);
  }
  // --- ALLOW: file descriptors and I/O (on fds the mounts and Landlock already allowed) ---
  const char* kIo = "I/O on an fd the agent already holds";
  for (const char* n : {"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
                        "pwritev", "preadv2", "pwritev2", "lseek", "close", "close_range", "dup",
                        "dup2", "dup3", "fcntl", "flock", "fsync", "fdatasync", "sync_file_range",
                        "fallocate", "fadvise64", "readahead", "sendfile",
                        "copy_file_range", "splice", "tee", "fstat", "fstatfs",
                        "getdents", "getdents64", "fchdir", "syncfs"}) {
    allow(n, kIo);
  }
  allow("sync", "flushes caches only; Docker allows it");
  allow("pipe", "anonymous pipe");
  allow("pipe2", "anonymous pipe");
  allow("eventfd", "event notification fd");
  allow("eventfd2", "event notification fd");
  allow("memfd_create", "anonymous memory file (node, JITs); exec of it is execveat: notified");
  allow("inotify_init1", "file watching (node fs.watch) inside the visible tree");
  allow("inotify_add_watch", "file watching inside the visible tree");
  allow("inotify_rm_watch", "file watching");
  // --- ALLOW: path lookups that do not create, remove or open for writing -----------------
  const char* kLookup = "metadata lookup; what is visible is decided by the mount namespace";
  for (const char* n : {"stat", "lstat", "newfstatat", "statx", "statfs", "access", "faccessat",
                        "faccessat2", "readlink", "readlinkat", "getcwd", "chdir", "getxattr",
                        "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
                        "getxattrat", "listxattrat", "file_getattr"}) {
    allow(n, kLookup);
  }
  // Metadata writes by path: observed like the other path writes, so that one outside
  // fs.write fails with EACCES and is reported (a read-only mount alone would say EROFS).
  const char* kMeta = "C2: metadata write by path, observed (EACCES outside fs.write; mounts+Landlock enforce)";
  for (const char* n : {"utime", "utimes", "futimesat", "utimensat", "file_setattr"}) {
    notify(n, kMeta);
  }
  // Mode changes, by path (chmod, fchmodat, fchmodat2) and through an fd (fchmod), are
  // observed like the other writes: outside fs.write EACCES and reported (a read-only mount
  // alone would say EROFS). A set-id bit is refused everywhere (EPERM) and reported: a
  // setuid/setgid file in /workdir/out would outlive the sandbox on the host. The observer
  // decides that on the mode register the kernel itself uses (no agent memory), so a racing
  // thread cannot change it; a freshly created file's set-id bits are cleared by the kernel
  // on the first write (no CAP_FSETID) and by collection.
  const char* kChmod = "C2/C5: mode change, observed (EACCES outside fs.write; set-id EPERM; both reported)";
  for (const char* n : {"chmod", "fchmod", "fchmodat", "fchmodat2"}) notify(n, kChmod);
  allow("umask", "process file-mode mask");
  // Writes through an fd the agent holds: observed so that one on a file outside fs.write
  // (an fd opened for reading) is EACCES and reported instead of EINVAL/EROFS unseen.
  const char* kFdMeta = "C2: change through an fd, observed (EACCES outside fs.write; reported)";
  notify("ftruncate", kFdMeta);
  // Ownership and extended attributes: no runtime needs them; the supervisor answers
  // EPERM where the file is writable and EACCES, reported, outside fs.write (C2).
  const char* kOwner = "ownership/xattr change: EPERM (no capability); outside fs.write EACCES, reported";
  for (const char* n : {"chown", "fchown", "lchown", "fchownat", "setxattr", "lsetxattr", "fsetxattr",
                        "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat"}) {
    notify(n, kOwner);
  }
  // --- ALLOW: polling ---------------------------------------------------------------------
  const char* kPoll = "event loops (asyncio, libuv)";
  for (const char* n : {"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
                        "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2"}) {
    allow(n, kPoll);
  }
  // --- ALLOW: sockets (creation is filtered above) ----------------------------------------
  const char* kNet = "socket use; destinations are decided by the network layer (C6)";
  // bind of a pathname AF_UNIX socket creates a file: observed like the other creations.
  notify("bind", "C2: a unix socket at a path is a file creation: observed (EACCES outside fs.write)");
  for (const char* n : {"connect", "listen", "accept", "accept4", "sendto", "recvfrom",
                        "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "getsockopt", "setsockopt",
                        "getsockname", "getpeername", "shutdown"}) {
    allow(n, kNet);
  }
  // --- ALLOW: time (reading) and timers ---------------------------------------------------
  const char* kTime = "C4: reading clocks and sleeping";
  for (const char* n : {"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
                        "gettimeofday", "time"}) {
    allow(n, kTime);
  }
  const char* kTimer = "timers of this process";
  for (const char* n : {"alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
                        "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
                        "timerfd_settime", "timerfd_gettime"}) {
    allow(n, kTimer);
  }
  // --- ALLOW: signals (the PID namespace confines kill to the sandbox) ---------------------
  const char* kSig = "signals; the PID namespace (and Landlock's signal scope) confine targets";
  for (const char* n : {"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend",
                        "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
                        "rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4", "pause",
                        "kill", "tkill", "tgkill", "restart_syscall"}) {
    allow(n, kSig);
  }
  // --- ALLOW: threads and process state ---------------------------------------------------
  const char* kThread = "threads, futexes and glibc/runtime start-up";
  for (const char* n : {"futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq",
                        "set_tid_address", "arch_prctl", "exit", "exit_group", "sched_yield",
                        "sched_getaffinity", "sched_setaffinity", "sched_getparam",
                        "sched_getscheduler", "sched_get_priority_max",
                        "sched_get_priority_min", "sched_rr_get_interval", "sched_getattr",
                        "getcpu"}) {
    allow(n, kThread);
  }
  const char* kId = "identity queries (the user namespace maps them)";
  for (const char* n : {"getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid",
                        "getgroups", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid",
                        "capget"}) {
    allow(n, kId);
  }
  allow("setsid", "new session inside the sandbox (daemons, pty handling)");
  allow("setpgid", "process groups inside the sandbox");
  allow("wait4", "harmless: the agent has no children");
  allow("waitid", "harmless: the agent has no children");
  allow("getrlimit", "read limits");
  allow("setrlimit", "own limits; raising a hard limit needs a capability the agent lacks");
  allow("getrusage", "resource usage");
  allow("times", "process times");
  allow("getpriority", "nice value");
  allow("setpriority", "can only lower priority without CAP_SYS_NICE");
  allow("getrandom", "C4: randomness always works");
  allow("uname", "system identification (the sandbox's UTS namespace)");
  // The host's RAM and task count would show: the supervisor answers with the agent's view
  // (the runtime layer's /proc files), written into the agent's buffer; the kernel never runs it.
  notify("sysinfo", "answered by the supervisor: RAM bounded by resources.memory, one process");
  const char* kLandlock = "Landlock can only narrow the agent's own access further";
  for (const char* n : {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}) {
    allow(n, kLandlock);
  }

  // --- Documented denials (same action as the default: not added, listed for the record) ----
  const char* kDebug = "C5: reading or writing another process, or comparing its kernel objects";
  for (const char* n : {"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"}) deny(n, kDebug);
  deny("pidfd_open", "no child processes exist to need it; refusing keeps pidfd_* out of reach");
  deny("pidfd_send_signal", "see pidfd_open");
  const char* kMount = "C5: mount namespace changes";
  for (const char* n : {"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
                        "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"}) {
    deny(n, kMount);
  }
  const char* kKernel = "C5: kernel attack surface not needed by the runtimes";
  for (const char* n : {"bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
                        "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init",
                        "lookup_dcookie", "io_setup", "io_submit", "io_getevents", "io_destroy",
                        "io_cancel", "modify_ldt", "set_thread_area", "get_thread_area",
                        "mbind", "set_mempolicy", "migrate_pages", "move_pages"}) {
    deny(n, kKernel);
  }
  deny("unshare", "C5: no new namespaces (a nested user namespace would regain capabilities)");
  deny("setns", "C5: no joining other namespaces");
  deny("open_by_handle_at", "C5: bypasses path resolution (shocker)");
  deny("name_to_handle_at", "C5: companion of open_by_handle_at");
  deny("seccomp", "C5: the agent may not stack filters or obtain a listener");
  const char* kHost = "C5: host administration";
  for (const char* n : {"kexec_load", "kexec_file_load", "init_module", "finit_module",
                        "delete_module", "reboot", "swapon", "swapoff", "acct", "syslog",
                        "quotactl", "quotactl_fd", "vhangup", "iopl", "ioperm", "nfsservctl"}) {
    deny(n, kHost);
  }
  // Newer than the table (Linux 5.10+), refused by the default; none is a manifest surface.
  for (const char* n : {"open_tree_attr", "statmount", "listmount"}) {
    deny(n, "C5: the mount API; statmount/listmount would name the host paths of mount sources");
  }
  for (const char* n : {"process_madvise", "process_mrelease", "memfd_secret", "map_shadow_stack", "mseal",
                        "set_mempolicy_home_node", "cachestat", "futex_wake", "futex_wait", "futex_requeue",
                        "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules"}) {
    deny(n, "C5: kernel surface no runtime here uses (glibc 2.36 calls none of them)");
  }
  deny("sethostname", "the UTS namespace is the supervisor's to name; no runtime needs it");
  deny("setdomainname", "see sethostname");
  const char* kCred = "credentials: the agent runs as one mapped user with no capabilities";
  for (const char* n : {"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
                        "setfsuid", "setfsgid", "setgroups", "capset"}) {
    deny(n, kCred);
  }
  return t;
}

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Result<Ctx> build_context(bool observe_paths = true) {
  Ctx ctx(seccomp_init(kDefault));
  if (!ctx) return make_error("seccomp_init", ENOMEM);
  // Foreign ABIs: the kernel reports i386 (int 0x80) as AUDIT_ARCH_I386 and x32 as
  // AUDIT_ARCH_X86_64 with nr | 0x40000000; libseccomp's x86_64 filter sends both to the
  // bad-arch action. ENOSYS is what a kernel without those ABIs would say.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, kEnosys); rc < 0) {
    return make_error("seccomp_attr_set SCMP_FLTATR_ACT_BADARCH", -rc);
  }
  // Binary search over syscall numbers instead of a linear chain (read/write are otherwise
  // checked last among ~200 syscalls).
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc < 0) {
    return make_error("seccomp_attr_set SCMP_FLTATR_CTL_OPTIMIZE", -rc);
  }
  // NO_NEW_PRIVS is set by install_agent_filter itself.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0); rc < 0) {
    return make_error("seccomp_attr_set SCMP_FLTATR_CTL_NNP", -rc);
  }
  for (const Row& row : agent_table(observe_paths)) {
    if (row.action == kDefault && row.args.empty()) continue;  // documentation row
    int nr = seccomp_syscall_resolve_name(row.syscall);
    if (nr == __NR_SCMP_ERROR && newer_syscall_nr(row.syscall) != 0) nr = newer_syscall_nr(row.syscall);
    if (nr == __NR_SCMP_ERROR) return make_error(std::string("seccomp: unknown syscall ") + row.syscall);
    int rc = seccomp_rule_add_array(ctx.get(), row.action, nr, static_cast<unsigned>(row.args.size()),
                                    row.args.empty() ? nullptr : row.args.data());
    if (rc < 0) return make_error(std::string("seccomp_rule_add ") + row.syscall, -rc);
  }
  return ctx;
}

// Runs one of libseccomp's fd exporters into a memfd and reads the bytes back.
Result<std::string> export_to_string(const Ctx& ctx, int (*exporter)(const scmp_filter_ctx, int),
                                     const char* what) {
  UniqueFd fd(::memfd_create("soyaos-seccomp", MFD_CLOEXEC));
  if (!fd) return errno_error("memfd_create soyaos-seccomp");
  if (int rc = exporter(ctx.get(), fd.get()); rc < 0) return make_error(what, -rc);
  off_t size = ::lseek(fd.get(), 0, SEEK_CUR);
  if (size < 0) return errno_error("lseek seccomp export");
  std::string out(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("pread seccomp export");
    if (n == 0) return make_error("pread seccomp export: short read", EIO);
    done += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace

Result<SeccompProgram> compile_agent_filter(bool observe_paths) {
  Result<Ctx> ctx = build_context(observe_paths);
  if (!ctx) return ctx.error();
  Result<std::string> bytes = export_to_string(*ctx, seccomp_export_bpf, "seccomp_export_bpf");
  if (!bytes) return bytes.error();
  if (bytes->empty() || bytes->size() % sizeof(sock_filter) != 0 ||
      bytes->size() / sizeof(sock_filter) > BPF_MAXINSNS) {
    return make_error("seccomp_export_bpf: bad program size " + std::to_string(bytes->size()), EINVAL);
  }
  SeccompProgram program;
  program.instructions.resize(bytes->size() / sizeof(sock_filter));
  std::memcpy(program.instructions.data(), bytes->data(), bytes->size());
  return program;
}

Result<std::string> agent_filter_pfc() {
  Result<Ctx> ctx = build_context();
  if (!ctx) return ctx.error();
  return export_to_string(*ctx, seccomp_export_pfc, "seccomp_export_pfc");
}

}  // namespace soyaos::comet
