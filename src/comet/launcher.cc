#include "comet/launcher.h"

#include "common/clone_gate.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <vector>

#include "comet/credentials.h"
#include "comet/landlock.h"
#include "comet/mounts.h"

namespace soyaos::comet {
namespace {

constexpr char kMsgFailure = kControlSetupFailed;
constexpr char kMsgReady = kControlReady;  // carries [listener, out_dir] as SCM_RIGHTS
constexpr char kMsgExecFailed = kControlExecFailed;

void send_failure(int sock, const char* layer, const Error& e) {
  std::string body = std::string(layer) + '\0' + e.message;
  ControlHeader h{kMsgFailure, e.err};
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  msg += body;
  (void)::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL);
}

[[noreturn]] void fail(int sock, const char* layer, const Error& e) {
  send_failure(sock, layer, e);
  ::_exit(125);
}

uint64_t clock_ns(clockid_t clock) {
  struct timespec ts {};
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }

// The Ready message carries, as SCM_RIGHTS, in this order: the seccomp listener,
// /workdir/out, the NFLOG socket, the DNS stub's UDP and TCP sockets, the gateway's IPv4
// listener, then the optional IPv6 gateway and proxy listeners (flags say which), then the
// UDP relays.
constexpr size_t kMaxPassedFds = 8 + kMaxUdpRelays;
struct ReadyMessage {
  ControlHeader header;
  uint64_t step_ns[kStepCount];
  uint64_t step_cpu_ns[kStepCount];  // the child's CPU time (from clone3) at each step's end
  uint32_t fd_count;
  uint8_t has_gateway6;
  uint8_t has_proxy;
  uint16_t relays;
};

Status send_fds(int sock, const std::vector<int>& fds, const ReadyMessage& ready) {
  ReadyMessage m = ready;
  struct iovec iov {&m, sizeof m};
  alignas(struct cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) return errno_error("send listener to supervisor");
  return {};
}

std::vector<LandlockRule> landlock_rules(const policy::Policy& p) {
  std::vector<LandlockRule> rules;
  auto add = [&](const std::string& path, FsAccess access) {
    struct stat st {};
    // Declared paths with nothing mounted there do not exist in the sandbox: no rule.
    if (::stat(path.c_str(), &st) == 0) rules.push_back({path, access});
  };
  for (const auto& path : p.fs.runtime) add(path, FsAccess::read_exec);
  for (const auto& path : p.fs.read) add(path, FsAccess::read_exec);
  for (const auto& path : p.fs.write) add(path, FsAccess::read_write);
  for (const char* dev : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}) {
    add(dev, FsAccess::read_write);
  }
  return rules;
}

// "Go" carries the mount sources the parent opened in our mount namespace
// (open_mount_sources through /proc/CHILD/root), in Policy::mounts order.
constexpr size_t kMaxSourceFds = 253;  // SCM_MAX_FD

Status send_go(int sock, const MountSources& sources) {
  std::vector<int> fds;
  for (const auto& s : sources.by_mount) {
    if (s.fd) fds.push_back(s.fd.get());
  }
  if (fds.size() > kMaxSourceFds) return make_error("mounts: more than 253 host sources", E2BIG);
  char go = 'G';
  struct iovec iov {&go, 1};
  std::vector<char> control(CMSG_SPACE(kMaxSourceFds * sizeof(int)), 0);
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
  }
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != 1) return errno_error("start the Comet's setup");
  return {};
}

Result<MountSources> receive_go(int sock, const policy::Policy& policy) {
  char go = 0;
  struct iovec iov {&go, 1};
  std::vector<char> control(CMSG_SPACE(kMaxSourceFds * sizeof(int)), 0);
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n != 1 || go != 'G') return make_error("no go from the supervisor");
  std::vector<int> fds;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const size_t at = fds.size();
    fds.resize(at + count);
    std::memcpy(fds.data() + at, CMSG_DATA(c), count * sizeof(int));
  }
  MountSources sources;
  sources.by_mount.resize(policy.mounts.size());
  size_t next = 0;
  for (size_t i = 0; i < policy.mounts.size(); ++i) {
    if (!needs_source(policy.mounts[i])) continue;
    if (next >= fds.size()) return make_error("mount sources missing");
    sources.by_mount[i].fd.reset(fds[next++]);
    struct stat st {};
    if (::fstat(sources.by_mount[i].fd.get(), &st) != 0) return errno_error("stat a mount source");
    sources.by_mount[i].is_dir = S_ISDIR(st.st_mode);
  }
  if (next != fds.size() || (msg.msg_flags & MSG_CTRUNC) != 0) return make_error("unexpected mount sources");
  return sources;
}

// The child, from clone to execve. Runs in a copy of the (single-threaded) supervisor's
// memory; every failure is reported on `sock` and ends the child.
[[noreturn]] void child_main(const policy::Policy& policy, const SeccompProgram& program,
                             const NetworkPlan& network_plan, bool pids_cgroup, int sock, int stdout_w,
                             int stderr_w) {
  // Wait for the parent to write our id maps.
  uint64_t steps[kStepCount] = {};
  uint64_t step_cpu[kStepCount] = {};  // bench/startup.sh: the CPU each layer costs the child
  auto mark = [&](SetupStep step) {
    steps[step] = now_ns();
    step_cpu[step] = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  };
  // A new session without a controlling terminal: TIOCSTI has nothing to inject into.
  // First, while the parent writes our id maps: with scheduler autogroups setsid() also
  // creates a task group, which costs a few milliseconds we can overlap.
  const bool new_session = ::setsid() >= 0;
  const int setsid_errno = errno;
  auto sources = receive_go(sock, policy);
  if (!sources) ::_exit(125);
  mark(kStepCloned);
  // The agent starts with the signal state any program expects: the supervisor blocks its
  // stop signals (for its signalfd) and ignores SIGPIPE, and both would survive execve.
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0 || ::signal(SIGPIPE, SIG_DFL) == SIG_ERR) {
    fail(sock, "signals", errno_error("reset the signal mask"));
  }

  if (::dup2(stdout_w, STDOUT_FILENO) < 0 || ::dup2(stderr_w, STDERR_FILENO) < 0) {
    fail(sock, "stdio", errno_error("dup2 output pipes"));
  }

  // We were born in the run's cgroup (launch_thread.h), and clone3's cgroup namespace is
  // rooted there. A fresh one rooted here again makes /proc/self/cgroup show "/" (nothing
  // of the host's tree) also where a kernel roots a CLONE_INTO_CGROUP child's namespace at
  // its parent's cgroup (v2); it costs microseconds.
  if (::unshare(CLONE_NEWCGROUP) != 0) fail(sock, "cgroup namespace", errno_error("unshare(CLONE_NEWCGROUP)"));
  if (auto s = become_sandbox_ids(policy); !s) fail(sock, "user namespace", s.error());
  if (auto s = bound_user_quotas(); !s) fail(sock, "user namespace", s.error());
  prefer_unpaced_loopback_tcp();  // needs the host's /proc: before the mounts replace it
  auto root = build_sandbox_root(policy, std::move(sources.value()));
  if (!root) fail(sock, "mounts", root.error());
  mark(kStepMounts);
  // Still holding CAP_NET_ADMIN over this netns (dropped with every other capability in
  // step 4), so the agent can never change what is set up here.
  auto network = setup_sandbox_network(network_plan);
  if (!network) fail(sock, "network", network.error());
  mark(kStepNetwork);

  if (::sethostname(policy.hostname.data(), policy.hostname.size()) != 0) {
    fail(sock, "uts namespace", errno_error("sethostname"));
  }
  if (::chdir(policy.cwd.c_str()) != 0) fail(sock, "mounts", errno_error("chdir " + policy.cwd));
  if (!new_session) fail(sock, "session", Error{setsid_errno, "setsid"});
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || ::dup2(devnull, STDIN_FILENO) < 0) {
    fail(sock, "stdio", errno_error("stdin from /dev/null"));
  }
  ::close(devnull);
  mark(kStepSession);

  // With a pids cgroup, RLIMIT_NPROC stays one above it as a backstop: the cgroup is then
  // what refuses the next thread (and counts it, for limit_exceeded), not the rlimit.
  policy::Limits rlimits = policy.limits;
  if (pids_cgroup) rlimits.pids += 1;
  if (auto s = apply_rlimits(rlimits); !s) fail(sock, "limits", s.error());
  mark(kStepLimits);
  if (auto s = drop_privileges(policy); !s) fail(sock, "credentials", s.error());
  // The credential change cleared any parent-death signal: set it again. (getppid() is 0
  // in a new PID namespace; a supervisor that died before this is caught when send_fds
  // below fails.)
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    fail(sock, "credentials", errno_error("PR_SET_PDEATHSIG"));
  }

  mark(kStepCredentials);
  if (auto s = apply_landlock(landlock_rules(policy)); !s) fail(sock, "landlock", s.error());
  mark(kStepLandlock);

  auto listener = install_agent_filter(program);
  if (!listener) fail(sock, "seccomp", listener.error());
  mark(kStepSeccomp);
  ReadyMessage ready{{kMsgReady, 0}, {}, {}, 0, 0, 0, 0};
  std::memcpy(ready.step_ns, steps, sizeof ready.step_ns);
  std::memcpy(ready.step_cpu_ns, step_cpu, sizeof ready.step_cpu_ns);
  std::vector<int> fds = {listener->get(),          root->out_dir.get(),      network->nflog.get(),
                          network->dns_udp.get(),   network->dns_tcp.get(),   network->gateway_tcp.get()};
  if (network->gateway_tcp6) {
    fds.push_back(network->gateway_tcp6.get());
    ready.has_gateway6 = 1;
  }
  if (network->proxy_tcp) {
    fds.push_back(network->proxy_tcp.get());
    ready.has_proxy = 1;
  }
  for (const auto& relay : network->udp_relay) fds.push_back(relay.get());
  ready.relays = static_cast<uint16_t>(network->udp_relay.size());
  ready.fd_count = static_cast<uint32_t>(fds.size());
  if (auto s = send_fds(sock, fds, ready); !s) ::_exit(125);
  listener->reset();
  root->out_dir.reset();
  *network = NetworkFds{};
  // Nothing of the supervisor's reaches the agent: every fd but 0-2 closes on exec.
  // SAFETY: close_range(2) marks all fds >= 3 close-on-exec; the control socket goes at exec.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) ::_exit(125);

  std::vector<char*> argv;
  for (const auto& a : policy.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : policy.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // The memory limit last: nothing is allocated between it and the new image.
  if (auto s = apply_memory_limit(policy.limits); !s) {
    ControlHeader h{kMsgExecFailed, s.error().err};
    (void)::send(sock, &h, sizeof h, MSG_NOSIGNAL);
    ::_exit(126);
  }
  ::execve(policy.executable.c_str(), argv.data(), envp.data());
  ControlHeader h{kMsgExecFailed, errno};
  (void)::send(sock, &h, sizeof h, MSG_NOSIGNAL);
  ::_exit(errno == ENOENT ? 127 : 126);
}

Result<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_error("pipe2");
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

// Reads the child's next control message. A Ready message yields its fds (into `comet`).
Status receive_ready(int sock, LaunchedComet& comet) {
  char buf[4096];
  struct iovec iov {buf, sizeof buf};
  alignas(struct cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))] = {};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno_error("receive from the Comet's setup");
  if (n < static_cast<ssize_t>(sizeof(ControlHeader))) {
    return make_error("sandbox setup: the child exited before reporting");
  }
  ControlHeader h{};
  std::memcpy(&h, buf, sizeof h);
  if (h.kind == kMsgFailure) {
    std::string body(buf + sizeof h, static_cast<size_t>(n) - sizeof h);
    auto nul = body.find('\0');
    std::string layer = body.substr(0, nul);
    std::string detail = nul == std::string::npos ? "" : body.substr(nul + 1);
    return make_error(layer + ": " + detail, h.err);
  }
  if (h.kind != kMsgReady || n != static_cast<ssize_t>(sizeof(ReadyMessage))) {
    return make_error("sandbox setup: unexpected message");
  }
  ReadyMessage ready{};
  std::memcpy(&ready, buf, sizeof ready);
  std::memcpy(comet.step_ns, ready.step_ns, sizeof comet.step_ns);
  std::memcpy(comet.step_cpu_ns, ready.step_cpu_ns, sizeof comet.step_cpu_ns);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (cmsg == nullptr || cmsg->cmsg_type != SCM_RIGHTS || cmsg->cmsg_len < CMSG_LEN(0)) {
    return make_error("sandbox setup: listener fd missing");
  }
  const size_t received = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
  std::vector<UniqueFd> fds(received);
  {
    std::vector<int> raw(received);
    std::memcpy(raw.data(), CMSG_DATA(cmsg), received * sizeof(int));
    for (size_t i = 0; i < received; ++i) fds[i].reset(raw[i]);  // owned before any check
  }
  const size_t expected = 6 + ready.has_gateway6 + ready.has_proxy + ready.relays;
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || received != ready.fd_count || received != expected) {
    return make_error("sandbox setup: " + std::to_string(received) + " fds received, " +
                      std::to_string(expected) + " expected");
  }
  size_t i = 0;
  comet.listener = std::move(fds[i++]);
  comet.out_dir = std::move(fds[i++]);
  comet.network.nflog = std::move(fds[i++]);
  comet.network.dns_udp = std::move(fds[i++]);
  comet.network.dns_tcp = std::move(fds[i++]);
  comet.network.gateway_tcp = std::move(fds[i++]);
  if (ready.has_gateway6 != 0) comet.network.gateway_tcp6 = std::move(fds[i++]);
  if (ready.has_proxy != 0) comet.network.proxy_tcp = std::move(fds[i++]);
  while (i < fds.size()) comet.network.udp_relay.push_back(std::move(fds[i++]));
  return {};
}

// The supervisor names the Comet's processes by pid under /proc (its id maps, the mount
// sources through /proc/PID/root, the notifier's reads of /proc/PID/mem): those pids are the
// ones this process sees, so /proc must be a procfs of its own pid namespace. In a pid
// namespace with the host's /proc (`unshare --pid --fork` without --mount-proc) they would
// name other processes; refused, and the fix named.
Status proc_shows_this_pid_namespace() {
  char buf[32] = {};
  const ssize_t n = ::readlink("/proc/self", buf, sizeof buf - 1);
  const std::string own = std::to_string(::getpid());
  if (n > 0 && std::string(buf, static_cast<size_t>(n)) == own) return {};
  const std::string seen = n > 0 ? "pid " + std::string(buf, static_cast<size_t>(n)) : "no pid";
  return make_error("/proc is not of this process's pid namespace (it shows " + seen + " for pid " + own +
                        "): mount a procfs of that namespace (unshare --mount-proc) before soyaos run",
                    n > 0 ? 0 : errno);
}

}  // namespace

Result<LaunchedComet> launch_comet(const policy::Policy& policy, const SeccompProgram& program,
                                   const NetworkPlan& network, const CgroupPlan& cgroups, LaunchThread& launcher) {
  if (auto s = proc_shows_this_pid_namespace(); !s) return s.error();
  if (network.allow_udp.size() > kMaxUdpRelays) {
    return make_error("network: more than " + std::to_string(kMaxUdpRelays) + " udp egress entries", E2BIG);
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return errno_error("socketpair");
  }
  UniqueFd parent_sock(sv[0]), child_sock(sv[1]);
  auto out_pipe = make_pipe();
  if (!out_pipe) return out_pipe.error();
  auto err_pipe = make_pipe();
  if (!err_pipe) return err_pipe.error();

  // As root the Comet's ids are its own (credentials.h), from the TID of THIS thread, which
  // lives as long as the run (the launcher thread does not): the launcher thread takes them
  // as its effective ids for clone3, so the new user namespace is owned by them, not root.
  const uid_t host_uid = run_host_uid();
  const gid_t host_gid = run_host_gid();
  const bool as_root = use_run_ids();
  const uint64_t launch_ns = now_ns();
  int pidfd = -1;
  struct clone_args args {};
  args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
               CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  // v1: the launcher thread is in the run's cgroup and the child inherits it. v2: a lone
  // thread cannot be placed in a domain cgroup; clone3 creates the child in it instead.
  const RunCgroup* run_cgroup = launcher.cgroup();
  if (run_cgroup != nullptr && run_cgroup->v2_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(run_cgroup->v2_fd());
  }
  // Changing the effective uid makes the whole process non-dumpable; give that back after.
  const int dumpable = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  long pid = 0;
  int clone_errno = 0;
  // Runs on the cloning thread: the launcher thread in the run's v1 cgroups, or, without a v1
  // directory (v2, rootless), the caller's (LaunchThread::clone).
  const std::function<Status()> clone_job = [&]() -> Status {
    // SAFETY: clone3(2) without a stack behaves like fork(); glibc has no wrapper, so no
    // atfork handler runs. The other threads are held off by the clone gate (the caller
    // waits in LaunchThread::clone), so the child's copy of memory is consistent. Taken
    // before the run's ids: nothing that can throw stands between them and the way back.
    std::unique_lock gate(clone_gate());
    if (as_root) {
      if (auto s = enter_run_ids_for_clone(host_uid, host_gid, (args.flags & CLONE_INTO_CGROUP) != 0); !s) {
        // A failed setresgid/setresuid may still have changed an id: dumpable back anyway.
        if (dumpable >= 0) (void)::prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
        return s.error();
      }
    }
    pid = ::syscall(SYS_clone3, &args, sizeof args);
    clone_errno = errno;
    if (pid == 0) gate.release();  // the child's copy: never unlocked there, never used again
    if (pid == 0) {
      parent_sock.reset();
      child_main(policy, program, network, cgroups.pids.version != CgroupVersion::none, child_sock.get(),
                 out_pipe->second.get(), err_pipe->second.get());
    }
    if (as_root) {  // the parent only: the child keeps the run's ids
      leave_run_ids();
      if (dumpable >= 0) (void)::prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
    }
    gate.unlock();
    if (pid < 0) {
      const int err = clone_errno;
      if ((args.flags & CLONE_INTO_CGROUP) != 0 && err != ENOSPC && err != EPERM) {
        return make_error("cgroup: create the Comet in " + run_cgroup->v2_dir() + " (clone3 CLONE_INTO_CGROUP)", err);
      }
      const char* why = err == ENOSPC ? " (user namespace limit reached: /proc/sys/user/max_user_namespaces)"
                        : err == EPERM ? " (unprivileged user namespaces are disabled on this host)"
                                       : "";
      return make_error(std::string("namespaces: cannot create user, mount, pid, ipc, uts, net and cgroup "
                                    "namespaces") + why, err);
    }
    return {};
  };
  // The child waits for "go" before doing anything, and "go" comes after this: the child
  // runs nothing of its setup, let alone the agent's code, before the launcher thread is
  // released and pids.max is the limit.
  Status cloned = launcher.clone(clone_job);
  if (!cloned) {
    if (pid > 0) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
    }
    if (pidfd >= 0) ::close(pidfd);
    return cloned.error();
  }
  LaunchedComet comet;
  comet.launch_ns = launch_ns;
  comet.pid = static_cast<pid_t>(pid);
  comet.pidfd.reset(pidfd);
  child_sock.reset();
  out_pipe->second.reset();
  err_pipe->second.reset();

  auto kill_child = [&] {
    ::kill(comet.pid, SIGKILL);
    ::waitpid(comet.pid, nullptr, 0);
  };
  comet.cgroup = launcher.take_cgroup();
  if (auto s = write_id_maps(comet.pid, policy, host_uid, host_gid); !s) {
    kill_child();
    return make_error("user namespace: " + s.error().message, s.error().err);
  }
  auto sources = open_mount_sources(policy, "/proc/" + std::to_string(comet.pid) + "/root");
  if (!sources) {
    kill_child();
    return make_error("mounts: " + sources.error().message, sources.error().err);
  }
  if (auto s = send_go(parent_sock.get(), *sources); !s) {
    kill_child();
    return s.error();
  }
  sources->by_mount.clear();  // the child has its own copies
  if (auto s = receive_ready(parent_sock.get(), comet); !s) {
    kill_child();
    return s.error();
  }
  comet.control = std::move(parent_sock);
  comet.stdout_read = std::move(out_pipe->first);
  comet.stderr_read = std::move(err_pipe->first);
  return comet;
}

}  // namespace soyaos::comet
