// The thread that clones the Comet into its run cgroup (issue #16, SPEC C9).
//
// Moving a task into a cgroup (a `cgroup.procs` or `tasks` write) takes the kernel's
// cgroup_threadgroup_rwsem for writing, and the first writer in a while waits for an RCU
// grace period: 10-25 ms of idle wall time on this project's hosts, which used to sit
// between clone3 and the agent's start. Instead:
//   - as soon as a run is certain (`soyaos run`: its cache lookup missed, cli/cmd_run.cc;
//     other callers: the run's plan, supervisor/run.cc) the run's cgroup is made and ONE
//     thread is started that places itself alone in every v1 hierarchy of it (RunCgroup::
//     enter_this_thread); the grace period then passes while the supervisor opens the
//     Moon, compiles the policy, records run_started and commits it. The limits are
//     written at the plan (set_limits), and nothing is cloned before they are;
//   - launch_comet hands that thread the clone (clone()): a task inherits the cgroups of
//     the thread that clones it, so the Comet is born in its run cgroup, charged from its
//     first page, and nothing is ever migrated. A v2 cgroup takes no lone thread: there
//     the clone names it (clone3 CLONE_INTO_CGROUP with RunCgroup::v2_fd());
//   - the thread then ends, is joined, and once the kernel has released it (it no longer
//     counts in pids.current) pids.max comes down to the limit (RunCgroup::seal), before
//     the Comet runs anything: the agent can create exactly `limits.pids` tasks.
// Without a v1 directory (rootless on v1 hosts: rlimits only; or v2 only) no thread is
// started and the clone runs on the caller's thread, as before.
//
// Clone safety (common/clone_gate.h): the job holds the gate exclusively around clone3, as
// the caller did; meanwhile the caller is blocked in a condition-variable wait (no malloc,
// stdio or other lock held), and every other thread holds the gate when it works.
//
// The Comet's parent is the launcher thread; when it ends the kernel reparents the Comet to
// the thread group's leader (same process: waitpid, the pidfd and SIGCHLD are unchanged).
// The Comet sets its parent-death signal only after "go", which comes after the join, so
// it is tied to the supervisor's leader thread and not to the thread that is gone.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comet/cgroup.h"
#include "common/result.h"
#include "policy/policy.h"

namespace soyaos::comet {

class LaunchThread {
 public:
  // Creates the run's cgroup (RunCgroup::create) and, when it has a v1 directory, starts
  // the thread, which places itself in it at once. Nothing fails here: a cgroup that cannot
  // be created or entered, or a thread that cannot be started, is reported by clone(), so
  // the run records it like any launch failure (run_finished, exit 125).
  LaunchThread(const CgroupPlan& plan, const std::string& name, const policy::Limits& limits);
  // The same, with the limits to come (set_limits): `soyaos run` starts it at its cache
  // miss, before the Moon is opened and the policy compiled, so that the wait overlaps more.
  LaunchThread(const CgroupPlan& plan, const std::string& name);
  // From a cgroup already made and limited (tests).
  explicit LaunchThread(Result<RunCgroup> cgroup);
  // Stops and joins a thread that cloned nothing; the cgroup, unless taken, is removed.
  ~LaunchThread();
  LaunchThread(const LaunchThread&) = delete;
  LaunchThread& operator=(const LaunchThread&) = delete;

  // Writes the run's limits in its cgroup (RunCgroup::limit), from the thread that will
  // call clone(). A failure is kept and returned by clone(); clone() refuses to run
  // without the limits written.
  void set_limits(const policy::Limits& limits);
  // The plan the cgroup was made from (the run reports it: limit_mechanisms).
  [[nodiscard]] const CgroupPlan& plan() const { return plan_; }

  // Runs `job` (the clone) on the thread once it is in the run's cgroup, or on this
  // thread when there is no v1 directory; then joins the thread, waits until the kernel
  // has released it and seals the cgroup (RunCgroup::seal). Once only. Returns the job's
  // status, or the cgroup's failure (the job then does not run), naming the directory.
  // In the clone's child, `job` never returns (it runs the Comet's setup).
  Status clone(const std::function<Status()>& job);

  // The run's cgroup (empty after a failure); the caller owns it from then on.
  [[nodiscard]] const RunCgroup* cgroup() const { return cgroup_ ? &*cgroup_ : nullptr; }
  RunCgroup take_cgroup();
  // The launcher thread's host TID (0 without one): tests check it is not in the cgroup.
  [[nodiscard]] pid_t thread_tid() const { return tid_; }
  // CLOCK_MONOTONIC ns when the thread was in the run's cgroup (0 without one), for the
  // phase trace (bench/startup.sh: does the wait end before the launch?). After clone().
  [[nodiscard]] uint64_t entered_ns() const { return entered_ns_; }

 private:
  void start();
  void loop();
  // Joins the thread and waits until its task is gone from /proc (the kernel uncharges
  // its pid, cgroup_release, before it unhashes it).
  Status finish_thread();

  CgroupPlan plan_;
  std::optional<RunCgroup> cgroup_;
  bool limited_ = false;
  std::optional<Error> error_;  // the cgroup could not be created
  std::mutex mu_;
  std::condition_variable cv_;
  bool placed_ = false;         // the thread has tried to enter the cgroup (placement_)
  Status placement_;
  const std::function<Status()>* job_ = nullptr;
  bool stop_ = false;
  bool done_ = false;
  Status job_status_;
  pid_t tid_ = 0;
  uint64_t entered_ns_ = 0;
  bool used_ = false;
  std::thread thread_;
};

}  // namespace soyaos::comet
