#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/digest.h"
#include "policy/runtime_layer.h"
#include "supervisor/runtime_files.h"

namespace soyaos::supervisor {
namespace {

enum Tag : uint64_t { kPidfd = 1, kStdout, kStderr, kTimer, kGrace, kControl, kSignal };

Status add(int epfd, int fd, Tag tag) {
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  if (::epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return errno_error("epoll_ctl add");
  return {};
}

void remove(int epfd, int fd) { (void)::epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr); }

// Relays and/or captures one chunk of the agent's output; false at EOF.
// `hash` and `total` see every byte read (the run's output digests).
bool relay(int from, int to, std::string* sink, size_t cap, uint64_t* dropped, bool tee, Sha256& hash,
           uint64_t& total) {
  char buf[65536];
  ssize_t n = ::read(from, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  hash.update(buf, static_cast<size_t>(n));
  total += static_cast<uint64_t>(n);
  if (sink != nullptr) {
    size_t keep = std::min(static_cast<size_t>(n), cap - std::min(cap, sink->size()));
    sink->append(buf, keep);
    *dropped += static_cast<uint64_t>(n) - keep;
    if (!tee) return true;
  }
  ssize_t off = 0;
  while (off < n) {
    ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return true;  // our own output is gone (EPIPE): keep draining so the agent is not stuck
    }
    off += w;
  }
  return true;
}

// sysinfo(2) for the agent: the host's answer reduced to the agent's view, written into the
// buffer the agent passed (its own memory, with its own page protections: process_vm_writev
// does not force), then the syscall completes with 0. An unwritable buffer is EFAULT, as the
// kernel would say.
void answer_sysinfo(const UniqueFd& listener, const comet::Notification& n, const policy::Policy& policy) {
  struct sysinfo host {};
  if (::sysinfo(&host) != 0) {
    (void)comet::respond_error(listener, n.id, errno);
    return;
  }
  struct sysinfo agent = policy::agent_sysinfo(host, policy.limits.memory_bytes);
  struct iovec local {&agent, sizeof agent};
  struct iovec remote {reinterpret_cast<void*>(n.args[0]), sizeof agent};  // NOLINT(performance-no-int-to-ptr)
  // Still blocked in this syscall, so n.pid is still that agent thread (pids are allocated
  // cyclically: a reuse within this window would need the whole pid space to wrap).
  if (!comet::notification_valid(listener, n.id)) return;
  const ssize_t wrote = n.args[0] == 0 ? -1 : ::process_vm_writev(static_cast<pid_t>(n.pid), &local, 1, &remote, 1, 0);
  if (wrote != static_cast<ssize_t>(sizeof agent)) {
    (void)comet::respond_error(listener, n.id, EFAULT);
    return;
  }
  (void)comet::respond_value(listener, n.id, 0);
}

// The notification thread: blocks in SECCOMP_IOCTL_NOTIF_RECV so that, with
// SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, the kernel wakes it on the CPU of the agent thread
// that just blocked (an epoll wake-up would not carry that hint, and a cross-CPU wake-up
// costs ~100 us on these VMs against ~10 us on one CPU). It owns the Observer; the event
// loop never touches it. It ends when the filter has no users left (every agent thread is
// gone): RECV then fails with ENOENT and the listener polls POLLHUP.
void answer_notifications(const UniqueFd& listener, Observer& observer, AgentView& view,
                          const ViolationCallback& on_violation, std::atomic<uint64_t>& notifications,
                          std::atomic<uint64_t>& violations) {
  for (;;) {
    auto note = comet::receive_notification(listener);
    if (!note) {
      if (note.error().err == EINTR) continue;
      struct pollfd p {listener.get(), POLLIN, 0};
      int r = ::poll(&p, 1, 100);
      if (r < 0 && errno != EINTR) return;
      if (r > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return;
      continue;  // ENOENT: that syscall was interrupted before we got it
    }
    notifications.fetch_add(1, std::memory_order_relaxed);
    Decision d = observer.decide(*note, view);
    if (d.violation) {
      violations.fetch_add(1, std::memory_order_relaxed);
      on_violation(*d.violation);
    }
    // Failure to respond means the agent's thread is gone; nothing to do.
    if (d.answer_sysinfo) {
      answer_sysinfo(listener, *note, observer.policy());
    } else if (!d.serve.empty()) {
      // The runtime layer's own rendering of a /proc file (runtime_files.h).
      auto fd = open_served_file(d.serve, static_cast<pid_t>(note->pid), observer.policy());
      Status sent = fd ? comet::respond_with_fd(listener, note->id, *fd, d.serve_cloexec) : Status(fd.error());
      if (!sent) (void)comet::respond_error(listener, note->id, sent.error().err > 0 ? sent.error().err : EIO);
    } else if (d.deny) {
      (void)comet::respond_error(listener, note->id, d.err);
    } else {
      (void)comet::respond_continue(listener, note->id);
    }
  }
}

int pidfd_signal(int pidfd, int sig) {
  // SAFETY: pidfd_send_signal(2) has no glibc wrapper in Debian 12; signals through the
  // pidfd cannot hit a recycled pid.
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

int pidfd_kill(int pidfd) { return pidfd_signal(pidfd, SIGKILL); }

sigset_t stop_signal_set() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  return mask;
}

// Whether the agent's SIGTERM disposition is the default one (neither caught nor ignored),
// from /proc/PID/status. The agent is not reaped before its pidfd reports its exit, so
// the pid cannot have been reused. Unreadable: false (it then gets SIGTERM and the grace).
bool sigterm_is_default(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return false;
  char line[256];
  bool caught = true, ignored = true;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const bool cgt = std::strncmp(line, "SigCgt:", 7) == 0, ign = std::strncmp(line, "SigIgn:", 7) == 0;
    if (!cgt && !ign) continue;
    const unsigned long long bits = std::strtoull(line + 7, nullptr, 16);
    (cgt ? caught : ignored) = (bits & (1ULL << (SIGTERM - 1))) != 0;
  }
  (void)std::fclose(f);
  return !caught && !ignored;
}

Status arm_timer(int fd, uint64_t ms) {
  struct itimerspec its {};
  its.it_value.tv_sec = static_cast<time_t>(ms / 1000);
  its.it_value.tv_nsec = static_cast<long>((ms % 1000) * 1'000'000);
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;  // 0 disarms
  if (::timerfd_settime(fd, 0, &its, nullptr) != 0) return errno_error("timerfd_settime");
  return {};
}

}  // namespace

const char* to_string(Stop s) {
  switch (s) {
    case Stop::none: return "none";
    case Stop::graceful: return "graceful";
    case Stop::killed: return "killed";
    case Stop::killed_at_once: return "killed_at_once";
  }
  return "?";
}

void block_stop_signals() {
  sigset_t mask = stop_signal_set();
  (void)::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
}

int take_pending_stop_signal() {
  sigset_t mask = stop_signal_set();
  sigset_t pending;
  if (::sigpending(&pending) != 0) return 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (sigismember(&pending, sig) != 1) continue;
    struct timespec zero {};
    int got = ::sigtimedwait(&mask, nullptr, &zero);
    return got > 0 ? got : sig;
  }
  return 0;
}

Result<RunOutcome> supervise(comet::LaunchedComet& comet, const policy::Policy& policy,
                             const ViolationCallback& on_violation, OutputCapture* capture) {
  const bool capturing = capture != nullptr && capture->enabled;
  Sha256 out_hash, err_hash;
  uint64_t out_bytes = 0, err_bytes = 0;
  auto start = std::chrono::steady_clock::now();
  RunOutcome outcome;
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return errno_error("epoll_create1");

  UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!timer) return errno_error("timerfd_create");
  if (auto s = arm_timer(timer.get(), policy.limits.timeout_ms); !s) return s.error();
  UniqueFd grace(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!grace) return errno_error("timerfd_create");
  outcome.grace_ms = policy.limits.grace_ms;

  // Normally blocked long before (block_stop_signals() by the caller, before any thread
  // exists); blocking again here keeps this thread right for callers that did not.
  block_stop_signals();
  sigset_t mask = stop_signal_set();
  // A signal that arrived before the loop (during setup) is pending and read at once.
  UniqueFd signals(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals) return errno_error("signalfd");

  // An optimisation: the kernel wakes us on the agent's CPU. Older kernels lack it.
  (void)comet::enable_sync_wakeup(comet.listener);

  for (auto [fd, tag] : {std::pair{comet.pidfd.get(), kPidfd},
                         {comet.stdout_read.get(), kStdout}, {comet.stderr_read.get(), kStderr},
                         {timer.get(), kTimer}, {grace.get(), kGrace}, {comet.control.get(), kControl},
                         {signals.get(), kSignal}}) {
    if (auto s = add(epoll.get(), fd, tag); !s) return s.error();
  }

  Observer observer(policy);
  ProcAgentView view(comet.listener, comet.pid);
  std::atomic<uint64_t> notifications{0}, violations{0};
  // Created with SIGINT/SIGTERM/SIGHUP blocked (above), so signals stay with the signalfd.
  std::thread notifier(answer_notifications, std::cref(comet.listener), std::ref(observer), std::ref(view),
                       std::cref(on_violation), std::ref(notifications), std::ref(violations));
  // On an early error return the agent is killed so that the notifier can end and be joined.
  struct JoinGuard {
    std::thread& thread;
    int pidfd;
    ~JoinGuard() {
      if (!thread.joinable()) return;
      (void)pidfd_kill(pidfd);
      thread.join();
    }
  } join_guard{notifier, comet.pidfd.get()};
  bool agent_alive = true, stdout_open = true, stderr_open = true;
  bool killed_by_us = false;
  // C9: a stop is SIGTERM, then SIGKILL when the grace timer fires; a second stop signal,
  // a zero grace or a SIGTERM that would be dropped (see sigterm_is_default) kill at once.
  auto stop = [&](Ending why, int signo) -> Status {
    if (!agent_alive) return {};
    if (killed_by_us) {
      if (why == Ending::interrupted && outcome.stop != Stop::killed) {
        (void)pidfd_kill(comet.pidfd.get());
        outcome.stop = Stop::killed;
      }
      return {};
    }
    killed_by_us = true;
    outcome.ending = why;
    outcome.status = why == Ending::interrupted ? signo : 0;
    if (policy.limits.grace_ms == 0 || sigterm_is_default(comet.pid)) {
      (void)pidfd_kill(comet.pidfd.get());
      outcome.stop = Stop::killed_at_once;
      return {};
    }
    (void)pidfd_signal(comet.pidfd.get(), SIGTERM);
    outcome.stop = Stop::graceful;  // until the grace timer says otherwise
    return arm_timer(grace.get(), policy.limits.grace_ms);
  };
  while (agent_alive || stdout_open || stderr_open) {
    struct epoll_event events[16];
    int n = ::epoll_wait(epoll.get(), events, 16, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      switch (events[i].data.u64) {
        case kStdout:
          if (!relay(comet.stdout_read.get(), capture != nullptr ? capture->relay_stdout_fd : STDOUT_FILENO, capturing ? &capture->out : nullptr,
                     capturing ? capture->cap_bytes : 0, capturing ? &capture->out_dropped : nullptr,
                     capturing && capture->tee, out_hash, out_bytes)) {
            remove(epoll.get(), comet.stdout_read.get());
            stdout_open = false;
          }
          break;
        case kStderr:
          if (!relay(comet.stderr_read.get(), STDERR_FILENO, capturing ? &capture->err : nullptr,
                     capturing ? capture->cap_bytes : 0, capturing ? &capture->err_dropped : nullptr,
                     capturing && capture->tee, err_hash, err_bytes)) {
            remove(epoll.get(), comet.stderr_read.get());
            stderr_open = false;
          }
          break;
        case kControl: {
          // EOF when the runtime's execve succeeded (the socket was close-on-exec);
          // a message when it failed.
          comet::ControlHeader h{};
          ssize_t r = ::recv(comet.control.get(), &h, sizeof h, MSG_DONTWAIT);
          if (r == static_cast<ssize_t>(sizeof h) && h.kind == comet::kControlExecFailed) {
            outcome.ending = Ending::exec_failed;
            outcome.exec_errno = h.err;
          }
          if (r <= 0 || outcome.ending == Ending::exec_failed) remove(epoll.get(), comet.control.get());
          break;
        }
        case kTimer:
          remove(epoll.get(), timer.get());
          if (auto s = stop(Ending::timed_out, 0); !s) return s.error();
          break;
        case kGrace:
          remove(epoll.get(), grace.get());
          if (agent_alive) {
            (void)pidfd_kill(comet.pidfd.get());
            outcome.stop = Stop::killed;
          }
          break;
        case kSignal: {
          struct signalfd_siginfo si {};
          if (::read(signals.get(), &si, sizeof si) != static_cast<ssize_t>(sizeof si)) break;
          const int signo = static_cast<int>(si.ssi_signo);
          if (outcome.stop_signal == 0) outcome.stop_signal = signo;
          if (auto s = stop(Ending::interrupted, signo); !s) return s.error();
          break;
        }
        case kPidfd: {
          siginfo_t info {};
          if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(comet.pidfd.get()), &info,
                       WEXITED) != 0) {
            return errno_error("waitid on the agent");
          }
          agent_alive = false;
          remove(epoll.get(), comet.pidfd.get());
          outcome.agent_signaled = info.si_code != CLD_EXITED;
          outcome.agent_status = info.si_status;
          if (!killed_by_us && outcome.ending != Ending::exec_failed) {
            if (info.si_code == CLD_EXITED) {
              outcome.ending = Ending::exited;
              outcome.status = info.si_status;
            } else {
              outcome.ending = Ending::signaled;
              outcome.status = info.si_status;
            }
          }
          break;
        }
        default:
          break;
      }
    }
  }
  // The agent is gone, so the filter has no users: the notifier sees POLLHUP and returns.
  notifier.join();
  outcome.notifications = notifications.load();
  outcome.violations = violations.load();
  // The stop signals stay blocked: one arriving from now on (outputs, events) stays
  // pending for the caller (take_pending_stop_signal), never kills soyaos half-way.
  outcome.duration_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                   std::chrono::steady_clock::now() - start)
                                                   .count());
  if (capture != nullptr) {
    capture->out_digest = out_hash.digest();
    capture->err_digest = err_hash.digest();
    capture->out_bytes = out_bytes;
    capture->err_bytes = err_bytes;
  }
  return outcome;
}

}  // namespace soyaos::supervisor
