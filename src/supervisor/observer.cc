#include "supervisor/observer.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/fscrypt.h>
#include <linux/fsverity.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string_view>
#include <vector>

#include "comet/seccomp_filter.h"
#include "manifest/manifest.h"
#include "policy/runtime_layer.h"

namespace soyaos::supervisor {
namespace {

using comet::Notification;
using manifest::path_covers;

constexpr int kMaxLinkHops = 40;  // as the kernel's MAXSYMLINKS

// x86_64 numbers the Debian 12 headers (linux-libc-dev 6.1) do not define.
constexpr long kNrFchmodat2 = 452;    // (dirfd, path, mode, flags), Linux 6.6
constexpr long kNrSetxattrat = 463;   // (dirfd, path, at_flags, name, args, size), Linux 6.13
constexpr long kNrRemovexattrat = 466;  // (dirfd, path, at_flags, name), Linux 6.13
constexpr long kNrFileSetattr = 469;  // (dirfd, path, fsxattr, size, at_flags), Linux 6.17
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

// Objects outside the filesystem (pipe:[…], socket:[…], anon_inode:…) reached through
// /proc/self/fd: the agent already holds them, reopening them is not a path access.
constexpr const char* kAnonymous = "<anonymous>";

// Device nodes that accept writes without reaching anything (C2's minimal /dev).
const char* const kWritableDevices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                        "/dev/urandom"};

int as_fd(uint64_t arg) { return static_cast<int>(static_cast<int32_t>(arg & 0xffffffffU)); }

bool covered_by(const std::vector<std::string>& prefixes, const std::string& path) {
  for (const auto& p : prefixes) {
    if (path_covers(p, path)) return true;
  }
  return false;
}

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, size_t from) {
  std::string out;
  for (size_t i = from; i < parts.size(); ++i) out += "/" + parts[i];
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

int sandbox_pid_of(pid_t host_tid) {
  std::ifstream status("/proc/" + std::to_string(host_tid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) == 0) {
      auto last = line.find_last_of(" \t");
      return static_cast<int>(std::strtol(line.c_str() + last + 1, nullptr, 10));
    }
  }
  return 0;
}

// The inode-changing ioctl requests the filter notifies, for the report.
const char* inode_ioctl_name(uint64_t request) {
  switch (static_cast<uint32_t>(request)) {
    case FS_IOC_SETFLAGS: return "FS_IOC_SETFLAGS";
    case FS_IOC32_SETFLAGS: return "FS_IOC32_SETFLAGS";
    case FS_IOC_SETVERSION: return "FS_IOC_SETVERSION";
    case FS_IOC32_SETVERSION: return "FS_IOC32_SETVERSION";
    case FS_IOC_FSSETXATTR: return "FS_IOC_FSSETXATTR";
    case FS_IOC_ENABLE_VERITY: return "FS_IOC_ENABLE_VERITY";
    case FS_IOC_SET_ENCRYPTION_POLICY: return "FS_IOC_SET_ENCRYPTION_POLICY";
    default: return "request";
  }
}

const char* clock_name(uint64_t id) {
  switch (static_cast<int>(id)) {
    case CLOCK_REALTIME: return "CLOCK_REALTIME";
    case CLOCK_MONOTONIC: return "CLOCK_MONOTONIC";
    case CLOCK_TAI: return "CLOCK_TAI";
    case CLOCK_BOOTTIME: return "CLOCK_BOOTTIME";
    default: return "CLOCK_OTHER";
  }
}

}  // namespace

std::string normalise(const std::string& absolute_path) {
  std::vector<std::string> out;
  for (auto& part : split(absolute_path)) {
    if (part == ".") continue;
    if (part == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(part);
  }
  std::string s = join(out, 0);
  return s.empty() ? "/" : s;
}

bool is_ancestor_or_self(const std::string& path, const std::string& prefix) {
  return path_covers(path, prefix) || path == "/";
}

const char* syscall_name(int nr) {
  static std::map<int, std::string> cache;
  auto it = cache.find(nr);
  if (it == cache.end()) {
    const char* name = comet::syscall_name(nr);  // libseccomp's names, tabled at build time
    it = cache.emplace(nr, name != nullptr ? std::string(name) : "syscall_" + std::to_string(nr)).first;
  }
  return it->second.c_str();
}

std::string errno_name(int err) {
  const char* name = ::strerrorname_np(err);
  return name != nullptr ? name : "E" + std::to_string(err);
}

// ---- ProcAgentView ---------------------------------------------------------------------

ProcAgentView::ProcAgentView(const UniqueFd& listener, pid_t agent_pid)
    : listener_(listener), agent_pid_(agent_pid) {}

std::optional<std::string> ProcAgentView::read_string(const Notification& n, uint64_t addr) {
  if (addr == 0) return std::nullopt;
  auto s = comet::read_agent_string(listener_, n.id, static_cast<pid_t>(n.pid), addr);
  if (!s) return std::nullopt;
  return std::move(s.value());
}

bool ProcAgentView::read_bytes(const Notification& n, uint64_t addr, void* out, size_t len) {
  if (addr == 0) return false;
  struct iovec local {out, len};
  struct iovec remote {reinterpret_cast<void*>(addr), len};  // NOLINT(performance-no-int-to-ptr)
  ssize_t got = ::process_vm_readv(static_cast<pid_t>(n.pid), &local, 1, &remote, 1, 0);
  return got == static_cast<ssize_t>(len) && comet::notification_valid(listener_, n.id);
}

Result<std::string> ProcAgentView::proc_link(const Notification& n, const std::string& what) {
  std::string path = "/proc/" + std::to_string(n.pid) + "/" + what;
  char buf[PATH_MAX];
  ssize_t len = ::readlink(path.c_str(), buf, sizeof buf);
  // The kernel names a working directory or file deeper than a page ENAMETOOLONG.
  if (len < 0) return errno_error("readlink " + path);
  if (static_cast<size_t>(len) >= sizeof buf) return make_error("readlink " + path, ENAMETOOLONG);
  return std::string(buf, static_cast<size_t>(len));
}

bool ProcAgentView::open_root() {
  if (!root_) {
    std::string root = "/proc/" + std::to_string(agent_pid_) + "/root";
    root_.reset(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  }
  return root_.valid();
}

bool ProcAgentView::sandbox_is_dir(const std::string& sandbox_path) {
  if (!open_root()) return false;
  std::string rel = sandbox_path.size() > 1 ? sandbox_path.substr(1) : ".";
  struct stat st {};
  return ::fstatat(root_.get(), rel.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode);
}

Result<std::string> ProcAgentView::sandbox_readlink(const std::string& sandbox_path) {
  if (!open_root()) return errno_error("open /proc/" + std::to_string(agent_pid_) + "/root");
  std::string rel = sandbox_path.size() > 1 ? sandbox_path.substr(1) : ".";
  char buf[PATH_MAX];
  ssize_t len = ::readlinkat(root_.get(), rel.c_str(), buf, sizeof buf);
  if (len < 0) return errno_error("readlink " + sandbox_path);
  if (static_cast<size_t>(len) >= sizeof buf) return make_error("readlink " + sandbox_path, ENAMETOOLONG);
  return std::string(buf, static_cast<size_t>(len));
}

// ---- Observer --------------------------------------------------------------------------

namespace {

// Walks the path the way the kernel does, component by component, in the sandbox's view:
// ".." applies to what has been resolved so far, /proc magic links (root, cwd, exe, fd/N;
// every pid in the sandbox is the agent's own) and symlinks are followed where they stand.
// Symlinks inside the runtime layer are the host's own: they are not read (the kernel
// refuses whatever they lead to that is not in the sandbox), except under /dev and /proc.
// nullopt when the walk cannot be done (a link or a prefix longer than PATH_MAX): the
// caller fails closed.
std::optional<std::string> resolve(const Notification& n, AgentView& view, const policy::Policy& policy,
                                   const std::string& path, bool follow_final) {
  // `resolved` and `prefix` (its components joined, "/a/b") change together: the candidate
  // of each component is prefix + "/" + c, one copy, not a join of every component again
  // (a path 600 directories deep made each syscall quadratic in its depth).
  std::vector<std::string> resolved;
  std::string prefix;
  auto push = [&](const std::string& c) {
    prefix += '/';
    prefix += c;
    resolved.push_back(c);
  };
  auto pop = [&] {
    prefix.resize(prefix.size() - resolved.back().size() - 1);
    resolved.pop_back();
  };
  std::vector<std::string> pending = split(path);
  std::reverse(pending.begin(), pending.end());  // a stack: next component at the back
  int hops = 0;
  auto push_target = [&](const std::string& target) {
    auto parts = split(target);
    if (!target.empty() && target[0] == '/') {
      resolved.clear();
      prefix.clear();
    }
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) pending.push_back(*it);
    ++hops;
  };
  while (!pending.empty()) {
    std::string c = pending.back();
    pending.pop_back();
    if (c == ".") continue;
    if (c == "..") {
      if (!resolved.empty()) pop();
      continue;
    }
    const bool last = pending.empty();
    if (hops > kMaxLinkHops) {
      push(c);
      continue;
    }
    // /proc/<self|thread-self|N>[/task/N]/<magic>
    bool in_proc_pid = (resolved.size() == 2 || (resolved.size() == 4 && resolved[2] == "task")) &&
                       resolved[0] == "proc" &&
                       (resolved[1] == "self" || resolved[1] == "thread-self" || all_digits(resolved[1]));
    if (in_proc_pid && (c == "root" || c == "cwd" || c == "exe" || (c == "fd" && !last))) {
      Result<std::string> target = std::string("/");  // "root": the sandbox's own root
      if (c == "fd") {
        std::string num = pending.back();
        if (!all_digits(num)) {
          push(c);
          continue;
        }
        pending.pop_back();
        target = view.proc_link(n, "fd/" + num);
      } else if (c != "root") {
        target = view.proc_link(n, c);
      }
      if (!target) {
        if (target.error().err == ENAMETOOLONG) return std::nullopt;
        return path;  // no such fd or task: the kernel refuses it too
      }
      if (target->empty() || (*target)[0] != '/') return std::string(kAnonymous);
      push_target(*target);
      continue;
    }
    std::string candidate = prefix + "/" + c;
    bool trusted = covered_by(policy.fs.runtime, candidate) && !path_covers("/dev", candidate) &&
                   !path_covers("/proc", candidate);
    // A component longer than NAME_MAX fails in the kernel too (ENAMETOOLONG, no access).
    if (!trusted && (!last || follow_final) && c.size() <= NAME_MAX) {
      auto link = view.sandbox_readlink(candidate);
      if (link) {
        push_target(*link);
        continue;
      }
      // The path so far is too long for us to look up, though the kernel (walking
      // relative to a directory) may reach it: we cannot tell where it leads.
      if (link.error().err == ENAMETOOLONG) return std::nullopt;
    }
    push(c);
  }
  return prefix.empty() ? "/" : prefix;
}

// /proc/PID/{mountinfo,mounts,mountstats} name the host path of every bind mount's source
// (the mount's root within the host filesystem): the host's directory structure would
// show. They are refused like undeclared paths.
bool reveals_host_mounts(const std::string& path) {
  auto parts = split(path);
  if (parts.size() < 3 || parts[0] != "proc") return false;
  size_t i = 2;
  if (parts.size() >= 5 && parts[2] == "task") i = 4;
  if (i + 1 != parts.size()) return false;
  return parts[i] == "mountinfo" || parts[i] == "mounts" || parts[i] == "mountstats";
}

// procfs shows only the sandbox's own processes (subset=pid): their entries are the
// agent's own. Anything else under /proc is readable only when the runtime layer has a row
// for it (served or tolerated, runtime_layer.cc); the rest is refused and reported.
bool readable_proc(const policy::Policy& p, const std::string& path) {
  auto parts = split(path);
  if (parts.size() < 2) return true;  // /proc itself
  if (parts[1] == "self" || parts[1] == "thread-self" || all_digits(parts[1])) return true;
  for (const auto& prefix : p.fs.runtime) {
    if (prefix == "/proc" || !path_covers("/proc", prefix)) continue;
    if (path_covers(prefix, path) || is_ancestor_or_self(path, prefix)) return true;
  }
  return false;
}

bool readable(const policy::Policy& p, const std::string& path) {
  if (path == kAnonymous) return true;
  if (reveals_host_mounts(path)) return false;
  if (path_covers("/proc", path)) return readable_proc(p, path);
  for (const auto* list : {&p.fs.runtime, &p.fs.read, &p.fs.write}) {
    for (const auto& prefix : *list) {
      if (path_covers(prefix, path) || is_ancestor_or_self(path, prefix)) return true;
    }
  }
  return false;
}

// A directory the agent sees only because a declared path lies below it ("/", "/etc").
// Landlock grants no READ_DIR there, so opening it for reading (to list it) fails with
// EACCES: the observer says so first and reports it, rather than leave a refusal
// unreported (issue #15).
bool ancestor_only(const policy::Policy& p, const std::string& path) {
  if (path == kAnonymous) return false;
  for (const auto* list : {&p.fs.runtime, &p.fs.read, &p.fs.write}) {
    if (covered_by(*list, path)) return false;
  }
  return true;  // readable() held, so it is an ancestor of some declared path
}

bool writable(const policy::Policy& p, const std::string& path) {
  if (path == kAnonymous || covered_by(p.fs.write, path)) return true;
  for (const char* dev : kWritableDevices) {
    if (path == dev) return true;
  }
  return false;
}

std::string closest_entry(const policy::Policy& p, const std::string& path, bool write) {
  // A write to a readable path came closest to the read entry that covers it.
  if (write) {
    for (const auto& e : p.fs.declared_read) {
      if (path_covers(e.path, path)) return e.key_path;
    }
  }
  return "no match";
}

}  // namespace

Decision Observer::unresolvable(const Notification& n, const char* syscall, const std::string& raw, bool write) {
  // EACCES for reads too: the path may well exist; the agent is refused by us, not told
  // that it is absent.
  Decision d{true, EACCES, Violation{}};
  auto& v = *d.violation;
  v.surface = "fs";
  v.resource = "<unresolvable>/" + raw;
  v.syscall = syscall;
  v.errno_name = errno_name(EACCES);
  v.manifest_entry = "no match";
  v.access = write ? "write" : "read";
  v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
  v.detail = "the working directory, fd or link is longer than PATH_MAX: the path cannot be resolved, "
             "so it is refused (fail closed)";
  return d;
}

Decision Observer::check_resolved(const Notification& n, AgentView& view, const char* syscall,
                                  const std::string& path, bool write, bool open_for_read) {
  // C2: reading an undeclared path is ENOENT (nothing of the host shows); writing outside
  // fs.write is EACCES (never EROFS).
  last_resolved_ = path;
  int err = write ? EACCES : ENOENT;
  bool allowed = write ? writable(policy_, path) : readable(policy_, path);
  // (Where nothing exists, e.g. /sys above a runtime probe, the kernel says ENOENT itself.)
  if (allowed && open_for_read && ancestor_only(policy_, path) && view.sandbox_is_dir(path)) {
    allowed = false;
    err = EACCES;  // what Landlock answers: the directory exists, listing it is refused
  }
  if (allowed) return {};
  // A runtime that creates a file the layer leaves absent (libuuid's clock file): ENOENT, as on
  // a host without that directory, and not the agent's violation (runtime_layer.cc).
  if (write && policy::is_create_probe(path, policy_.runtime)) return Decision{true, ENOENT, std::nullopt};
  Decision d;
  d.deny = true;
  d.err = err;
  Violation v;
  v.surface = "fs";
  v.resource = path;
  v.syscall = syscall;
  v.errno_name = errno_name(d.err);
  v.manifest_entry = closest_entry(policy_, path, write);
  v.access = write ? "write" : "read";
  v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
  d.violation = std::move(v);
  return d;
}

Decision Observer::check_path(const Notification& n, AgentView& view, const char* syscall,
                              int dirfd, uint64_t path_addr, bool write, bool follow_final, bool open_for_read) {
  auto raw = view.read_string(n, path_addr);
  // Unreadable (EFAULT), longer than PATH_MAX or stale: the kernel fails it the same way
  // (EFAULT, ENAMETOOLONG) before any access, or the thread is gone.
  if (!raw) return {};
  return check_raw(n, view, syscall, dirfd, *raw, write, follow_final, open_for_read);
}

Decision Observer::check_raw(const Notification& n, AgentView& view, const char* syscall, int dirfd,
                             const std::string& raw, bool write, bool follow_final, bool open_for_read) {
  std::string absolute = raw;
  if (absolute.empty() || absolute[0] != '/') {
    auto base = view.proc_link(n, dirfd == AT_FDCWD ? "cwd" : "fd/" + std::to_string(dirfd));
    if (!base) {
      if (base.error().err == ENAMETOOLONG) return unresolvable(n, syscall, raw, write);
      return {};  // no such fd: the kernel answers EBADF
    }
    if (base->empty() || (*base)[0] != '/') return {};  // relative to an anonymous fd: ENOTDIR
    absolute = *base + "/" + absolute;
  }
  auto path = resolve(n, view, policy_, absolute, follow_final);
  if (!path) return unresolvable(n, syscall, absolute, write);
  return check_resolved(n, view, syscall, *path, write, open_for_read);
}

Decision Observer::check_fd(const Notification& n, AgentView& view, const char* syscall, int fd) {
  auto target = view.proc_link(n, "fd/" + std::to_string(fd));
  if (!target) {
    if (target.error().err == ENAMETOOLONG) return unresolvable(n, syscall, "fd/" + std::to_string(fd), true);
    return {};  // not an open fd: the kernel answers EBADF
  }
  std::string path = *target;
  // Pipes, sockets, anon inodes ("pipe:[…]") and memfds ("/memfd:NAME (deleted)") are no
  // path of the sandbox; a deleted file keeps its path with a suffix.
  if (path.empty() || path[0] != '/' || path.rfind("/memfd:", 0) == 0) return {};
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.size() > kDeleted.size() && path.compare(path.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
    path.resize(path.size() - kDeleted.size());
  }
  return check_resolved(n, view, syscall, normalise(path), /*write=*/true, /*open_for_read=*/false);
}

Decision Observer::on_bind(const Notification& n, AgentView& view) {
  // bind(fd, addr, len): only a pathname AF_UNIX address creates something in the
  // filesystem (a socket file); abstract and unnamed ones, and other families, do not.
  const uint64_t len = n.args[2];
  sa_family_t family = 0;
  if (len <= sizeof family || !view.read_bytes(n, n.args[1], &family, sizeof family)) return {};
  if (family != AF_UNIX) return {};
  char sun_path[sizeof(sockaddr_un::sun_path)] = {};
  const size_t path_len = std::min<uint64_t>(len - sizeof family, sizeof sun_path);
  if (!view.read_bytes(n, n.args[1] + sizeof family, sun_path, path_len)) return {};
  if (sun_path[0] == '\0') return {};  // abstract: the network namespace's own
  std::string raw(sun_path, strnlen(sun_path, path_len));
  return check_raw(n, view, "bind", AT_FDCWD, raw, /*write=*/true, /*follow_final=*/false);
}

Decision Observer::on_exec(const Notification& n, AgentView& view, const char* name, int dirfd_arg,
                           int path_arg) {
  if (!runtime_started_) {
    // The first execve is the Comet's own, of the runtime: it runs before the agent exists.
    runtime_started_ = true;
    return {};
  }
  Decision d{true, EACCES, Violation{}};
  auto& v = *d.violation;
  v.surface = "exec";
  v.syscall = name;
  v.errno_name = errno_name(EACCES);
  v.manifest_entry = "no match";
  auto path = view.read_string(n, n.args[path_arg]);
  if (path && !path->empty() && (*path)[0] == '/') {
    v.resource = normalise(*path);
  } else {
    int dirfd = dirfd_arg < 0 ? AT_FDCWD : as_fd(n.args[dirfd_arg]);
    auto base = view.proc_link(n, dirfd == AT_FDCWD ? "cwd" : "fd/" + std::to_string(dirfd));
    std::string b = base ? *base : "?";
    v.resource = (path && !path->empty()) ? normalise(b + "/" + *path) : b;  // fexecve: the fd's object
  }
  v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
  return d;
}

Decision Observer::on_time(const Notification& n, AgentView& view) {
  std::string resource;
  switch (n.nr) {
    case SYS_clock_settime:
      resource = std::string("clock:") + clock_name(n.args[0]);
      break;
    case SYS_settimeofday:
      resource = "clock:CLOCK_REALTIME";
      break;
    case SYS_adjtimex:
    case SYS_clock_adjtime: {
      // Reading the clock through adjtimex (modes == 0) is allowed; the kernel checks
      // CAP_SYS_TIME itself for any change, so a racing agent still cannot set it.
      uint64_t buf = n.nr == SYS_adjtimex ? n.args[0] : n.args[1];
      unsigned int modes = 0;
      if (!view.read_bytes(n, buf, &modes, sizeof modes)) return {};
      if (modes == 0) return {};
      resource = std::string("clock:") +
                 (n.nr == SYS_adjtimex ? "CLOCK_REALTIME" : clock_name(n.args[0]));
      break;
    }
    default:
      return {};
  }
  Decision d{true, EPERM, Violation{}};
  auto& v = *d.violation;
  v.surface = "time";
  v.resource = resource;
  v.syscall = syscall_name(n.nr);
  v.errno_name = errno_name(EPERM);
  v.manifest_entry = "no match";
  v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
  return d;
}

Decision Observer::mode_change(const Notification& n, AgentView& view, Decision d, uint64_t mode, int fd) {
  // The kernel reads the mode as umode_t from the register: these are the bits it applies.
  if (d.deny || (mode & (S_ISUID | S_ISGID)) == 0) return d;
  // Refused wherever the file is (a pipe, a memfd or a file in fs.write alike): C5 allows no
  // set-id file, and the manifest cannot grant one. EPERM, as a process without CAP_FSETID
  // would get for a file it does not own.
  Decision out{true, EPERM, Violation{}};
  auto& v = *out.violation;
  v.surface = "fs";
  v.resource = last_resolved_;
  if (v.resource.empty() && fd >= 0) {
    auto link = view.proc_link(n, "fd/" + std::to_string(fd));
    if (link) v.resource = *link;  // pipe:[N], /memfd:NAME (deleted)
  }
  if (v.resource.empty()) v.resource = "<unresolved>";
  v.syscall = syscall_name(n.nr);
  v.errno_name = errno_name(EPERM);
  v.manifest_entry = "no match";
  for (const auto& e : policy_.fs.declared_write) {
    if (path_covers(e.path, v.resource)) v.manifest_entry = e.key_path;  // allowed there, but not set-id
  }
  v.access = "write";
  v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
  char octal[16];
  (void)std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode & 07777));
  v.detail = std::string("set-id mode ") + octal + " refused: no set-uid or set-gid file may be made in a Comet";
  return out;
}

Decision Observer::on_clone3(const Notification& n, AgentView& view) {
  // clone3(struct clone_args*, size): the flags are the struct's first u64. The answer is
  // never CONTINUE, so a thread racing on that memory can change the report, not the outcome.
  uint64_t flags = 0;
  const bool read = n.args[1] >= sizeof flags && view.read_bytes(n, n.args[0], &flags, sizeof flags);
  if (!read || (flags & CLONE_THREAD) != 0) return Decision{true, ENOSYS, std::nullopt};  // glibc: clone(2)
  Decision d{true, EPERM, Violation{}};
  auto& v = *d.violation;
  v.surface = "exec";
  v.resource = "process";
  v.syscall = "clone3";
  v.errno_name = errno_name(EPERM);
  v.manifest_entry = "no match";
  v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
  return d;
}

Decision Observer::on_path(const Notification& n, AgentView& view) {
  const char* name = syscall_name(n.nr);
  const auto& a = n.args;
  auto open_like = [&](int dirfd, uint64_t path, uint64_t flags) {
    bool write = (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0;
    const bool o_path = (flags & O_PATH) != 0;
    if (o_path) write = false;
    bool follow = (flags & O_NOFOLLOW) == 0 && !((flags & O_CREAT) && (flags & O_EXCL));
    last_resolved_.clear();
    Decision d = check_path(n, view, name, dirfd, path, write, follow, /*open_for_read=*/!write && !o_path);
    // A plain read of a /proc file the runtime layer serves: answered with the supervisor's
    // rendering (O_PATH and O_DIRECTORY opens fall through to the kernel: ENOENT).
    if (!d.deny && !write && (flags & (O_PATH | O_DIRECTORY)) == 0 && policy::is_served_proc_file(last_resolved_)) {
      d.serve = last_resolved_;
      d.serve_cloexec = (flags & O_CLOEXEC) != 0;
    }
    return d;
  };
  // Changes the kernel would refuse anyway where they are allowed (no capability over
  // ownership, no extended attributes: docs/seccomp.md): EPERM there, unreported; outside
  // fs.write they are writes of the manifest's surface (EACCES, reported).
  auto policy_eperm = [](Decision d) {
    if (!d.deny) d = Decision{true, EPERM, std::nullopt};
    return d;
  };
  auto write_at = [&](int dirfd, uint64_t path, bool follow = false) {
    return check_path(n, view, name, dirfd, path, /*write=*/true, follow);
  };
  // The *at2-style calls: AT_SYMLINK_NOFOLLOW, and AT_EMPTY_PATH with "" for the fd's own file
  // (the cwd's when the fd is AT_FDCWD).
  auto write_at_flags = [&](int dirfd, uint64_t path, uint64_t at_flags) {
    if ((at_flags & AT_EMPTY_PATH) != 0) {
      auto raw = view.read_string(n, path);
      if (raw && raw->empty()) {
        return dirfd == AT_FDCWD ? check_raw(n, view, name, AT_FDCWD, ".", /*write=*/true, /*follow_final=*/true)
                                 : check_fd(n, view, name, dirfd);
      }
    }
    return write_at(dirfd, path, (at_flags & AT_SYMLINK_NOFOLLOW) == 0);
  };
  last_resolved_.clear();
  auto both = [](Decision first, const std::function<Decision()>& second) {
    return first.deny ? first : second();
  };
  switch (n.nr) {
    case SYS_open: return open_like(AT_FDCWD, a[0], a[1]);
    case SYS_openat: return open_like(as_fd(a[0]), a[1], a[2]);
    case SYS_openat2: {
      struct open_how how {};
      if (!view.read_bytes(n, a[2], &how, sizeof how.flags)) return {};
      return open_like(as_fd(a[0]), a[1], how.flags);
    }
    case SYS_creat: return open_like(AT_FDCWD, a[0], O_CREAT | O_WRONLY | O_TRUNC);
    case SYS_mkdir:
    case SYS_rmdir:
    case SYS_unlink:
    case SYS_mknod: return write_at(AT_FDCWD, a[0]);
    case SYS_truncate: return write_at(AT_FDCWD, a[0], /*follow=*/true);
    case SYS_mkdirat:
    case SYS_unlinkat:
    case SYS_mknodat: return write_at(as_fd(a[0]), a[1]);
    case SYS_rename: return both(write_at(AT_FDCWD, a[0]), [&] { return write_at(AT_FDCWD, a[1]); });
    case SYS_renameat:
    case SYS_renameat2:
      return both(write_at(as_fd(a[0]), a[1]), [&] { return write_at(as_fd(a[2]), a[3]); });
    case SYS_link:
      return both(check_path(n, view, name, AT_FDCWD, a[0], false, false),
                  [&] { return write_at(AT_FDCWD, a[1]); });
    case SYS_linkat:
      return both(check_path(n, view, name, as_fd(a[0]), a[1], false, (a[4] & AT_SYMLINK_FOLLOW) != 0),
                  [&] { return write_at(as_fd(a[2]), a[3]); });
    case SYS_utime:
    case SYS_utimes: return write_at(AT_FDCWD, a[0], /*follow=*/true);
    case SYS_chmod: return mode_change(n, view, write_at(AT_FDCWD, a[0], /*follow=*/true), a[1], -1);
    case SYS_fchmodat: return mode_change(n, view, write_at(as_fd(a[0]), a[1], (a[3] & AT_SYMLINK_NOFOLLOW) == 0), a[2], -1);
    case kNrFchmodat2:
      return mode_change(n, view, write_at_flags(as_fd(a[0]), a[1], a[3]), a[2],
                         (a[3] & AT_EMPTY_PATH) != 0 ? as_fd(a[0]) : -1);
    case SYS_fchmod: return mode_change(n, view, check_fd(n, view, name, as_fd(a[0])), a[1], as_fd(a[0]));
    case kNrFileSetattr: return write_at_flags(as_fd(a[0]), a[1], a[4]);
    case SYS_ftruncate: return check_fd(n, view, name, as_fd(a[0]));
    case SYS_ioctl: {
      // Only the inode-changing requests are notified (seccomp_filter.cc).
      Decision d = check_fd(n, view, name, as_fd(a[0]));
      if (d.violation) d.violation->detail = std::string("ioctl ") + inode_ioctl_name(a[1]) + " changes the file";
      return d;
    }
    case SYS_futimesat: return a[1] == 0 ? check_fd(n, view, name, as_fd(a[0])) : write_at(as_fd(a[0]), a[1], true);
    case SYS_utimensat:
      // A NULL path changes the fd's own file (futimens).
      return a[1] == 0 ? check_fd(n, view, name, as_fd(a[0]))
                       : write_at(as_fd(a[0]), a[1], (a[3] & AT_SYMLINK_NOFOLLOW) == 0);
    case SYS_chown:
    case SYS_setxattr:
    case SYS_removexattr: return policy_eperm(write_at(AT_FDCWD, a[0], /*follow=*/true));
    case SYS_lchown:
    case SYS_lsetxattr:
    case SYS_lremovexattr: return policy_eperm(write_at(AT_FDCWD, a[0]));
    case SYS_fchownat: return policy_eperm(write_at(as_fd(a[0]), a[1], (a[4] & AT_SYMLINK_NOFOLLOW) == 0));
    case SYS_fchown:
    case SYS_fsetxattr:
    case SYS_fremovexattr: return policy_eperm(check_fd(n, view, name, as_fd(a[0])));
    case kNrSetxattrat:
    case kNrRemovexattrat: return policy_eperm(write_at_flags(as_fd(a[0]), a[1], a[2]));
    case SYS_symlink: return write_at(AT_FDCWD, a[1]);
    case SYS_symlinkat: return write_at(as_fd(a[1]), a[2]);
    default: return {};
  }
}

Decision Observer::decide(const Notification& n, AgentView& view) {
  switch (n.nr) {
    case SYS_execve: return on_exec(n, view, "execve", -1, 0);
    case SYS_execveat: return on_exec(n, view, "execveat", 0, 1);
    case SYS_fork:
    case SYS_vfork:
    case SYS_clone: {
      // C3: only threads may be created; a new process is refused with EPERM.
      Decision d{true, EPERM, Violation{}};
      auto& v = *d.violation;
      v.surface = "exec";
      v.resource = "process";
      v.syscall = syscall_name(n.nr);
      v.errno_name = errno_name(EPERM);
      v.manifest_entry = "no match";
      v.pid = sandbox_pid_of(static_cast<pid_t>(n.pid));
      return d;
    }
    case SYS_clone3: return on_clone3(n, view);
    case SYS_clock_settime:
    case SYS_settimeofday:
    case SYS_adjtimex:
    case SYS_clock_adjtime: return on_time(n, view);
    case SYS_bind: return on_bind(n, view);
    case SYS_sysinfo: {
      Decision d;
      d.answer_sysinfo = true;
      return d;
    }
    default: return on_path(n, view);
  }
}

}  // namespace soyaos::supervisor
