// The observer: turns each seccomp notification into an answer and, when the agent tried
// something its manifest does not declare, a violation.
//
// It never widens access. Its answers are either CONTINUE (the kernel then decides, with
// mounts and Landlock in force), an error on the agent's behalf (a denial), or, for a
// read-only open of a /proc file the runtime layer serves, a file of the supervisor's own
// rendering (the kernel never resolves that path, so a racing agent gains nothing). It reads the
// agent's memory once, before deciding, and never again after. A racing agent can at most
// make a violation go unreported (the kernel still refuses) or deny itself something.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "comet/seccomp_notify.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "policy/policy.h"

namespace soyaos::supervisor {

struct Violation {
  std::string surface;         // network | fs | exec | time
  std::string resource;        // sandbox path, "fork", "clock:CLOCK_REALTIME", ...
  std::string syscall;         // "openat"
  std::string errno_name;      // "ENOENT"
  std::string manifest_entry;  // key path of the closest entry, or "no match"
  std::string access;          // fs only: read | write
  int pid = 0;                 // the agent thread's pid inside the sandbox, when known
  std::string detail;          // why, when the resource alone does not say (network checks)
};

struct Decision {
  bool deny = false;  // respond with -err instead of CONTINUE
  int err = 0;
  std::optional<Violation> violation;
  // A read-only open of a file the runtime layer serves (/proc/stat, ...): the supervisor
  // answers with its own rendering of that file instead of letting the open run.
  std::string serve;
  bool serve_cloexec = false;
  // sysinfo(2): the supervisor writes the agent's view (policy::agent_sysinfo) into the
  // buffer the agent passed and completes the syscall with 0; the kernel never runs it.
  bool answer_sysinfo = false;
};

// How the observer reads the agent's side of the world. Implemented over /proc and
// process_vm_readv by ProcAgentView; tests may supply a real process too.
class AgentView {
 public:
  virtual ~AgentView() = default;
  virtual std::optional<std::string> read_string(const comet::Notification& n, uint64_t addr) = 0;
  virtual bool read_bytes(const comet::Notification& n, uint64_t addr, void* out, size_t len) = 0;
  // readlink of /proc/PID/<what> ("cwd", "fd/3", "exe") for the notifying thread. The
  // error's errno is ENAMETOOLONG when the target is longer than PATH_MAX (the kernel
  // cannot name it): the observer then fails closed.
  virtual Result<std::string> proc_link(const comet::Notification& n, const std::string& what) = 0;
  // readlink of a sandbox path, resolved in the sandbox's root: an error when it is not a
  // symlink (EINVAL, ENOENT...) and ENAMETOOLONG when the path is too long to look up.
  virtual Result<std::string> sandbox_readlink(const std::string& sandbox_path) = 0;
  // True when a directory exists at this (resolved) sandbox path.
  virtual bool sandbox_is_dir(const std::string& sandbox_path) = 0;
};

class ProcAgentView final : public AgentView {
 public:
  ProcAgentView(const UniqueFd& listener, pid_t agent_pid);
  std::optional<std::string> read_string(const comet::Notification& n, uint64_t addr) override;
  bool read_bytes(const comet::Notification& n, uint64_t addr, void* out, size_t len) override;
  Result<std::string> proc_link(const comet::Notification& n, const std::string& what) override;
  Result<std::string> sandbox_readlink(const std::string& sandbox_path) override;
  bool sandbox_is_dir(const std::string& sandbox_path) override;

 private:
  bool open_root();
  const UniqueFd& listener_;
  pid_t agent_pid_;
  UniqueFd root_;  // /proc/AGENT/root, opened lazily after exec
};

class Observer {
 public:
  explicit Observer(const policy::Policy& policy) : policy_(policy) {}
  Decision decide(const comet::Notification& n, AgentView& view);
  [[nodiscard]] const policy::Policy& policy() const { return policy_; }

 private:
  Decision on_exec(const comet::Notification& n, AgentView& view, const char* name, int dirfd_arg,
                   int path_arg);
  Decision on_path(const comet::Notification& n, AgentView& view);
  Decision on_time(const comet::Notification& n, AgentView& view);
  Decision on_bind(const comet::Notification& n, AgentView& view);
  // clone3: a process is refused (EPERM) and reported; a thread gets ENOSYS (glibc falls back).
  Decision on_clone3(const comet::Notification& n, AgentView& view);
  // chmod/fchmod/fchmodat/fchmodat2 after the write check `d`: a set-id `mode` is refused
  // (EPERM) and reported wherever the file is; `fd` names an fd target for the report.
  Decision mode_change(const comet::Notification& n, AgentView& view, Decision d, uint64_t mode, int fd);
  Decision check_path(const comet::Notification& n, AgentView& view, const char* syscall,
                      int dirfd, uint64_t path_addr, bool write, bool follow_final,
                      bool open_for_read = false);
  Decision check_raw(const comet::Notification& n, AgentView& view, const char* syscall, int dirfd,
                     const std::string& raw, bool write, bool follow_final, bool open_for_read = false);
  // A change to the file an fd designates (fchmod, fchown, ftruncate, fsetxattr, futimens).
  Decision check_fd(const comet::Notification& n, AgentView& view, const char* syscall, int fd);
  Decision check_resolved(const comet::Notification& n, AgentView& view, const char* syscall,
                          const std::string& path, bool write, bool open_for_read);
  // The path cannot be resolved (a working directory or fd beyond PATH_MAX): deny and
  // report rather than let the kernel decide unseen (fail closed).
  Decision unresolvable(const comet::Notification& n, const char* syscall, const std::string& raw,
                        bool write);

  const policy::Policy& policy_;
  bool runtime_started_ = false;  // the Comet's own execve of the runtime has been answered
  std::string last_resolved_;     // the path check_resolved last decided on (this notification's)
};

// Pure helpers, exposed for tests.
// Lexical normalisation of an absolute path: "//", ".", ".." folded ("/a/../../b" -> "/b").
std::string normalise(const std::string& absolute_path);
// True when `path` is `prefix`'s ancestor or equal ("/" and "/workdir" for "/workdir/out").
bool is_ancestor_or_self(const std::string& path, const std::string& prefix);
const char* syscall_name(int nr);
std::string errno_name(int err);

}  // namespace soyaos::supervisor
