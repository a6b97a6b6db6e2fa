// One run of a pack in a Comet, end to end: manifest -> policy -> launch -> supervise ->
// collect -> events. Shared by `soyaos run`, `soyaos doctor` and (later) `pack test`.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "manifest/manifest.h"
#include "policy/operator_network.h"
#include "policy/policy.h"
#include "policy/secrets.h"
#include "scope/events.h"
#include "supervisor/observer.h"
#include "supervisor/supervisor.h"
#include "supervisor/violation_log.h"

namespace soyaos::supervisor {

// Exit statuses of `soyaos run` (SPEC.md C9).
inline constexpr int kExitViolation = 3;
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitSetup = 125;
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitKilled = 137;
// RunReport::upstream_failures keeps at most this many distinct lines.
inline constexpr size_t kMaxUpstreamFailures = 20;

// Emits one more event of this run (same envelope and run identity).
using EmitFn = std::function<void(const std::string& type, nlohmann::ordered_json data)>;

struct RunReport;

// How the layer above (the Moon, via the CLI) takes part in a run without the supervisor
// depending on it.
struct RunHooks {
  // Right after run_started, before before_launch: keep the run's soyapack.yaml (E5) so
  // that run_started's manifest_digest can always be resolved. An error refuses the run.
  std::function<Status(const std::string& manifest_text)> keep_manifest;
  // After run_started, before the Comet starts: e.g. warn about and emit pack_flagged.
  // An error refuses the run (125).
  std::function<Status(const scope::RunContext&, const EmitFn&)> before_launch;
  // Each event of the run as it is emitted, in order, run_started first (E4: stored as it
  // happens). Called under the run's event lock: it queues, it must not wait for a disk.
  // The event arrives serialized (the bytes the files got) with its emitter's data fields.
  std::function<void(const scope::RunContext&, const scope::Event& event)> on_event;
  // Returns once every event so far is durable: after run_started, before the Comet starts
  // (no agent runs without its run_started on disk). An error refuses the run (125).
  std::function<Status()> wait_durable;
  // After run_finished: every event durable and the run's record complete. An error makes
  // the run fail (125): success is never reported before the events are stored.
  std::function<Status()> finish;
};

struct RunRequest {
  std::filesystem::path pack_dir;
  // pack_dir's manifest as the caller already loaded it (`soyaos run`'s usage checks), so
  // that a run parses it once (issue #16); nullptr: run_pack loads it. Must outlive run_pack.
  const manifest::LoadResult* loaded = nullptr;
  // The run's cgroup and the thread that clones the Comet into it, started by the caller
  // from probe_cgroups() and named comet::run_cgroup_name(options.run_id) (`soyaos run` starts it at its
  // cache miss, so that the kernel's wait for it overlaps more, comet/launch_thread.h);
  // run_pack writes the limits into it. nullptr: run_pack starts one at its plan. Must
  // outlive run_pack.
  comet::LaunchThread* launcher = nullptr;
  policy::RunOptions options;
  std::vector<std::string> event_files;  // --events FILE (append)
  bool events_to_stdout = false;         // --events -
  bool capture_output = false;           // keep stdout/stderr in the report instead of relaying
  bool tee_output = false;               // with capture_output: relay as well (the result cache)
  RunHooks hooks;
  // The operator's network policy from the Moon's configuration (moon.yaml, C6a); the
  // defaults when there is none.
  policy::OperatorNetwork network;
  // The run's secrets (C11): the agent's environment gets NAME=placeholder for each; the
  // values stay in the supervisor (the gateway substitutes them for the secret's hosts).
  std::vector<policy::RunSecret> secrets;
  // run_started's moon_config_digest (E5): "sha256:…" of the moon.yaml bytes the operator
  // policy came from, "none" when there is no file.
  std::string moon_config_digest = "none";
  // Set by the result cache (C10) when it is armed: the key this run's result will be
  // stored under, given the finished report; "" when the run does not qualify. Recorded
  // as run_finished's cache_key.
  std::function<std::string(const RunReport&)> result_cache_key;
  // `soyaos pack learn` (SPEC.md C13): every layer stays in force, but each attempt beyond
  // the manifest is a `learn_observed` event (not capability_violation: nothing is flagged),
  // the DNS stub answers undeclared names with learning addresses and the gateway reads and
  // closes what no entry allows (docs/network.md, Learning). `learn_record` goes into
  // run_started as "learn" (round, what was added).
  bool learn = false;
  nlohmann::ordered_json learn_record;
  // Applied to the pack's manifest after it is loaded, before the policy is compiled: a
  // learn round's effective manifest (the entries learned so far). Not the file: the Moon
  // keeps soyapack.yaml as it is, run_started's capabilities show what was in force.
  std::function<void(manifest::Manifest&)> amend_manifest;
};

struct RunReport {
  int exit_code = kExitSetup;
  std::string run_id;
  std::string error;                  // set when exit_code is 125/126 before the agent ran
  // The violations emitted as events, in order: bounded (violation_log.h), so the first
  // of each distinct resource up to kMaxDistinct and the first kMaxRepeatEvents in all.
  std::vector<Violation> violations;
  uint64_t violation_count = 0;  // every violation, emitted, aggregated or dropped
  std::vector<ViolationLog::Aggregate> violation_aggregates;  // repeats not emitted
  uint64_t violations_dropped = 0;  // past kMaxDistinct: counted only
  // Hard limits the kernel or the egress gateway enforced (limit_exceeded events), one
  // sentence each for stderr.
  std::vector<std::string> limits_exceeded;
  RunOutcome outcome;
  CollectReport outputs;
  OutputCapture captured;             // when capture_output
  std::string out_dir;
  // Egress entries (key paths, e.g. "capabilities.egress[0]") that relayed at least one
  // connection or flow (from egress_opened), and "moon-proxy" when the Moon proxy relayed
  // one: what `pack test` counts as exercised.
  std::vector<std::string> egress_used;
  // Upstreams the gateway, a UDP relay or the Moon proxy could not reach, one line each
  // ("api.example.com:443/https: connect 127.0.0.1:8443: Connection refused"), distinct,
  // at most kMaxUpstreamFailures: the agent saw only a reset or a 502, the summary says why.
  std::vector<std::string> upstream_failures;
};

// Never throws; every failure is in the report (exit 125 with `error`).
RunReport run_pack(const RunRequest& request);

}  // namespace soyaos::supervisor
