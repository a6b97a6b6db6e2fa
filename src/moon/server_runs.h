// The daemon's side of run streams (SPEC.md E4, E5; docs/moon.md "Daemon mode"): the runs a
// client started on its connection, their liveness, and who may write what.
//
//   run_begin  {run_id, event}     registers the run on this connection: `event` is its
//                                  run_started (or a replay's cache_hit), for a run id the
//                                  store has no event of; stored durably; the run is live
//   run_events {run_id, events}    a batch of that run's events, one transaction
//   run_flag   {run_id, violation} C8 (4): flags the run's own NAME@VERSION and digest
//   run_end    {run_id}            the record is complete; the run is no longer live
//
// Every stored event of a client gets the CloudEvents extension attributes `soyaosuid` and
// `soyaosuser`: the connection's peer (SO_PEERCRED), set by the daemon (a client's own
// values are replaced). Events or flags for a run not started on the connection are
// refused. When the connection ends with runs not ended, each gets `run_incomplete`
// (reason connection_lost). With a GroupCommit (the daemon's), every batch of events is
// committed through it, together with other clients' batches (moon/group_commit.h); each
// request is still answered only once its own events are durable.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "moon/backend.h"
#include "moon/group_commit.h"
#include "moon/live_runs.h"

namespace soyaos::moon {

struct ConnRun {
  scope::RunContext ctx;
  LiveRun live;
};

// The runs of one client connection.
class ConnRuns {
 public:
  ConnRuns(std::filesystem::path home, uid_t peer_uid, bool peer_known, GroupCommit* commits = nullptr)
      : home_(std::move(home)), uid_(peer_uid), known_(peer_known), commits_(commits) {}
  ConnRuns(const ConnRuns&) = delete;
  ConnRuns& operator=(const ConnRuns&) = delete;
  ~ConnRuns();

  // Handles `op` when it is one of the run ops, or the older `append_events` / `flag`
  // (held to the same rule); nullopt for any other op.
  std::optional<Result<nlohmann::ordered_json>> handle(MoonBackend& moon, const std::string& op,
                                                       const nlohmann::ordered_json& req);
  // The connection ended: runs not ended are marked run_incomplete. Returns log lines.
  std::vector<std::string> close();
  [[nodiscard]] bool any() const { return !runs_.empty(); }

 private:
  Result<nlohmann::ordered_json> begin(MoonBackend& moon, const nlohmann::ordered_json& req);
  Result<nlohmann::ordered_json> events(MoonBackend& moon, const std::string& run_id,
                                        const nlohmann::ordered_json& events);
  Result<nlohmann::ordered_json> flag(MoonBackend& moon, const std::string& run_id,
                                      const nlohmann::ordered_json& violation);
  // The event with the peer's attribution; an error when it is not one of `run_id`'s.
  Result<nlohmann::ordered_json> attributed(const nlohmann::ordered_json& e, const std::string& run_id) const;
  // Stores `rows` durably: through the group commit when there is one, else `moon`.
  Status store(MoonBackend& moon, std::vector<nlohmann::ordered_json> rows);
  // A run of this connection ended (or failed to begin): one writer less for the group commit.
  void writer_closed();

  std::filesystem::path home_;
  uid_t uid_;
  bool known_;
  GroupCommit* commits_;
  std::map<std::string, ConnRun> runs_;
};

}  // namespace soyaos::moon
