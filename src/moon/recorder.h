// Streams one run's events into the Moon as they happen (SPEC.md E4, C8 (4); docs/events.md
// "Durability").
//
// push() only queues (the seccomp notifier and the egress loop must not wait for a disk);
// a writer thread group-commits: it waits up to kBatchInterval after the first queued
// event (or until kBatchMax are queued) and stores the batch in one transaction — one
// fsync per batch. A capability_violation is urgent: its batch goes at once, and the
// run's first violation flags NAME@VERSION and the digest first (flag first: a failure to
// store events never costs the flag). The first event opens the run's stream
// (MoonBackend::open_run: run_started stored, the run made live).
//
// A batch that cannot be stored (a database lock held past the busy timeout, a daemon
// that fails) stays queued and is retried; the queue is bounded (kQueueMax: push() then
// waits for room, up to the store deadline). wait_durable() returns once everything
// pushed so far is durable, or an error once the store deadline has passed without it:
// the run then fails (125), never success before storage.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "moon/backend.h"
#include "scope/events.h"

namespace soyaos::moon {

inline constexpr std::chrono::milliseconds kBatchInterval{20};
inline constexpr size_t kBatchMax = 1000;
inline constexpr size_t kQueueMax = 100'000;
// How long wait_durable() (and a push() into a full queue) waits for the store: 120 s, or
// SOYAOS_MOON_STORE_DEADLINE_MS.
std::chrono::milliseconds store_deadline();

class RunRecorder {
 public:
  // Starts the writer thread (call with the stop signals blocked: it inherits the mask).
  RunRecorder(std::unique_ptr<MoonBackend> moon, scope::RunContext ctx);
  // Stops the writer. Without finish() the run stays live in the Moon, which marks it
  // run_incomplete (the process is ending abnormally).
  ~RunRecorder();
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  // Queues one event of the run (the first must be run_started), as serialized for the
  // events files: its text is what the Moon stores and hashes. Thread-safe.
  void push(const scope::Event& event);
  // Returns once every event pushed so far is durable and a pending flag is raised.
  Status wait_durable();
  // wait_durable(), then ends the run's liveness (its record is complete) and the thread.
  Status finish();
  // Events pushed / stored so far (for the bench and the summary).
  [[nodiscard]] uint64_t stored() const;
  // Runs `fn` with this run's Moon on the writer thread, right after what is queued now is
  // stored, and returns its result: the run's other uses of the Moon (keeping its manifest,
  // querying its flags) share the recorder's connection instead of opening another (issue
  // #16: each moon.db connection parses the schema and rebuilds the WAL index). Waits at
  // most store_deadline() for the writer to take it; fails when the writer has stopped.
  // Not from the writer thread; `fn` must not push().
  Status call(const std::function<Status(MoonBackend&)>& fn);

 private:
  void loop();
  // Stores what it can of `batch` (erasing what is stored); the error is the first failure.
  Status store(std::deque<scope::Event>& batch);

  struct Call {
    const std::function<Status(MoonBackend&)>* fn;
    std::optional<Status> result;  // set by the writer, under mu_
  };
  std::unique_ptr<MoonBackend> moon_;
  scope::RunContext ctx_;
  std::unique_ptr<RunStream> stream_;  // the writer thread's, after the first event
  RunStream* stream_seen_ = nullptr;   // the same, under mu_, for interrupt()

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the writer waits for events
  std::condition_variable done_cv_;  // wait_durable() and push() wait for progress
  std::deque<scope::Event> queue_;  // copies without `data`
  uint64_t pushed_ = 0;
  uint64_t stored_ = 0;
  uint64_t lost_ = 0;          // pushed into a full queue past the deadline: never stored
  bool urgent_ = false;        // a violation is queued: commit now
  bool stop_ = false;
  bool flag_seen_ = false;     // the run's first violation was pushed
  std::optional<nlohmann::ordered_json> flag_pending_;  // to be raised
  std::optional<Error> last_error_;
  bool fatal_ = false;         // retrying cannot help (a lost daemon, a refusal): give up now
  Call* call_ = nullptr;       // waiting for the writer (call())
  Call* calling_ = nullptr;    // taken by the writer, running
  std::mutex call_mu_;         // one call() at a time
  std::thread writer_;
};

}  // namespace soyaos::moon
