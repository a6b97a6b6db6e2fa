// Liveness of runs being recorded (SPEC.md E4, docs/events.md `run_incomplete`).
//
// While a run's events are streamed into the Moon, the process that streams them (the
// `soyaos run` of an embedded Moon, or the daemon for its client's run) holds an
// exclusive flock on HOME/runs/RUN_ID.live. The file says who holds it (pid, boot id,
// start time, the run's identity). The kernel drops the lock when that process dies,
// however it dies (SIGKILL included), so "the lock can be taken" means "the run is dead".
// reap_dead_runs() finds such files and appends one `run_incomplete` event per run whose
// record has no run_finished, then removes the file: under the lock, and only while the
// file is still linked, so two reapers never mark a run twice.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"
#include "scope/events.h"

namespace soyaos::moon {

class Store;

// run_incomplete `reason` values.
inline constexpr const char* kIncompleteKilled = "killed";              // the recording process died
inline constexpr const char* kIncompleteRestarted = "host_restarted";   // ...in an earlier boot
inline constexpr const char* kIncompleteConnectionLost = "connection_lost";  // daemon: the client went away
inline constexpr const char* kIncompleteDaemonStopped = "daemon_died";  // daemon: it died holding the run

// HOME/runs: where the .live files are.
std::filesystem::path live_dir(const std::filesystem::path& home);
// Whether `run_id` is usable as a file name here (a ULID-like id: [0-9A-Za-z_-], 1..64).
bool valid_run_id(const std::string& run_id);

// One live run's lock, held from create() until end() or destruction. Destroying it without
// end() (the process dying, a lost connection) leaves the file for reap_dead_runs().
class LiveRun {
 public:
  // Creates HOME/runs/RUN_ID.live (fully written and locked before it appears under that
  // name). `holder`: "run" (the soyaos run process) or "daemon".
  static Result<LiveRun> create(const std::filesystem::path& home, const scope::RunContext& ctx,
                                const std::string& holder);
  LiveRun() = default;
  LiveRun(LiveRun&&) noexcept = default;
  LiveRun& operator=(LiveRun&&) noexcept = default;
  ~LiveRun() = default;
  // The run's record is complete: removes the file, then drops the lock.
  void end();
  [[nodiscard]] bool active() const { return fd_.valid(); }

 private:
  UniqueFd fd_;
  std::filesystem::path path_;
};

// Appends `run_incomplete` for run `ctx` unless its record already ends (run_finished or
// run_incomplete stored). `data_extra` is merged into the event's data. True when appended.
Result<bool> mark_incomplete(Store& store, const scope::RunContext& ctx, const std::string& reason,
                             const nlohmann::ordered_json& data_extra);

// Finds runs whose holder died (lock free) and marks each once (see above). Returns how many
// runs were marked. A file that cannot be handled now is left for the next reaper.
Result<int> reap_dead_runs(const std::filesystem::path& home, Store& store);

}  // namespace soyaos::moon
