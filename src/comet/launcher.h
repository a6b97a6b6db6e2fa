// The Comet launcher: creates the sandboxed child and applies the layers in a fixed order.
//
//   parent (supervisor)                     child (becomes the agent, PID 1 of its namespace)
//   0. cgroup: the run's cgroup and limits, and the launcher thread placed in it (at the
//      run's plan, launch_thread.h)
//   clone3(NEWUSER|NEWNS|NEWPID|NEWIPC|NEWUTS|NEWNET|NEWCGROUP), on the launcher thread:
//   the child is born in the run's cgroup; the thread is joined, pids.max sealed
//   write uid_map/gid_map  ---- go ---->    1. mounts: build_sandbox_root (pivot_root)
//                                           1b. network: setup_sandbox_network (links,
//                                               nftables, the sockets the supervisor serves)
//                                           2. hostname, new session, stdio
//                                           3. rlimits
//                                           4. credentials: ids, capabilities, no_new_privs
//                                           5. Landlock
//                                           6. seccomp filter (listener fd)
//   receive listener, /workdir/out  <----   7. send fds, close everything else
//   and the network fds
//   answer the first execve: CONTINUE       8. execve the runtime (observed)
//
// Any failing step makes the child report "LAYER: error" and exit; the run then exits 125
// (C1). Everything the child needs is computed before clone (nothing is looked up after).
#pragma once

#include <sys/types.h>

#include <string>

#include "comet/cgroup.h"
#include "comet/launch_thread.h"
#include "comet/network.h"
#include "comet/seccomp_filter.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "policy/policy.h"

namespace soyaos::comet {

// Monotonic timestamps (ns) of the setup steps, measured in the child: each layer's cost.
enum SetupStep { kStepCloned, kStepMounts, kStepNetwork, kStepSession, kStepLimits, kStepCredentials,
                 kStepLandlock, kStepSeccomp, kStepCount };
inline constexpr const char* kSetupStepNames[kStepCount] = {
    "namespaces", "mounts", "network", "session", "rlimits", "credentials", "landlock", "seccomp"};

struct LaunchedComet {
  uint64_t launch_ns = 0;                  // before clone3, in the parent
  uint64_t step_ns[kStepCount] = {};       // end of each step, in the child
  uint64_t step_cpu_ns[kStepCount] = {};   // the child's own CPU time at each step's end
  pid_t pid = -1;          // host pid of the agent
  UniqueFd pidfd;          // for exit notification and signals
  UniqueFd control;        // the child's setup channel: error reports, then EOF on exec
  UniqueFd listener;       // seccomp user-notification fd
  UniqueFd out_dir;        // /workdir/out tmpfs, collected after the run
  UniqueFd stdout_read;    // agent's stdout and stderr (pipes)
  UniqueFd stderr_read;
  NetworkFds network;      // the sockets of the agent's netns the supervisor serves
  // The run's cgroup (no directories where the host offers none). Removed when this is
  // destroyed: after collection, since /workdir/out's tmpfs pages stay charged to it.
  RunCgroup cgroup;
};

// The header of every message on the control channel (child to parent).
struct ControlHeader {
  char kind;  // 'E' setup failure ("LAYER\0message" follows), 'R' ready (fds), 'X' exec failed
  int err;    // errno of the failure
};
inline constexpr char kControlSetupFailed = 'E';
inline constexpr char kControlReady = 'R';
inline constexpr char kControlExecFailed = 'X';

// Starts the child and runs steps 1-7; returns once the listener fd has arrived (the
// child is then blocked in execve waiting for the supervisor's answer), or the child's
// setup failure as an Error whose message is "LAYER: detail".
// `network` is the validated plan of the agent's netns (every run has one: with no egress
// entries every attempt is refused and reported). `cgroups` says where the run's cgroup goes
// (probe_cgroups); `launcher` holds that cgroup and the thread that clones the child into it
// (made from the same plan); a controller that cannot be set up fails the launch naming it.
Result<LaunchedComet> launch_comet(const policy::Policy& policy, const SeccompProgram& program,
                                   const NetworkPlan& network, const CgroupPlan& cgroups, LaunchThread& launcher);

}  // namespace soyaos::comet
