// The supervisor: one single-threaded epoll loop per run that answers seccomp
// notifications (through the Observer), relays the agent's output, enforces the wall-clock
// timeout and reaps the agent; then collects /workdir/out and reports.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comet/launcher.h"
#include "common/result.h"
#include "policy/policy.h"
#include "supervisor/observer.h"

namespace soyaos::supervisor {

enum class Ending {
  exited,       // the agent exited on its own
  signaled,     // killed by a signal (not ours)
  timed_out,    // we killed it at resources.timeout
  exec_failed,  // the runtime could not be executed
  interrupted,  // the operator interrupted soyaos (SIGINT/SIGTERM)
};

struct RunOutcome {
  Ending ending = Ending::exited;
  int status = 0;          // exit status, or the signal number
  int exec_errno = 0;      // exec_failed
  uint64_t notifications = 0;
  uint64_t violations = 0;
  uint64_t duration_us = 0;
};

// Called once per violation, as it happens (the event must be emitted at once, C8).
using ViolationCallback = std::function<void(const Violation&)>;

// Where the agent's output goes: relayed to soyaos's own stdout/stderr, or captured
// (bounded; bytes past the cap are counted, not kept) for `pack test` and the cache.
struct OutputCapture {
  bool enabled = false;
  // With `enabled`: relay as well as keep (the result cache keeps a copy of what the user
  // sees live; past the cap the bytes are still relayed, only counted as dropped).
  bool tee = false;
  size_t cap_bytes = 16u << 20;
  std::string out, err;
  uint64_t out_dropped = 0, err_dropped = 0;
};

// Runs the loop until the agent is gone and its output drained.
Result<RunOutcome> supervise(comet::LaunchedComet& comet, const policy::Policy& policy,
                             const ViolationCallback& on_violation, OutputCapture* capture = nullptr);

struct CollectReport {
  uint64_t files = 0;
  uint64_t bytes = 0;
  // "name: why" (links, FIFOs, devices, over quota): the first kMaxSkippedListed, each
  // name valid UTF-8 (invalid bytes as \xNN) and cut to kMaxResourceBytes; all counted.
  std::vector<std::string> skipped;
  uint64_t skipped_count = 0;
};
inline constexpr size_t kMaxSkippedListed = 100;

// Copies the agent's /workdir/out tree (from the fd the child sent) into `host_dir`,
// creating it. Never follows a link or opens a FIFO/device the agent planted; only
// regular files and directories are copied, up to `quota` bytes in all.
Result<CollectReport> collect_outputs(const UniqueFd& out_dir, const std::string& host_dir,
                                      uint64_t quota);

}  // namespace soyaos::supervisor
