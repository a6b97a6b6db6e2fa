// A std::chrono clock of the calling thread's CPU time, for tests that bound work (no
// blow-up on hostile input) rather than latency: wall time on a loaded machine, or under
// the sanitizers, is not a measure of work (ManifestAdversarial.DeepFlowNesting once took
// over 2 s of wall time for ~0.4 s of CPU).
#pragma once

#include <time.h>

#include <chrono>

namespace soyaos::testing {

struct ThreadCpuClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ThreadCpuClock>;
  static constexpr bool is_steady = true;
  static time_point now() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }
};

}  // namespace soyaos::testing
