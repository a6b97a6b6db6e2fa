// seccomp user notification, end to end on the real kernel: a forked child installs the
// agent filter and passes the listener back over a socketpair (SCM_RIGHTS); a responder
// thread in the test process answers with the seccomp_notify API.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "child_test.h"
#include "comet/seccomp_filter.h"
#include "comet/seccomp_notify.h"

namespace soyaos::comet {
namespace {

using ::soyaos::testing::child_fail;

void send_fd(int sock, int fd) {
  char data = 'L';
  iovec iov{&data, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  (void)!::sendmsg(sock, &msg, MSG_NOSIGNAL);
}

UniqueFd recv_fd(int sock) {
  char data;
  iovec iov{&data, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) <= 0) return UniqueFd();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return UniqueFd();
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return UniqueFd(fd);
}

const SeccompProgram& program() {
  static const SeccompProgram p = [] {
    Result<SeccompProgram> r = build_agent_filter();
    if (!r) std::abort();
    return std::move(r).value();
  }();
  return p;
}

// A sandboxed child plus a responder thread. `handler` answers each notification.
struct Sandboxed {
  std::string failure;           // what the child reported, "" on success
  int exit_status = -1;
  std::vector<Notification> seen;
  std::vector<std::string> paths;  // read_agent_string of args[1] for openat
};

using Handler = std::function<void(const UniqueFd&, const Notification&, Sandboxed&)>;

Sandboxed run_sandboxed(const std::function<void(int report)>& body, const Handler& handler,
                        int child_cpu = -1, int responder_cpu = -1, bool sync_wakeup = false,
                        const std::function<void(int report)>& before_filter = nullptr) {
  program();
  Sandboxed out;
  int sv[2], p[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || ::pipe2(p, O_CLOEXEC) != 0) {
    out.failure = "socketpair/pipe";
    return out;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    ::close(p[0]);
    if (child_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(child_cpu, &set);
      ::sched_setaffinity(0, sizeof set, &set);
    }
    if (before_filter) before_filter(p[1]);
    Result<UniqueFd> listener = install_agent_filter(program());
    if (!listener) child_fail(p[1], __LINE__, "install_agent_filter", -1, listener.error().err);
    send_fd(sv[1], listener->get());
    listener->reset();
    ::close(sv[1]);
    body(p[1]);
    ::_exit(0);
  }
  ::close(sv[1]);
  ::close(p[1]);
  UniqueFd listener = recv_fd(sv[0]);
  ::close(sv[0]);
  if (!listener) {
    out.failure = "no listener received";
  } else {
    if (sync_wakeup) {
      Status s = enable_sync_wakeup(listener);
      if (!s) out.failure = s.error().describe();
    }
    std::thread responder([&] {
      if (responder_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(responder_cpu, &set);
        ::sched_setaffinity(0, sizeof set, &set);
      }
      for (;;) {
        pollfd pfd{listener.get(), POLLIN, 0};
        int n = ::poll(&pfd, 1, 10000);
        if (n <= 0) break;
        if (pfd.revents & POLLIN) {
          Result<Notification> note = receive_notification(listener);
          if (!note) {
            if (note.error().err == ENOENT) continue;  // the agent's syscall was interrupted
            break;
          }
          handler(listener, *note, out);
        } else if (pfd.revents & (POLLHUP | POLLERR)) {
          break;  // every task using the filter has exited
        }
      }
    });
    responder.join();
  }
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  out.exit_status = status;
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || !msg.empty()) {
    out.failure += msg + " (status " + std::to_string(status) + ")";
  }
  return out;
}

// The C3/C4 answers: no new process, no exec, no clock setting; everything else continues.
void answer_like_supervisor(const UniqueFd& listener, const Notification& n, Sandboxed& out) {
  out.seen.push_back(n);
  switch (n.nr) {
    case __NR_fork:
    case __NR_vfork:
    case __NR_clone:
      (void)respond_error(listener, n.id, EPERM);
      return;
    case __NR_execve:
    case __NR_execveat:
      (void)respond_error(listener, n.id, EACCES);
      return;
    case __NR_clock_settime:
    case __NR_settimeofday:
    case __NR_adjtimex:
    case __NR_clock_adjtime:
      (void)respond_error(listener, n.id, EPERM);
      return;
    case __NR_openat: {
      Result<std::string> path = read_agent_string(listener, n.id, static_cast<pid_t>(n.pid), n.args[1]);
      out.paths.push_back(path ? *path : "<error: " + path.error().describe() + ">");
      (void)respond_continue(listener, n.id);
      return;
    }
    default:
      (void)respond_continue(listener, n.id);
  }
}

bool saw(const Sandboxed& s, int nr) {
  for (const Notification& n : s.seen) {
    if (n.nr == nr) return true;
  }
  return false;
}

TEST(SeccompNotify, ForkAndExecAreAnsweredByTheSupervisor) {
  Sandboxed s = run_sandboxed(
      [](int report) {
        CHILD_EXPECT_ERRNO(::syscall(__NR_fork), EPERM);
        CHILD_EXPECT_ERRNO(::syscall(__NR_vfork), EPERM);
        CHILD_EXPECT_ERRNO(::fork(), EPERM);  // glibc: clone(SIGCHLD|CLONE_CHILD_*)
        char* const argv[] = {const_cast<char*>("true"), nullptr};
        CHILD_EXPECT_ERRNO(::execve("/bin/true", argv, nullptr), EACCES);
        CHILD_EXPECT_ERRNO(::syscall(__NR_execveat, AT_FDCWD, "/bin/true", argv, nullptr, 0), EACCES);
      },
      answer_like_supervisor);
  EXPECT_EQ(s.failure, "");
  EXPECT_TRUE(saw(s, __NR_fork));
  EXPECT_TRUE(saw(s, __NR_vfork));
  EXPECT_TRUE(saw(s, __NR_clone));
  EXPECT_TRUE(saw(s, __NR_execve));
  EXPECT_TRUE(saw(s, __NR_execveat));
  for (const Notification& n : s.seen) EXPECT_EQ(n.arch, 0xc000003eu);  // AUDIT_ARCH_X86_64
}

TEST(SeccompNotify, PathOpenIsObservedThenContinued) {
  Sandboxed s = run_sandboxed(
      [](int report) {
        int fd = ::openat(AT_FDCWD, "/etc/hostname", O_RDONLY | O_CLOEXEC);
        if (fd < 0) child_fail(report, __LINE__, "openat /etc/hostname", fd, errno);
        char c;
        CHILD_EXPECT_OK(::read(fd, &c, 1));
        // A path straddling a page boundary, with the next page unmapped after the NUL.
        long page = ::sysconf(_SC_PAGESIZE);
        char* two = static_cast<char*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        ::munmap(two + page, page);
        const char kPath[] = "/dev/null";
        char* at = two + page - sizeof kPath;
        std::memcpy(at, kPath, sizeof kPath);
        CHILD_EXPECT_OK(::openat(AT_FDCWD, at, O_RDONLY | O_CLOEXEC));
        CHILD_EXPECT_ERRNO(::openat(AT_FDCWD, "/nonexistent/x", O_RDONLY), ENOENT);
      },
      answer_like_supervisor);
  EXPECT_EQ(s.failure, "");
  EXPECT_EQ(s.paths, (std::vector<std::string>{"/etc/hostname", "/dev/null", "/nonexistent/x"}));
}

TEST(SeccompNotify, ClockSettingIsNotifiedReadingIsNot) {
  Sandboxed s = run_sandboxed(
      [](int report) {
        struct timespec ts {};
        CHILD_EXPECT_OK(::clock_gettime(CLOCK_REALTIME, &ts));
        CHILD_EXPECT_ERRNO(::clock_settime(CLOCK_REALTIME, &ts), EPERM);
        struct timeval tv {};
        CHILD_EXPECT_ERRNO(::syscall(__NR_settimeofday, &tv, nullptr), EPERM);
      },
      answer_like_supervisor);
  EXPECT_EQ(s.failure, "");
  ASSERT_EQ(s.seen.size(), 2u);
  EXPECT_EQ(s.seen[0].nr, __NR_clock_settime);
  EXPECT_EQ(s.seen[0].args[0], static_cast<uint64_t>(CLOCK_REALTIME));
  EXPECT_EQ(s.seen[1].nr, __NR_settimeofday);
}

TEST(SeccompNotify, StaleIdsAndStringsAreRefused) {
  uint64_t first_id = 0;
  bool valid_before = false, valid_after = true;
  std::string long_result;
  Sandboxed s = run_sandboxed(
      [](int report) {
        static char huge[8192];
        std::memset(huge, 'a', sizeof huge - 1);
        CHILD_EXPECT_ERRNO(::openat(AT_FDCWD, huge, O_RDONLY), ENAMETOOLONG);
      },
      [&](const UniqueFd& listener, const Notification& n, Sandboxed&) {
        first_id = n.id;
        valid_before = notification_valid(listener, n.id);
        Result<std::string> r = read_agent_string(listener, n.id, static_cast<pid_t>(n.pid), n.args[1]);
        long_result = r ? "ok" : std::to_string(r.error().err);
        (void)respond_continue(listener, n.id);
        valid_after = notification_valid(listener, n.id);
        Status again = respond_continue(listener, n.id);
        if (again.ok()) long_result += " second-response-accepted";
      });
  EXPECT_EQ(s.failure, "");
  EXPECT_TRUE(valid_before);
  EXPECT_FALSE(valid_after);
  EXPECT_EQ(long_result, std::to_string(ENAMETOOLONG));
}

TEST(SeccompNotify, ThreadsDoNotNotify) {
  Sandboxed s = run_sandboxed(
      [](int report) {
        std::atomic<int> v{0};
        std::thread t([&v] { v = 1; });
        t.join();
        if (v != 1) child_fail(report, __LINE__, "thread did not run", 0, 0);
      },
      answer_like_supervisor);
  EXPECT_EQ(s.failure, "");
  EXPECT_FALSE(saw(s, __NR_clone));
}

// Round-trip cost of one notification (agent syscall -> supervisor -> answer).
double measure_round_trip_ns(int child_cpu, int responder_cpu, bool sync_wakeup, std::string* err) {
  constexpr int kIters = 20000;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  Sandboxed s = run_sandboxed(
      [wfd = p[1]](int report) {
        struct timespec ts {};
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kIters; ++i) CHILD_EXPECT_ERRNO(::clock_settime(CLOCK_REALTIME, &ts), EPERM);
        auto t1 = std::chrono::steady_clock::now();
        double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / kIters;
        (void)!::write(wfd, &ns, sizeof ns);
      },
      [](const UniqueFd& listener, const Notification& n, Sandboxed&) {
        (void)respond_error(listener, n.id, EPERM);
      },
      child_cpu, responder_cpu, sync_wakeup);
  ::close(p[1]);
  double ns = -1;
  if (::read(p[0], &ns, sizeof ns) != sizeof ns) ns = -1;
  ::close(p[0]);
  *err = s.failure;
  return ns;
}

TEST(SeccompNotify, RoundTripCost) {
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::string err;
  double same = measure_round_trip_ns(0, 0, false, &err);
  EXPECT_EQ(err, "");
  double same_sync = measure_round_trip_ns(0, 0, true, &err);
  EXPECT_EQ(err, "");
  double cross = cpus > 1 ? measure_round_trip_ns(0, 1, false, &err) : -1;
  EXPECT_EQ(err, "");
  double cross_sync = cpus > 1 ? measure_round_trip_ns(0, 1, true, &err) : -1;
  EXPECT_EQ(err, "");
  double unpinned = measure_round_trip_ns(-1, -1, false, &err);
  EXPECT_EQ(err, "");
  std::printf("notification round trip (ns): same-cpu=%.0f same-cpu+sync_wakeup=%.0f cross-cpu=%.0f "
              "cross-cpu+sync_wakeup=%.0f unpinned=%.0f\n",
              same, same_sync, cross, cross_sync, unpinned);
  RecordProperty("same_cpu_ns", std::to_string(same));
  RecordProperty("cross_cpu_ns", std::to_string(cross));
  EXPECT_GT(same, 0);
}

// The allowlist is sized for the runtimes: each runs its workload under the filter with a
// supervisor that lets the first execve (the runtime itself) and every path syscall through.
struct Workload {
  const char* name;
  std::vector<std::string> argv;
  std::string script;  // written to a temporary file appended to argv when not empty
  const char* expect_stdout;
  bool new_user_namespace = false;  // unshare(CLONE_NEWUSER) before the filter, like the Comet
};

std::string run_workload(const Workload& w, Sandboxed* result) {
  if (::access(w.argv[0].c_str(), X_OK) != 0) return "missing " + w.argv[0];
  std::vector<std::string> argv = w.argv;
  std::string script_path;
  if (!w.script.empty()) {
    char tmpl[] = "/tmp/soyaos-workload-XXXXXX";
    int fd = ::mkstemp(tmpl);
    if (fd < 0) return "mkstemp";
    (void)!::write(fd, w.script.data(), w.script.size());
    ::close(fd);
    ::chmod(tmpl, 0644);
    script_path = tmpl;
    argv.push_back(script_path);
  }
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return "pipe";
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), const_cast<char*>("HOME=/tmp"),
                        const_cast<char*>("LANG=C.UTF-8"), nullptr};
  int execs = 0;
  const bool userns = w.new_user_namespace;
  *result = run_sandboxed(
      [&](int report) {
        ::dup2(out[1], 1);
        ::execve(cargv[0], cargv.data(), envp);
        child_fail(report, __LINE__, "execve runtime", -1, errno);
      },
      [&](const UniqueFd& listener, const Notification& n, Sandboxed& s) {
        if ((n.nr == __NR_execve || n.nr == __NR_execveat) && execs++ == 0) {
          s.seen.push_back(n);
          (void)respond_continue(listener, n.id);
          return;
        }
        answer_like_supervisor(listener, n, s);
      },
      -1, -1, false, [userns](int report) {
        if (userns) CHILD_EXPECT_OK(::unshare(CLONE_NEWUSER));
      });
  ::close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  if (!script_path.empty()) ::unlink(script_path.c_str());
  if (text.find(w.expect_stdout) == std::string::npos) {
    result->failure += " stdout=[" + text + "]";
  }
  return "";
}

// The Comet's agent lives in a child user namespace and may make itself non-dumpable; the
// supervisor must still read its path arguments (root: CAP_SYS_PTRACE; rootless: owner of
// the agent's user namespace, which becomes the mm's namespace at exec).
TEST(SeccompNotify, ReadsPathsFromNonDumpableAgentInUserNamespace) {
  Workload w{"nondumpable", {"/usr/bin/python3.11", "-I", "-S", "-c",
             "import ctypes; libc = ctypes.CDLL(None); assert libc.prctl(4, 0, 0, 0, 0) == 0; "
             "assert libc.prctl(3, 0, 0, 0, 0) == 0; open('/etc/hostname').read(); print('nd-ok')"},
             "", "nd-ok", true};
  Sandboxed s;
  std::string skip = run_workload(w, &s);
  if (!skip.empty()) GTEST_SKIP() << skip;
  EXPECT_EQ(s.failure, "");
  ASSERT_FALSE(s.paths.empty());
  EXPECT_EQ(s.paths.back(), "/etc/hostname");
  for (const std::string& p : s.paths) EXPECT_EQ(p.find("<error"), std::string::npos) << p;
}

class RuntimeUnderFilter : public ::testing::TestWithParam<Workload> {};

TEST_P(RuntimeUnderFilter, RunsItsWorkload) {
  Sandboxed s;
  std::string skip = run_workload(GetParam(), &s);
  if (!skip.empty()) GTEST_SKIP() << skip;
  EXPECT_EQ(s.failure, "");
  // No new process was attempted by any of them.
  EXPECT_FALSE(saw(s, __NR_fork));
  EXPECT_FALSE(saw(s, __NR_vfork));
  EXPECT_FALSE(saw(s, __NR_clone));
  std::printf("%s: %zu notifications\n", GetParam().name, s.seen.size());
}

const char kPython[] = R"(
import json, ssl, socket, urllib.request, threading, asyncio, os, tempfile
out = []
t = threading.Thread(target=lambda: out.append(json.dumps({"a": 1})))
t.start(); t.join()
async def main():
    await asyncio.sleep(0.01)
    return 7
assert asyncio.run(main()) == 7
ctx = ssl.create_default_context()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
cli = socket.create_connection(srv.getsockname()); conn, _ = srv.accept()
cli.sendall(b"x"); assert conn.recv(1) == b"x"
socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()  # NETLINK_ROUTE (getifaddrs) is allowed
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
    raise SystemExit("netlink netfilter allowed")
except OSError:
    pass
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "f"), "w") as f: f.write("x")
    os.rename(os.path.join(d, "f"), os.path.join(d, "g"))
print("python-ok", out[0])
)";

const char kNode[] = R"(
const { Worker, isMainThread, parentPort } = require('worker_threads');
if (isMainThread) {
  const crypto = require('crypto'); crypto.randomBytes(8);
  const net = require('net');
  const w = new Worker(__filename);
  w.on('message', (m) => {
    const s = net.createServer((c) => c.end('hi')).listen(0, '127.0.0.1', () => {
      net.connect(s.address().port, '127.0.0.1').on('data', (d) => {
        console.log('node-ok', m, d.toString()); s.close(); process.exit(0);
      });
    });
  });
} else { parentPort.postMessage(42); }
)";

INSTANTIATE_TEST_SUITE_P(
    Workloads, RuntimeUnderFilter,
    ::testing::Values(
        Workload{"python", {"/usr/bin/python3.11", "-I"}, kPython, "python-ok {\"a\": 1}"},
        Workload{"node", {"/usr/bin/node"}, kNode, "node-ok 42 hi"},
        Workload{"native_dynamic", {"/bin/ls", "-la", "/usr"}, "", "bin"},
        Workload{"native_static", {"/sbin/ldconfig", "-p"}, "", "libc.so.6"}),
    [](const ::testing::TestParamInfo<Workload>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace soyaos::comet
