// Group commit of Scope events in `soyaos moon serve` (issue #16, SPEC.md E4; docs/moon.md
// "Daemon mode", "Group commit"). Each client's batch of events (a run's run_started, a
// recorder batch, a replay's cache_hit) used to be its own transaction on its own SQLite
// connection: one WAL fsync per batch, and writers queued on SQLite's lock, whose busy
// handler sleeps 1, 2, 5, 10… ms between tries. Here the batches that arrive together are
// committed in one transaction by whichever client thread is the leader at the time:
//
//   - a thread that finds no commit in progress becomes the leader; while others still
//     have runs open it waits up to `max_delay` for their batches (not at all when it is the
//     only writer), then takes the queued batches — at most `max_requests` of them and
//     `max_events` events, a batch is never split — and commits them, in arrival order, in
//     one transaction (one fsync, one signed checkpoint: Store::append_events);
//   - batches arriving while a commit is in progress wait for the next one, whose leader is
//     the first of them to run;
//   - every thread returns only once its own batch is committed (durable: synchronous=FULL)
//     or its group's transaction failed (each member then gets that error; nothing of the
//     group is stored, so a retry stores each event once).
// No thread of its own: the leaders are the daemon's client threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace soyaos::moon {

class Store;

struct GroupCommitLimits {
  size_t max_requests = 64;    // client batches merged into one transaction
  size_t max_events = 8192;    // events in one transaction (a larger single batch goes alone)
  std::chrono::microseconds max_delay{500};
  // SOYAOS_MOON_GROUP_DELAY_US (0..1000000) overrides max_delay (0: never wait; the tests
  // use a long one to make groups certain).
  static GroupCommitLimits from_env();
};

struct GroupCommitStats {
  uint64_t transactions = 0;  // commits made (each one fsync of the WAL)
  uint64_t requests = 0;      // client batches committed
  uint64_t events = 0;
  uint64_t largest = 0;       // most batches in one transaction
  uint64_t failed = 0;        // transactions that failed (their batches got the error)
};

class GroupCommit {
 public:
  // The leader's connection to HOME/moon.db is opened on first use.
  GroupCommit(std::filesystem::path home, GroupCommitLimits limits);
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Stores `events` (JSON objects, in order) durably; returns once they are committed.
  Status append(std::vector<nlohmann::ordered_json> events);

  // Writers that may send a batch soon (a client with a run in progress): a leader waits
  // for more batches only while another writer is open.
  void writer_opened();
  void writer_closed();

  [[nodiscard]] GroupCommitStats stats() const;

 private:
  struct Pending;
  // Commits `group` (the leader, without the lock held).
  Status commit(const std::vector<Pending*>& group);

  const std::filesystem::path home_;
  const GroupCommitLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending*> queue_;
  bool leading_ = false;
  size_t writers_ = 0;
  GroupCommitStats stats_;
  std::unique_ptr<Store> store_;  // used by the leader only
};

}  // namespace soyaos::moon
