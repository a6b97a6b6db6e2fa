// Layer tests in a forked child (Chromium's SANDBOX_TEST style): the child applies one
// layer, tries things, and reports the first unexpected result on a pipe; the parent test
// asserts the report is empty.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

namespace soyaos::testing {

// Reports "line L: WHAT -> rc=R errno=E (NAME)[, want errno W]" on `report` and ends the
// child. No allocation (it runs after filters are installed): snprintf, write, _exit.
[[noreturn]] inline void child_fail(int report, int line, const char* what, long rc, int err, int want = 0) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "line %d: %s -> rc=%ld errno=%d (%s)", line, what, rc, err,
                        strerrorname_np(err) != nullptr ? strerrorname_np(err) : "?");
  if (want != 0 && n > 0 && static_cast<size_t>(n) < sizeof buf) {
    int m = std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), ", want errno %d", want);
    if (m > 0) n += m;
    if (static_cast<size_t>(n) >= sizeof buf) n = static_cast<int>(sizeof buf) - 1;
  }
  if (n > 0) (void)!::write(report, buf, static_cast<size_t>(n));
  ::_exit(1);
}

// Runs body(report_fd) in a forked child; "" when it exited 0 without reporting, else
// what it reported and how it ended.
inline std::string run_in_child(const std::function<void(int)>& body) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "pipe2 failed";
  pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(p[0]);
    body(p[1]);
    ::_exit(0);
  }
  ::close(p[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && msg.empty()) return "";
  if (WIFSIGNALED(status)) msg += " (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
  if (WIFEXITED(status)) msg += " (exit " + std::to_string(WEXITSTATUS(status)) + ")";
  return msg;
}

}  // namespace soyaos::testing

// In a child body with a `report` fd in scope: the call must fail with `want`.
#define CHILD_EXPECT_ERRNO(call, want)                                                       \
  do {                                                                                       \
    errno = 0;                                                                               \
    long rc_ = static_cast<long>(call);                                                      \
    int err_ = errno;                                                                        \
    if (rc_ != -1 || err_ != (want))                                                         \
      ::soyaos::testing::child_fail(report, __LINE__, #call, rc_, err_, (want));             \
  } while (0)
// ... the call must succeed (return >= 0).
#define CHILD_EXPECT_OK(call)                                                                \
  do {                                                                                       \
    errno = 0;                                                                               \
    long rc_ = static_cast<long>(call);                                                      \
    if (rc_ < 0) ::soyaos::testing::child_fail(report, __LINE__, #call, rc_, errno);         \
  } while (0)
