#include "moon/group_commit.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <utility>

#include "moon/store.h"

namespace soyaos::moon {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

GroupCommitLimits GroupCommitLimits::from_env() {
  GroupCommitLimits l;
  const char* v = std::getenv("SOYAOS_MOON_GROUP_DELAY_US");
  if (v == nullptr || *v == '\0') return l;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  if (end != nullptr && *end == '\0' && us >= 0 && us <= 1'000'000) l.max_delay = std::chrono::microseconds(us);
  return l;
}

// One client's batch, on its thread's stack until `done`.
struct GroupCommit::Pending {
  std::vector<json> events;
  bool done = false;
  Status result;
};

GroupCommit::GroupCommit(fs::path home, GroupCommitLimits limits) : home_(std::move(home)), limits_(limits) {}
GroupCommit::~GroupCommit() = default;

void GroupCommit::writer_opened() {
  std::lock_guard<std::mutex> lock(mu_);
  ++writers_;
}

void GroupCommit::writer_closed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (writers_ > 0) --writers_;
  }
  cv_.notify_all();  // a leader waiting for this writer's batch stops waiting
}

GroupCommitStats GroupCommit::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status GroupCommit::append(std::vector<json> events) {
  if (events.empty()) return {};
  Pending mine;
  mine.events = std::move(events);
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&mine);
  cv_.notify_all();  // a leader gathering a group counts this batch
  while (!mine.done) {
    if (leading_) {
      cv_.wait(lock);
      continue;
    }
    leading_ = true;
    // Gather: while other writers are open, give their batches up to max_delay to arrive,
    // stopping early once every open writer has one queued or the group is full.
    auto queued_events = [&] {
      size_t n = 0;
      for (const Pending* q : queue_) n += q->events.size();
      return n;
    };
    if (limits_.max_delay.count() > 0) {
      const auto deadline = std::chrono::steady_clock::now() + limits_.max_delay;
      (void)cv_.wait_until(lock, deadline, [&] {
        const size_t want = std::min(std::max<size_t>(writers_, 1), limits_.max_requests);
        return queue_.size() >= want || queued_events() >= limits_.max_events;
      });
    }
    // The oldest batches first (arrival order is commit order); a batch is never split.
    std::vector<Pending*> group;
    size_t events_in_group = 0;
    while (!queue_.empty() && group.size() < limits_.max_requests) {
      Pending* next = queue_.front();
      if (!group.empty() && events_in_group + next->events.size() > limits_.max_events) break;
      group.push_back(next);
      events_in_group += next->events.size();
      queue_.pop_front();
    }
    lock.unlock();
    Status result;
    try {
      result = commit(group);
    } catch (const std::exception& e) {  // never leave the others waiting on a leader that is gone
      result = make_error(std::string("store events: ") + e.what());
      store_.reset();  // as after any failed transaction: a fresh connection for the next leader
    }
    lock.lock();
    for (Pending* p : group) {
      p->result = result;
      p->done = true;
    }
    ++stats_.transactions;
    if (result) {
      stats_.requests += group.size();
      stats_.events += events_in_group;
      stats_.largest = std::max<uint64_t>(stats_.largest, group.size());
    } else {
      ++stats_.failed;
    }
    leading_ = false;
    cv_.notify_all();
  }
  return mine.result;
}

Status GroupCommit::commit(const std::vector<Pending*>& group) {
  if (!store_) {
    auto s = Store::open(home_);
    if (!s) return s.error();
    store_ = std::make_unique<Store>(std::move(s.value()));
  }
  Status st;
  if (group.size() == 1) {
    st = store_->append_events(group.front()->events);
  } else {
    // One transaction for the whole group: the events of each batch stay together and in
    // order, batches in arrival order.
    // (Moved: a member's events are not used again, whatever the outcome.)
    std::vector<json> all;
    for (Pending* p : group) std::move(p->events.begin(), p->events.end(), std::back_inserter(all));
    st = store_->append_events(all);
  }
  // A failed transaction was rolled back; a fresh connection for the next leader, in case
  // this one is what failed.
  if (!st) store_.reset();
  return st;
}

}  // namespace soyaos::moon
