// The launcher thread (src/comet/launch_thread.h) on this host's real cgroups: a process it
// clones is born in the run's cgroup (no migration), the thread itself is gone from it and
// no longer counted by the time clone() returns, pids.max is then the limit, and a cgroup
// that cannot be entered refuses the clone naming the directory. The v2 mechanism
// (clone3 CLONE_INTO_CGROUP), and the sweep of stale run cgroups against a run's v2 cgroup,
// which is empty until that clone3, are checked in this host's cgroup2 hierarchy, which has
// no controllers (docs/sandbox.md, "The run's cgroup").
#include "comet/launch_thread.h"
#include "comet/credentials.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "cgroup_files.h"

namespace soyaos::comet {
namespace {

using soyaos::testing::lines_of;
using soyaos::testing::slurp;

// A child of clone3 (a copy of this test process) that waits until the parent closes
// hold[1], then exits.
long clone_waiting_child(struct clone_args& args, const int hold[2]) {
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) {
    ::close(hold[1]);
    char c;
    (void)!::read(hold[0], &c, 1);
    ::_exit(0);
  }
  return pid;
}

class LaunchThreadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto plan = probe_cgroups();
    ASSERT_TRUE(plan) << plan.error().describe();
    plan_ = *plan;
    if (plan_.memory.version != CgroupVersion::v1 || plan_.pids.version != CgroupVersion::v1) {
      GTEST_SKIP() << "no writable cgroup v1 memory and pids for uid " << ::geteuid() << ": " << plan_.why_not;
    }
    ASSERT_EQ(::pipe2(hold_, O_CLOEXEC), 0);
  }
  void TearDown() override {
    for (int fd : hold_) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::string name(const char* what) const { return std::string("soyaos-unit-lt-") + what + "-" + std::to_string(::getpid()); }

  CgroupPlan plan_;
  int hold_[2] = {-1, -1};
};

TEST_F(LaunchThreadTest, TheChildIsBornInTheRunCgroupAndTheThreadIsGoneFromIt) {
  LaunchThread launcher(plan_, name("born"), policy::Limits{64 << 20, 4, 0, 0, 0});
  ASSERT_NE(launcher.cgroup(), nullptr);
  const std::string pids_dir = plan_.pids.parent + "/" + name("born");
  // While the thread is in it (and before the clone) pids.max leaves room for it.
  EXPECT_EQ(slurp(pids_dir + "/pids.max"), "5\n");
  long pid = -1;
  pid_t cloner = 0;
  Status s = launcher.clone([&]() -> Status {
    cloner = ::gettid();
    // The thread is alone in the run's cgroup: the supervisor's other threads are not.
    const auto tasks = lines_of(slurp(pids_dir + "/tasks"));
    if (tasks != std::set<std::string>{std::to_string(cloner)}) return make_error("tasks: " + slurp(pids_dir + "/tasks"));
    struct clone_args args {};
    args.exit_signal = SIGCHLD;
    pid = clone_waiting_child(args, hold_);
    if (pid < 0) return errno_error("clone3");
    return {};
  });
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_GT(pid, 0);
  EXPECT_NE(cloner, ::gettid()) << "the job ran on the caller's thread";
  EXPECT_EQ(launcher.thread_tid(), cloner);
  // Born in every v1 directory of the run's cgroup; nothing else is left in it.
  for (const auto& dir : launcher.cgroup()->dirs()) {
    EXPECT_EQ(slurp(dir + "/tasks"), std::to_string(pid) + "\n") << dir;
    EXPECT_EQ(slurp(dir + "/cgroup.procs"), std::to_string(pid) + "\n") << dir;
  }
  EXPECT_EQ(slurp(pids_dir + "/pids.current"), "1\n");
  EXPECT_EQ(slurp(pids_dir + "/pids.max"), "4\n") << "not sealed to the limit";
  EXPECT_EQ(slurp(pids_dir + "/pids.events"), "max 0\n");
  const std::string host_view = slurp("/proc/" + std::to_string(pid) + "/cgroup");
  auto paths = parse_proc_cgroup(host_view);
  for (const char* controller : {"memory", "pids"}) {
    const std::string& path = paths[controller];
    const std::string tail = "/" + name("born");
    EXPECT_TRUE(path.size() >= tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0)
        << controller << ": " << host_view;
  }
  // The thread is gone from this process.
  struct stat st {};
  EXPECT_NE(::stat(("/proc/self/task/" + std::to_string(cloner)).c_str(), &st), 0);
  ::close(hold_[1]);
  hold_[1] = -1;
  int status = 0;
  ASSERT_EQ(::waitpid(static_cast<pid_t>(pid), &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The cgroup is the caller's now, and removed with it.
  std::vector<std::string> dirs = launcher.cgroup()->dirs();
  { RunCgroup taken = launcher.take_cgroup(); }
  for (const auto& d : dirs) EXPECT_NE(::stat(d.c_str(), &st), 0) << d << " was left behind";
}

TEST_F(LaunchThreadTest, ACgroupThatCannotBeEnteredRefusesTheCloneNamingIt) {
  auto cg = RunCgroup::create(plan_, name("gone"), policy::Limits{64 << 20, 4, 0, 0, 0});
  ASSERT_TRUE(cg) << cg.error().describe();
  // The pids directory removed under the run (an operator's cleanup, a racing sweep).
  const std::string pids_dir = plan_.pids.parent + "/" + name("gone");
  ASSERT_EQ(::rmdir(pids_dir.c_str()), 0) << std::strerror(errno);
  LaunchThread launcher(std::move(cg));
  bool ran = false;
  Status s = launcher.clone([&]() -> Status {
    ran = true;
    return {};
  });
  ASSERT_FALSE(s);
  EXPECT_FALSE(ran) << "cloned although the thread is not in the run's cgroup";
  EXPECT_NE(s.error().message.find("cgroup: place the Comet's launcher thread in " + pids_dir), std::string::npos)
      << s.error().message;
  EXPECT_EQ(s.error().err, ENOENT);
}

TEST_F(LaunchThreadTest, ACgroupThatCannotBeCreatedIsReportedByTheClone) {
  CgroupPlan plan = plan_;
  plan.memory.parent = "/nonexistent-cgroup-parent";
  LaunchThread launcher(plan, name("nocreate"), policy::Limits{64 << 20, 4, 0, 0, 0});
  EXPECT_EQ(launcher.cgroup(), nullptr);
  bool ran = false;
  Status s = launcher.clone([&]() -> Status {
    ran = true;
    return {};
  });
  ASSERT_FALSE(s);
  EXPECT_FALSE(ran);
  EXPECT_NE(s.error().message.find("cgroup (cgroup v1 memory)"), std::string::npos) << s.error().message;
}

TEST_F(LaunchThreadTest, TheLimitsComeLaterButBeforeAnyClone) {
  // As `soyaos run` starts it (at its cache miss): the directories first, the limits at the
  // run's plan. Without them nothing is cloned.
  {
    LaunchThread launcher(plan_, name("later"));
    ASSERT_NE(launcher.cgroup(), nullptr);
    const std::string pids_dir = plan_.pids.parent + "/" + name("later");
    EXPECT_EQ(slurp(pids_dir + "/pids.max"), "max\n");
    bool ran = false;
    Status s = launcher.clone([&]() -> Status {
      ran = true;
      return {};
    });
    ASSERT_FALSE(s);
    EXPECT_FALSE(ran) << "cloned into an unlimited cgroup";
    EXPECT_NE(s.error().message.find("no limits"), std::string::npos) << s.error().message;
  }
  LaunchThread launcher(plan_, name("later2"));
  launcher.set_limits(policy::Limits{32 << 20, 6, 0, 0, 0});
  const std::string dir = plan_.pids.parent + "/" + name("later2");
  EXPECT_EQ(slurp(dir + "/pids.max"), "7\n");
  EXPECT_EQ(slurp(plan_.memory.parent + "/" + name("later2") + "/memory.limit_in_bytes"), std::to_string(32 << 20) + "\n");
  Status s = launcher.clone([] { return Status{}; });
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(slurp(dir + "/pids.max"), "6\n");
}

TEST_F(LaunchThreadTest, ARunThatStopsBeforeTheCloneLeavesNothingBehind) {
  std::vector<std::string> dirs;
  {
    LaunchThread launcher(plan_, name("unused"), policy::Limits{64 << 20, 4, 0, 0, 0});
    ASSERT_NE(launcher.cgroup(), nullptr);
    dirs = launcher.cgroup()->dirs();
  }
  struct stat st {};
  for (const auto& d : dirs) EXPECT_NE(::stat(d.c_str(), &st), 0) << d << " was left behind";
}

TEST(LaunchThreadNoCgroup, WithoutAV1DirectoryTheCloneRunsOnTheCallersThread) {
  LaunchThread launcher(CgroupPlan{}, "soyaos-unit-lt-none", policy::Limits{64 << 20, 4, 0, 0, 0});
  pid_t on = 0;
  Status s = launcher.clone([&]() -> Status {
    on = ::gettid();
    return {};
  });
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(on, ::gettid());
  EXPECT_EQ(launcher.thread_tid(), 0);
  EXPECT_FALSE(launcher.clone([] { return Status{}; })) << "a second clone was accepted";
}

// cgroup v2 in this host's cgroup2 hierarchy, under the test process's own cgroup there. It
// has no controllers, but where clone3 places a task is the kernel's either way.
class CloneIntoCgroupV2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "making a cgroup2 directory here needs root";
    auto mounts = parse_cgroup_mounts(slurp("/proc/self/mountinfo"));
    auto own = parse_proc_cgroup(slurp("/proc/self/cgroup"));
    auto m = mounts.find("");
    if (m == mounts.end() || own.count("") == 0) GTEST_SKIP() << "no cgroup2 mount";
    mount_ = m->second.mount_point;
    base_ = mount_ + (own[""] == "/" ? "" : own[""]);
    ASSERT_EQ(::pipe2(hold_, O_CLOEXEC), 0);
  }
  void TearDown() override {
    for (int fd : hold_) {
      if (fd >= 0) ::close(fd);
    }
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) (void)::rmdir(it->c_str());
  }
  // A child cloned into the cgroup `fd` names; it waits until hold_[1] is closed.
  long clone_into(int fd) {
    struct clone_args args {};
    args.flags = CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(fd);
    args.exit_signal = SIGCHLD;
    return clone_waiting_child(args, hold_);
  }
  // Ends the children clone_into() made, and reaps `pid`.
  void release(long pid) {
    ::close(hold_[1]);
    hold_[1] = -1;
    ASSERT_EQ(::waitpid(static_cast<pid_t>(pid), nullptr, 0), pid);
  }

  std::string mount_, base_;
  int hold_[2] = {-1, -1};
  std::vector<std::string> made_;  // directories a failed test may leave: removed, children first
};

// A thread cannot be placed alone in a domain cgroup, so there clone3 names the run's cgroup
// (CLONE_INTO_CGROUP with an O_PATH fd, as RunCgroup::v2_fd gives).
TEST_F(CloneIntoCgroupV2, TheChildLandsInTheCgroupTheFdNames) {
  const std::string dir = base_ + "/soyaos-unit-into-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << std::strerror(errno);
  int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct clone_args args {};
  args.flags = CLONE_INTO_CGROUP | CLONE_NEWCGROUP;
  args.cgroup = static_cast<uint64_t>(fd);
  args.exit_signal = SIGCHLD;
  long pid = clone_waiting_child(args, hold_);
  ASSERT_GT(pid, 0) << std::strerror(errno);
  const std::string procs = slurp(dir + "/cgroup.procs");
  const std::string view = slurp("/proc/" + std::to_string(pid) + "/cgroup");
  release(pid);
  EXPECT_EQ(procs, std::to_string(pid) + "\n");
  EXPECT_NE(view.find("0::" + dir.substr(mount_.size()) + "\n"), std::string::npos) << view;
  // A cgroup removed meanwhile refuses the clone (ENOENT), and a v1 directory is no v2 fd.
  ASSERT_EQ(::rmdir(dir.c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(clone_into(fd), -1);
  EXPECT_EQ(errno, ENOENT);
  ::close(fd);
}

// The run's v2 cgroup is made at `soyaos run`'s cache miss and stays empty until the clone3
// that names it: a run whose pre-launch work took over a minute left it looking like the
// leftover of a killed run (empty, its mtime over a minute old), and a concurrent run's sweep removed
// it, so the clone3 failed (ENOENT) and the run was refused (125). The run's claim on it (a
// flock) keeps every sweep off it while the run lives, the sweep of another run of the same
// process too; the clone then lands in it. Once the run is gone (killed: no destructor, the
// kernel dropped the claim) the same directory is swept by the next run.
TEST_F(CloneIntoCgroupV2, ASlowRunsEmptyCgroupIsSweptOnlyOnceTheRunIsGone) {
  const std::string parent = base_ + "/soyaos-unit-v2-sweep-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(parent.c_str(), 0755), 0) << parent << ": " << std::strerror(errno);
  CgroupPlan plan;
  plan.pids = {CgroupVersion::v2, parent};
  const std::string slow = parent + "/soyaos-unit-slow";
  const std::string killed = parent + "/soyaos-unit-killed";
  made_ = {parent, slow, killed};
  // What a minute of pre-launch work leaves: the directory's mtime is its mkdir's.
  struct timespec long_ago[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  {
    auto run = RunCgroup::make(plan, "soyaos-unit-slow");
    ASSERT_TRUE(run) << run.error().describe();
    ASSERT_EQ(::utimensat(AT_FDCWD, slow.c_str(), long_ago, 0), 0) << std::strerror(errno);
    {
      auto concurrent = RunCgroup::make(plan, "soyaos-unit-next");  // its sweep of `parent`
      ASSERT_TRUE(concurrent) << concurrent.error().describe();
    }
    struct stat st {};
    EXPECT_EQ(::stat(slow.c_str(), &st), 0) << "a live run's cgroup was swept";
    const long pid = clone_into(run->v2_fd());
    EXPECT_GT(pid, 0) << "the run's clone3 failed: " << std::strerror(errno);
    if (pid > 0) {
      EXPECT_EQ(slurp(slow + "/cgroup.procs"), std::to_string(pid) + "\n");
      release(pid);
    }
  }
  // The owner killed with SIGKILL while its run was being set up.
  int made[2];
  ASSERT_EQ(::pipe2(made, O_CLOEXEC), 0);
  const pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    auto run = RunCgroup::make(plan, "soyaos-unit-killed");
    (void)!::write(made[1], run ? "y" : "n", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(made[1]);
  char c = 0;
  EXPECT_EQ(::read(made[0], &c, 1), 1);
  ::close(made[0]);
  ::kill(owner, SIGKILL);
  ASSERT_EQ(::waitpid(owner, nullptr, 0), owner);
  ASSERT_EQ(c, 'y') << "the owner could not make its cgroup";
  ASSERT_EQ(::utimensat(AT_FDCWD, killed.c_str(), long_ago, 0), 0) << std::strerror(errno);
  {
    auto next = RunCgroup::make(plan, "soyaos-unit-next");
    ASSERT_TRUE(next) << next.error().describe();
  }
  struct stat st {};
  EXPECT_NE(::stat(killed.c_str(), &st), 0) << "the cgroup of a killed run was kept";
}

// As root the Comet is cloned with the run's ids as the thread's effective ids (so that its
// user namespace is theirs), and on cgroup v2 into a root-owned run cgroup: the kernel checks
// the caller's write access to cgroup.procs, which the run's euid lacks (EACCES, every root
// run on a v2 host refused before enter_run_ids_for_clone raised CAP_DAC_OVERRIDE). With it the clone lands, the
// child holds nothing of it on the host (a root-only file and root's cgroup.procs refuse it),
// and leaving the run's ids gives the thread back exactly what it had.
TEST_F(CloneIntoCgroupV2, AsRootTheRunsIdsCloneIntoARootOwnedRunCgroup) {
  if (!use_run_ids()) GTEST_SKIP() << "root with the run id range mapped only";
  const std::string dir = base_ + "/soyaos-unit-asroot-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << std::strerror(errno);
  made_.push_back(dir);
  const std::string secret = ::testing::TempDir() + "soyaos-root-only-" + std::to_string(::getpid());
  {
    int f = ::open(secret.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(f, 0);
    ::close(f);
  }
  int cg = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(cg, 0);
  int* hold = hold_;
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const std::string procs_path = dir + "/cgroup.procs";
  long without = 0, with = 0;
  int without_errno = 0, with_errno = 0;
  bool raised = false, euid_back = false, caps_back = false;
  // The credentials are per thread: a thread of its own, as the launcher's.
  std::thread([&] {
    struct __user_cap_header_struct header {};
    header.version = _LINUX_CAPABILITY_VERSION_3;
    struct __user_cap_data_struct before[2] {}, after[2] {};
    (void)::syscall(SYS_capget, &header, before);
    if (!enter_run_ids_for_clone(run_host_uid(), run_host_gid(), false)) return;
    struct clone_args args {};
    args.flags = CLONE_NEWUSER | CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cg);
    args.exit_signal = SIGCHLD;
    without = ::syscall(SYS_clone3, &args, sizeof args);
    without_errno = errno;
    if (without == 0) ::_exit(99);  // not expected: the parent reports it
    leave_run_ids();
    raised = static_cast<bool>(enter_run_ids_for_clone(run_host_uid(), run_host_gid(), true));
    with = ::syscall(SYS_clone3, &args, sizeof args);
    with_errno = errno;
    if (with == 0) {
      // The child: raw calls only (a copy of a threaded process). Two errnos, then wait.
      (void)::syscall(SYS_close, hold[1]);
      int errs[2] = {0, 0};
      int f = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, secret.c_str(), O_RDONLY | O_CLOEXEC));
      errs[0] = f < 0 ? errno : 0;
      f = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, procs_path.c_str(), O_WRONLY | O_CLOEXEC));
      errs[1] = f < 0 ? errno : 0;
      (void)!::write(report[1], errs, sizeof errs);
      char c;
      (void)!::read(hold[0], &c, 1);
      ::_exit(0);
    }
    leave_run_ids();
    euid_back = ::syscall(SYS_geteuid) == 0;
    (void)::syscall(SYS_capget, &header, after);
    caps_back = std::memcmp(before, after, sizeof before) == 0;
  }).join();
  ::close(report[1]);
  EXPECT_EQ(without, -1);
  EXPECT_EQ(without_errno, EACCES) << std::strerror(without_errno);
  EXPECT_TRUE(raised);
  ASSERT_GT(with, 0) << std::strerror(with_errno);
  int errs[2] = {-1, -1};
  EXPECT_EQ(::read(report[0], errs, sizeof errs), static_cast<ssize_t>(sizeof errs));
  const std::string procs = slurp(procs_path);
  release(with);
  EXPECT_EQ(procs, std::to_string(with) + "\n");
  EXPECT_EQ(errs[0], EACCES) << "the child opened a root-only file";
  EXPECT_EQ(errs[1], EACCES) << "the child may write root's cgroup.procs";
  EXPECT_TRUE(euid_back);
  EXPECT_TRUE(caps_back) << "the thread's capabilities differ after leave_run_ids";
  ::unlink(secret.c_str());
  ::close(cg);
  ::close(report[0]);
}

}  // namespace
}  // namespace soyaos::comet
