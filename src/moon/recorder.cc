#include "moon/recorder.h"

#include "common/clone_gate.h"

#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace soyaos::moon {
using json = nlohmann::ordered_json;

std::chrono::milliseconds store_deadline() {
  constexpr std::chrono::milliseconds kDefault{120'000};
  const char* v = std::getenv("SOYAOS_MOON_STORE_DEADLINE_MS");
  if (v == nullptr || *v == '\0') return kDefault;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  if (end == nullptr || *end != '\0' || ms < 0 || ms > 86'400'000) return kDefault;
  return std::chrono::milliseconds(ms);
}

namespace {

// "120 s", or "300 ms" for a deadline under a second (SOYAOS_MOON_STORE_DEADLINE_MS).
std::string deadline_text() {
  const auto d = store_deadline();
  if (d < std::chrono::seconds(1)) return std::to_string(d.count()) + " ms";
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

}  // namespace

RunRecorder::RunRecorder(std::unique_ptr<MoonBackend> moon, scope::RunContext ctx)
    : moon_(std::move(moon)), ctx_(std::move(ctx)), writer_([this] { loop(); }) {}

RunRecorder::~RunRecorder() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void RunRecorder::push(const scope::Event& event) {
  std::unique_lock lock(mu_);
  if (queue_.size() >= kQueueMax) {
    // The store is not keeping up (or not answering): the emitting thread waits for room,
    // which slows the agent instead of growing memory without bound.
    const bool room = done_cv_.wait_for(lock, store_deadline(), [&] { return queue_.size() < kQueueMax || stop_; });
    if (!room || stop_) {
      ++lost_;
      return;
    }
  }
  const bool violation = event.type == "capability_violation";
  if (violation) {
    urgent_ = true;  // C8 (2), (4): stored and flagged at once, not at the next tick
    if (!flag_seen_) {
      // The run's first violation only: its object, for the flag, is read back from its
      // text (the same fields and values; ViolationLog bounds how many there are).
      json v = json::parse(event.json(), nullptr, false);
      // (It always parses; if it did not, the flag would still be raised, naming less.)
      if (v.is_discarded()) v = json{{"type", event.type}, {"time", event.time}};
      flag_seen_ = true;
      flag_pending_ = std::move(v);
    }
  }
  scope::Event& queued = queue_.emplace_back(event);
  queued.data = nullptr;  // the emitter's object does not outlive its emit
  ++pushed_;
  const bool wake = violation || queue_.size() == 1 || queue_.size() >= kBatchMax;
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

Status RunRecorder::wait_durable() {
  std::unique_lock lock(mu_);
  urgent_ = true;
  work_cv_.notify_one();
  const bool done = done_cv_.wait_for(lock, store_deadline(), [&] {
    return (stored_ + lost_ == pushed_ && !flag_pending_) || stop_ || fatal_;
  });
  if (done && lost_ == 0 && stored_ == pushed_ && !flag_pending_) return {};
  const uint64_t missing = pushed_ - stored_;
  std::string what = std::to_string(missing) + " event(s) of run " + ctx_.run_id;
  if (flag_pending_) what += " and the flag of " + ctx_.pack + "@" + ctx_.version;
  what += " could not be stored in the Moon";
  if (!fatal_) {
    what += " within " + deadline_text();
  }
  if (last_error_) what += ": " + last_error_->describe();
  return make_error(what, last_error_ ? last_error_->err : 0);
}

Status RunRecorder::finish() {
  Status s = wait_durable();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    // Given up: a request still waiting on the daemon must not hold the exit.
    if (!s && stream_seen_ != nullptr) stream_seen_->interrupt();
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (!s) return s;
  if (!stream_) return make_error("run " + ctx_.run_id + ": no event was recorded");
  return stream_->end();
}

Status RunRecorder::call(const std::function<Status(MoonBackend&)>& fn) {
  std::lock_guard one(call_mu_);
  Call c{&fn, std::nullopt};
  std::unique_lock lock(mu_);
  // Under mu_: why the writer will not take a call (it stopped, or gave up on the Moon).
  auto stopped = [&] {
    return make_error("run " + ctx_.run_id + ": the Moon's writer has stopped" +
                          (last_error_ ? ": " + last_error_->describe() : std::string()),
                      last_error_ ? last_error_->err : 0);
  };
  if (stop_ || fatal_) return stopped();
  call_ = &c;
  urgent_ = true;  // no group-commit wait: the caller is waiting
  work_cv_.notify_one();
  done_cv_.wait_for(lock, store_deadline(), [&] { return c.result.has_value() || stop_ || fatal_; });
  if (call_ == &c) call_ = nullptr;  // never taken: withdrawn
  // Taken: the writer runs it to the end (a bounded Moon operation) and c lives until then.
  done_cv_.wait(lock, [&] { return calling_ != &c; });
  if (c.result) return *c.result;
  // Woken by a fatal error before the deadline: that error, not a deadline never reached.
  if (stop_ || fatal_) return stopped();
  return make_error("run " + ctx_.run_id + ": the Moon's writer did not take the request within " + deadline_text() +
                        (last_error_ ? ": " + last_error_->describe() : std::string()),
                    last_error_ ? last_error_->err : 0);
}

uint64_t RunRecorder::stored() const {
  std::lock_guard lock(mu_);
  return stored_;
}

Status RunRecorder::store(std::deque<scope::Event>& batch) {
  if (!stream_) {
    if (batch.empty()) return {};
    auto opened = moon_->open_run_serialized(ctx_, batch.front());
    if (!opened) return opened.error();
    stream_ = std::move(opened.value());
    batch.pop_front();
    std::lock_guard lock(mu_);
    stream_seen_ = stream_.get();
  }
  std::optional<json> flag;
  {
    std::lock_guard lock(mu_);
    flag = flag_pending_;
  }
  if (flag) {
    // Flag first (C8 (4)): raised before the batch holding the violation is stored.
    auto f = stream_->flag(*flag);
    if (f) {
      std::lock_guard lock(mu_);
      flag_pending_.reset();
    } else {
      // Not yet: the events wait too (both are retried), so that the record never holds
      // the violation without its flag before it.
      return f.error();
    }
  }
  if (!batch.empty()) {
    // Taken from the deque's blocks into one contiguous span by move: no copy of any text.
    std::vector<scope::Event> rows(std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
    Status s = stream_->append_serialized(rows);
    if (!s) {
      // Back, in order, for the retry.
      std::move(rows.begin(), rows.end(), batch.begin());
      return s;
    }
    batch.clear();
  }
  return {};
}

void RunRecorder::loop() {
  // Held while this thread works, released while it waits (common/clone_gate.h): a Comet
  // may be cloned from the emitting thread at any time.
  std::shared_lock gate(clone_gate());
  auto backoff = std::chrono::milliseconds(20);
  for (;;) {
    std::deque<scope::Event> batch;
    {
      std::unique_lock lock(mu_);
      gate.unlock();
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty() || flag_pending_.has_value() || call_ != nullptr; });
      if (stop_) return;
      // Group commit: more events join this batch for up to kBatchInterval.
      if (!urgent_ && queue_.size() < kBatchMax) {
        work_cv_.wait_for(lock, kBatchInterval, [&] { return stop_ || urgent_ || queue_.size() >= kBatchMax; });
        if (stop_) return;
      }
      lock.unlock();  // gate before mu_, as everywhere: never wait for the gate holding mu_
      gate.lock();
      lock.lock();
      urgent_ = false;
      batch.swap(queue_);
      calling_ = std::exchange(call_, nullptr);
    }
    const size_t taken = batch.size();
    Status s = store(batch);
    bool failed = false;
    {
      std::lock_guard lock(mu_);
      stored_ += taken - batch.size();
      if (!s) {
        last_error_ = s.error();
        failed = true;
        const int e = s.error().err;
        if ((stream_ && stream_->broken()) || e == EPERM || e == EINVAL || e == EEXIST) fatal_ = true;
        // Not stored: back at the front, in order, to be retried with what came since.
        for (auto it = batch.rbegin(); it != batch.rend(); ++it) queue_.push_front(std::move(*it));
      } else {
        last_error_.reset();
      }
    }
    if (calling_ != nullptr) {
      // call(): after the batch (so the run's events stay first), whatever its outcome; the
      // caller waits until calling_ is cleared, so the Call outlives this.
      Status r = (*calling_->fn)(*moon_);
      std::lock_guard lock(mu_);
      calling_->result = std::move(r);
      calling_ = nullptr;
    }
    done_cv_.notify_all();
    if (failed) {
      gate.unlock();
      std::unique_lock lock(mu_);
      work_cv_.wait_for(lock, backoff, [&] { return stop_; });
      if (stop_ || fatal_) return;
      lock.unlock();
      gate.lock();
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    } else {
      backoff = std::chrono::milliseconds(20);
    }
  }
}

}  // namespace soyaos::moon
