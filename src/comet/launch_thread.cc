#include "comet/launch_thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <system_error>

namespace soyaos::comet {

LaunchThread::LaunchThread(const CgroupPlan& plan, const std::string& name, const policy::Limits& limits)
    : LaunchThread(plan, name) {
  set_limits(limits);
}

LaunchThread::LaunchThread(const CgroupPlan& plan, const std::string& name) : plan_(plan) {
  auto cgroup = RunCgroup::make(plan, name);
  if (!cgroup) {
    error_ = cgroup.error();
    return;
  }
  cgroup_.emplace(std::move(cgroup).value());
  if (cgroup_->has_v1()) start();
}

LaunchThread::LaunchThread(Result<RunCgroup> cgroup) : limited_(true) {
  if (!cgroup) {
    error_ = cgroup.error();
    return;
  }
  cgroup_.emplace(std::move(cgroup).value());
  if (cgroup_->has_v1()) start();
}

void LaunchThread::set_limits(const policy::Limits& limits) {
  if (error_ || !cgroup_) return;
  // The thread may be entering the cgroup meanwhile: other files, and nothing is cloned
  // before this returns (clone() runs on the caller's side after it).
  if (auto s = cgroup_->limit(limits); !s) {
    error_ = s.error();
    return;
  }
  limited_ = true;
}

LaunchThread::~LaunchThread() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    (void)finish_thread();  // before ~RunCgroup: rmdir needs the thread gone
  }
}

void LaunchThread::start() {
  // The thread takes no signal: the supervisor's stop signals are read from its signalfd
  // (block_stop_signals, supervisor/supervisor.h), and no handler may run on this thread
  // around the clone. Blocked before it starts, so that it is born with all blocked.
  sigset_t all, old;
  sigfillset(&all);
  (void)::pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::system_error& e) {
    // pthread_create refused (the supervisor at its own pids or RLIMIT_NPROC limit): the
    // launch reports it like any other (run_finished, exit 125), with the mask restored.
    error_ = Error{e.code().value(), "cgroup: start the thread that enters the run's cgroup"};
  }
  (void)::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void LaunchThread::loop() {
  // The grace-period wait happens here, while the supervisor goes on with the run.
  Status placed = cgroup_->enter_this_thread();
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  std::unique_lock lock(mu_);
  entered_ns_ = static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
  tid_ = ::gettid();
  placement_ = std::move(placed);
  placed_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
  if (stop_ || job_ == nullptr) return;
  const std::function<Status()>* job = job_;
  lock.unlock();  // the clone's child must not be a copy of a thread holding mu_
  Status s = (*job)();
  lock.lock();
  job_status_ = std::move(s);
  done_ = true;
  cv_.notify_all();
}

Status LaunchThread::finish_thread() {
  if (!thread_.joinable()) return {};
  thread_.join();
  // join returns when the thread's exit clears its TID (early in do_exit); its pid is
  // uncharged from pids.current only at release_task, just before its /proc entry goes.
  const std::string task = "/proc/self/task/" + std::to_string(tid_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int tries = 0;; ++tries) {
    struct stat st {};
    if (::stat(task.c_str(), &st) != 0) {
      if (errno == ENOENT) return {};
      return errno_error("cgroup: wait for the launcher thread's release: stat " + task);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return make_error("cgroup: the launcher thread " + std::to_string(tid_) + " was not released by the kernel in 5 s",
                        EBUSY);
    }
    if (tries < 100) {
      (void)::sched_yield();
    } else {
      struct timespec ms {0, 1'000'000};
      (void)::nanosleep(&ms, nullptr);
    }
  }
}

Status LaunchThread::clone(const std::function<Status()>& job) {
  if (used_) return make_error("launch: the Comet was already cloned");
  used_ = true;
  if (error_) return *error_;
  if (!limited_) return make_error("launch: the run's cgroup has no limits written (set_limits)");
  if (!thread_.joinable()) {
    // No v1 directory: nothing to enter; the clone names a v2 cgroup itself, if any.
    if (auto s = job(); !s) return s;
    return cgroup_->seal();
  }
  Status result;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return placed_; });
    if (placement_) {
      job_ = &job;
      cv_.notify_all();
      // Blocked here, holding no lock of malloc's or stdio's, while the thread clones.
      cv_.wait(lock, [&] { return done_; });
      result = job_status_;
    } else {
      result = placement_;
      stop_ = true;
      cv_.notify_all();
    }
  }
  Status finished = finish_thread();
  if (!result) return result;
  if (!finished) return finished;
  return cgroup_->seal();
}

RunCgroup LaunchThread::take_cgroup() {
  if (!cgroup_) return {};
  RunCgroup out = std::move(*cgroup_);
  cgroup_.reset();
  return out;
}

}  // namespace soyaos::comet
