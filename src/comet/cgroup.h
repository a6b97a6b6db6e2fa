// The Comet's cgroup layer (SPEC C9): every Comet in a cgroup of its own where the host
// allows it, so that memory (including tmpfs, shmem and memfd pages, which RLIMIT_DATA
// does not see), pids and CPU are bounded by the kernel for the whole sandbox.
//
//   probe_cgroups()      which hierarchy can hold the run's cgroup, per controller (reads
//                        /proc/self/cgroup, /proc/self/mountinfo; no side effect)
//   RunCgroup::create()  mkdir the run's cgroup, claim it (a flock on each directory, held
//                        until removal: the sweep of stale run cgroups leaves it alone) and
//                        write its limits (parent, before clone)
//   enter_this_thread()  v1: place the calling thread (the launcher thread, launch_thread.h)
//                        in it; the Comet that thread clones is born there
//   v2_fd()              v2: the directory clone3(CLONE_INTO_CGROUP) creates the Comet in
//   seal()               pids.max down to the limit once the launcher thread is gone
//   RunCgroup::add(pid)  move a process in (tests; the launcher no longer migrates)
//   RunCgroup::usage()   after the run: OOM kills, refused forks, peak memory
//   ~RunCgroup           rmdir (after collection: tmpfs pages of /workdir/out stay charged)
//
// Where: cgroup v1 (memory, pids, cpu hierarchies) under the supervisor's own cgroup when
// that is writable (as root; a delegated v1 tree otherwise); cgroup v2 under the
// supervisor's own cgroup when its controllers are delegated to us (cgroup.subtree_control
// already enables them), or as root under <cgroup2 mount>/soyaos. A controller that neither
// offers is bounded by rlimits only, and says so (run_started, `soyaos doctor`). Once a
// hierarchy is chosen, any failure to set it up refuses the run (125): never a silent
// downgrade.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "policy/policy.h"

namespace soyaos::comet {

enum class CgroupVersion { none, v1, v2 };
const char* to_string(CgroupVersion v);

// The CPU weight of a Comet relative to a default task or cgroup (1024 in v1, 100 in v2):
// half, so a busy agent of any thread count cannot take more than half of what one ordinary
// host process would get under contention.
inline constexpr uint64_t kCpuSharesV1 = 512;
inline constexpr uint64_t kCpuWeightV2 = 50;

// Where each controller of a run's cgroup would go. `parent` is a directory in the cgroup
// filesystem under which the run's cgroup is created; empty when that controller is not
// available (then version is none).
struct CgroupController {
  CgroupVersion version = CgroupVersion::none;
  std::string parent;
};
struct CgroupPlan {
  CgroupController memory, pids, cpu;
  // v2 only: controllers to enable in parent's cgroup.subtree_control first (as root under
  // <mount>/soyaos); empty when they are enabled already.
  std::vector<std::string> v2_enable;
  // Why a controller is not available, for doctor and run_started.
  std::string why_not;

  // "cgroup v1", "cgroup v2" or "rlimit" for memory and pids; "cgroup v1", "cgroup v2" or
  // "none" for cpu.
  std::string mechanism(const CgroupController& c, bool has_rlimit) const;
  // Limits that only rlimits bound ("memory", "pids"): named in run_started (C9).
  std::vector<std::string> rlimit_only() const;
};

// Parsers of the files probe_cgroups reads, exposed for tests.
// /proc/self/cgroup: "ID:CONTROLLERS:PATH" lines -> controller (or "" for v2) -> path.
std::map<std::string, std::string> parse_proc_cgroup(const std::string& text);
struct CgroupMount {
  std::string mount_point;
  std::string root;  // the mount's root inside the hierarchy (4th field of mountinfo)
};
// /proc/self/mountinfo -> controller -> mount ("" for the cgroup2 mount).
std::map<std::string, CgroupMount> parse_cgroup_mounts(const std::string& text);

// Decides from the host's files (and write access, and the euid) where each controller goes.
Result<CgroupPlan> probe_cgroups();

// A run's cgroup is "soyaos-RUN_ID" under each controller's parent; the sweep of run
// cgroups a killed soyaos left behind recognises them by this prefix (and leaves alone the
// ones a live run holds a claim on: a flock, see RunCgroup::make).
inline constexpr std::string_view kRunCgroupPrefix = "soyaos-";
inline std::string run_cgroup_name(const std::string& run_id) { return std::string(kRunCgroupPrefix) + run_id; }

// What the kernel counted for one run.
struct CgroupUsage {
  uint64_t oom_kills = 0;         // memory: the OOM killer ended a task of the run
  uint64_t memory_peak = 0;       // bytes (0 when the kernel does not say)
  uint64_t memory_failcnt = 0;    // v1: times the limit was hit (reclaim may have saved it)
  uint64_t pids_refused = 0;      // forks/threads refused at pids.max
};

class RunCgroup {
 public:
  // Creates "<parent>/<name>" for every available controller and writes the limits, with
  // pids.max one above the limit until seal(): the launcher thread counts there while it
  // clones the Comet (v1).
  static Result<RunCgroup> create(const CgroupPlan& plan, const std::string& name, const policy::Limits& limits);
  // The two halves of create(): the directories (claimed; and, v2, the fd of the run's one), then
  // the limits. Between them the cgroups are unlimited: only the launcher thread may be in
  // them then, and the Comet is cloned only after limit() succeeded (launch_thread.h).
  static Result<RunCgroup> make(const CgroupPlan& plan, const std::string& name);
  [[nodiscard]] Status limit(const policy::Limits& limits);
  RunCgroup() = default;
  RunCgroup(RunCgroup&& other) noexcept;
  RunCgroup& operator=(RunCgroup&& other) noexcept;
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;
  ~RunCgroup();

  // Moves `pid` (all its threads) into the run's cgroup in every hierarchy.
  Status add(pid_t pid) const;
  // Places the calling thread alone in every v1 directory (its TID into `tasks`); a task it
  // then clones inherits them. The first such move on the host in a while waits for an RCU
  // grace period (cgroup_threadgroup_rwsem), which is why a thread of its own does it.
  [[nodiscard]] Status enter_this_thread() const;
  // Whether the Comet is placed through v1 `tasks` (enter_this_thread).
  [[nodiscard]] bool has_v1() const { return !v1_dirs_.empty(); }
  // An O_PATH fd of the v2 directory for clone3(CLONE_INTO_CGROUP), or -1 without v2 (a
  // v2 domain cgroup takes whole processes only, so no thread can be placed there alone).
  [[nodiscard]] int v2_fd() const { return v2_fd_.get(); }
  [[nodiscard]] const std::string& v2_dir() const { return v2_dir_; }
  // pids.max to the limit, after the launcher thread has been released by the kernel: from
  // then on the Comet alone counts, with exactly `limits.pids` tasks allowed.
  [[nodiscard]] Status seal() const;
  [[nodiscard]] CgroupUsage usage() const;
  // The created directories, one per hierarchy (v2: one for all controllers).
  [[nodiscard]] const std::vector<std::string>& dirs() const { return dirs_; }
  // Removes the directories (waits up to ~1 s for exiting tasks); also done on destruction.
  void remove();

 private:
  std::vector<std::string> dirs_;
  std::string memory_dir_, pids_dir_;
  CgroupVersion memory_version_ = CgroupVersion::none;
  CgroupVersion pids_version_ = CgroupVersion::none;
  uint32_t pids_limit_ = 0;
  std::string cpu_dir_;
  CgroupVersion cpu_version_ = CgroupVersion::none;
  std::vector<std::string> v1_dirs_;  // the v1 ones of dirs_
  std::string v2_dir_;
  UniqueFd v2_fd_;
  // One per directory of dirs_, each under a shared flock: the run's claim on it, which the
  // sweep of stale run cgroups respects (an empty v2 one waits for clone3, cgroup.cc).
  std::vector<UniqueFd> claims_;
};

}  // namespace soyaos::comet
