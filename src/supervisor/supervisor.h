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
  interrupted,  // the operator interrupted soyaos (SIGINT/SIGTERM/SIGHUP)
};

// How the supervisor stopped the agent (timed_out, interrupted), C9: SIGTERM, then SIGKILL
// after resources.grace.
enum class Stop {
  none,          // the agent ended by itself
  graceful,      // it got SIGTERM and ended within the grace period
  killed,        // SIGKILL after the grace period (or at a second signal)
  killed_at_once,  // SIGKILL at once: grace 0, or SIGTERM at its default action (see below)
};
const char* to_string(Stop s);

struct RunOutcome {
  Ending ending = Ending::exited;
  int status = 0;          // exit status, or the signal number (interrupted: the one soyaos got)
  int exec_errno = 0;      // exec_failed
  // The first SIGINT/SIGTERM/SIGHUP soyaos received while supervising (also after the agent
  // had ended, while its output drained): the run then exits 128+N (C9). 0: none.
  int stop_signal = 0;
  Stop stop = Stop::none;
  uint64_t grace_ms = 0;   // the grace period that applied
  // What the agent itself did: its exit status, or the signal that ended it.
  int agent_status = 0;
  bool agent_signaled = false;
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
  // Where the agent's stdout is relayed: soyaos's stdout, or its stderr when stdout carries
  // the Scope events (`--events -`, docs/cli.md), so that the two stay separable.
  int relay_stdout_fd = 1;
  std::string out, err;
  uint64_t out_dropped = 0, err_dropped = 0;
  // Capturing or not: "sha256:…" and the size of every byte the agent wrote on stdout and
  // on stderr (run_finished, E5), set when supervise() returns.
  std::string out_digest, err_digest;
  uint64_t out_bytes = 0, err_bytes = 0;
};

// The signals that stop a run gracefully (C9). Blocks them in the calling thread, and so in
// every thread it creates afterwards: call it before any thread exists (the egress and DNS
// threads, the Moon client), so that only the supervisor's signalfd ever receives them and
// no thread dies of one. They stay blocked: a signal that arrives outside supervise() stays
// pending for take_pending_stop_signal(). Idempotent.
void block_stop_signals();
// Consumes a pending SIGINT/SIGTERM/SIGHUP (one that arrived while no agent was being
// supervised) and returns its number, or 0.
int take_pending_stop_signal();

// Runs the loop until the agent is gone and its output drained. On the wall-clock timeout
// or a stop signal the agent gets SIGTERM, then SIGKILL after policy.limits.grace_ms; an
// agent whose SIGTERM disposition is the default is killed at once (it is PID 1 of its
// PID namespace, where the kernel would otherwise drop a SIGTERM it does not handle, and
// the default action is to end it). A second stop signal kills at once.
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
