// The Moon as the CLI sees it (docs/moon.md "Daemon mode"): one interface, two
// implementations.
//
//   - embedded: this process opens $SOYAOS_HOME/moon.db and the OCI layout itself
//     (Registry, Store: the code paths of embedded mode);
//   - daemon: requests go over a unix socket to `soyaos moon serve`, which executes them
//     against its own embedded Moon (moon/server.h; wire format in moon/wire.h).
//
// open_moon() picks one:
//   1. SOYAOS_MOON_SOCKET=PATH set (non-empty): the daemon at PATH, or an error when it
//      does not answer — never a silent fallback (the operator asked for that daemon);
//   2. else HOME/moon.sock exists and answers: that daemon (when it stops answering
//      before a request was sent, the request falls back to the embedded Moon of HOME);
//   3. else the embedded Moon of HOME.
// Library code: errors are values, nothing is printed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "moon/flag_travel.h"
#include "moon/registry.h"
#include "moon/store.h"
#include "scope/events.h"

namespace soyaos::moon {

// The environment variable naming the daemon's socket explicitly.
inline constexpr const char* kSocketEnv = "SOYAOS_MOON_SOCKET";
// The default socket of a home: HOME/moon.sock.
std::filesystem::path default_socket(const std::filesystem::path& home);

// A push's outcome, in a form that crosses the socket: diagnostics already formatted
// ("FILE:LINE:COL: error: …", FILE being the pushed directory), lint findings as the
// text `soyaos pack lint` prints (empty when none).
struct PushReply {
  PushOutcome outcome = PushOutcome::pushed;
  PackRecord pack;
  std::string attempted_digest;
  std::vector<std::string> diagnostics;
  std::string findings_text;
};

struct MoonStatus {
  bool daemon = false;
  std::string socket;        // daemon: the socket path
  std::string home;          // the state directory the Moon uses
  int64_t packs = 0;         // pushed pack versions
  int64_t events = 0;        // stored Scope events
  // daemon only:
  int64_t pid = 0;
  std::string started_at;    // RFC 3339 UTC
  int64_t uptime_s = 0;
  int64_t clients = 0;       // connections being served, this one included
  std::string version;       // the daemon's soyaos version
  // Embedded: a socket file that did not answer (a daemon that died), else empty.
  std::string stale_socket;
};

// One run's record being streamed into the Moon (E4): the run's events arrive in batches
// while it goes, each batch one durable transaction, and the run is live (live_runs.h)
// until end(). Destroyed without end(), the run is marked run_incomplete by the Moon.
class RunStream {
 public:
  virtual ~RunStream() = default;
  // Appends a batch of this run's events (each with data.run_id of this run); returns once
  // they are durable (EventStore::append).
  virtual Status append(std::span<const nlohmann::ordered_json> events) = 0;
  // The same for events already serialized (scope::EventFormat): the embedded Moon stores
  // their text as it is; by default (the daemon's stream) each is parsed back into an object
  // and sent, which the Moon then serializes to the same text.
  virtual Status append_serialized(std::span<const scope::Event> events);
  // C8 (4) at once: flags this run's NAME@VERSION and digest with `violation` (the run's
  // first capability_violation event) as its reason; the Moon stores `pack_flagged`.
  virtual Result<bool> flag(const nlohmann::ordered_json& violation) = 0;
  // The record is complete (its run_finished, or its only event for a replay, is stored).
  virtual Status end() = 0;
  // The stream cannot store anything any more (a lost daemon connection): do not retry.
  [[nodiscard]] virtual bool broken() const { return false; }
  // From another thread: the run gives up on storing (its deadline passed); a request
  // waiting for the daemon returns at once. Nothing else may be called afterwards.
  virtual void interrupt() {}
};

class MoonBackend {
 public:
  virtual ~MoonBackend() = default;
  [[nodiscard]] virtual bool is_daemon() const = 0;
  // "daemon at PATH" / "embedded at HOME".
  [[nodiscard]] virtual std::string describe() const = 0;

  // ---- registry (T3, T4) ----
  // `actor` is this process's user (current_actor()); the daemon records its peer's uid.
  virtual Result<PushReply> push(const std::filesystem::path& dir, const Actor& actor) = 0;
  virtual Result<PackRecord> pull(const PackRef& ref, const std::filesystem::path& dest) = 0;
  virtual Result<PackRecord> get(const PackRef& ref) = 0;
  virtual Result<std::vector<PackRecord>> list() = 0;
  virtual Result<std::optional<PackRecord>> find_by_digest(const std::string& digest) = 0;

  // ---- flags (C8 (4)) ----
  // `digest` (optional): flags raised on that tree digest count too (directory runs).
  virtual Result<std::optional<FlagRecord>> active_flag(const std::string& name, const std::string& version,
                                                        const std::string& digest) = 0;
  virtual Result<std::vector<FlagRecord>> flags(const std::string& name, const std::string& version,
                                                const std::string& digest) = 0;
  // `actor` is this process's user (current_actor()); the daemon ignores it and records
  // its peer's uid (SO_PEERCRED) instead.
  virtual Result<int> unflag(const std::string& name, const std::string& version, const std::string& reason,
                             const Actor& actor) = 0;
  // `actor`: as for unflag (the user whose run raised the flag).
  virtual Result<bool> flag(const std::string& name, const std::string& version, const std::string& digest,
                            const std::string& run_id, const nlohmann::ordered_json& violation,
                            const Actor& actor) = 0;

  // ---- flags that travel (C12, C8 (4); moon/flag_travel.h, cli/remote_flags.h) ----
  // Remembers that content `origin.tree_digest` came from a registry: a later violation of
  // it is queued for that registry. The daemon takes it from root or the Moon's owner, or
  // for a repository the operator approved a version of (a client must not point the
  // flags of other users' runs at a registry of its choosing).
  virtual Status add_remote_origin(const RemoteOrigin& origin) = 0;
  // A flag read from a registry (flag_travel.h). `reported_by`: who read it, for the
  // event's data.reported_by (nullopt: nobody named); the daemon ignores it, checks the
  // flag again and names its peer. True when new.
  virtual Result<bool> add_received_flag(const ReceivedFlag& flag, const std::optional<Actor>& reported_by) = 0;
  // After run `run_id` had a violation: queues its flag for every registry its content came
  // from. Embedded: from the arguments. Daemon: only `run_id` is sent; the daemon takes the
  // tree digest and the first violation from its own record of that run, which must be the
  // peer's run (or the peer root or the Moon's owner). `tree_digest` is called only by the
  // embedded Moon, which needs it (hashing a pack reads all of it: a daemon client skips that).
  using TreeDigestFn = std::function<Result<std::string>()>;
  virtual Result<FlagQueueReport> queue_run_flag(const std::string& run_id, const TreeDigestFn& tree_digest,
                                                 const std::string& surface, const std::string& resource) = 0;
  // Unpublished flags for `registry` ("" any), oldest first, at most `limit` (at most 64
  // through the daemon); `due_only`: only those whose backoff has passed and that no
  // publisher holds (claim_queued_flag). `run_uid` >= 0: only the flags of runs the daemon
  // attributed to that uid (-1: all; a daemon answers a client by its peer's uid itself).
  virtual Result<std::vector<QueuedFlag>> queued_flags(const std::string& registry, bool due_only, int64_t limit,
                                                       int64_t run_uid) = 0;
  // One attempt's outcome: published as `referrer`, else failed with `error` (retried after
  // a backoff). The daemon takes it from root, the Moon's owner, or the user whose run
  // raised the flag.
  virtual Status flag_publish_result(int64_t id, const std::string& referrer, const std::string& error) = 0;
  // Before pushing queued flag `id`: takes it for this publisher (`by`, for diagnostics; the
  // daemon names its peer instead). False when it is published or another publisher holds
  // it (the client's gate and `moon serve` never push the same flag together); released by
  // flag_publish_result. The daemon takes it from root, the Moon's owner, or the run's user.
  virtual Result<bool> claim_queued_flag(int64_t id, const std::string& by) = 0;

  // ---- manifests of runs (E5) ----
  // Keeps a run's soyapack.yaml bytes; returns "sha256:…" of them (the Moon computes it).
  virtual Result<std::string> keep_manifest(const std::string& text) = 0;
  // The manifest stored under `digest` (run_started's manifest_digest), nullopt if none.
  virtual Result<std::optional<std::string>> manifest(const std::string& digest) = 0;

  // ---- Scope events (E3, E4) ----
  // Starts streaming run `ctx`: stores `first` (run_started, or cache_hit of a replay)
  // durably and makes the run live. The daemon refuses a run id it already has events of.
  virtual Result<std::unique_ptr<RunStream>> open_run(const scope::RunContext& ctx,
                                                      const nlohmann::ordered_json& first) = 0;
  // The same with `first` already serialized: the embedded Moon stores its text as it is;
  // by default (the daemon) it is parsed back into an object for open_run.
  virtual Result<std::unique_ptr<RunStream>> open_run_serialized(const scope::RunContext& ctx,
                                                                 const scope::Event& first);
  // Returns once the events are durable (one transaction), as EventStore::append.
  // Daemon mode: only the events of one new run (a replay's cache_hit), as open_run + end.
  virtual Status append_events(std::span<const nlohmann::ordered_json> events) = 0;
  virtual Result<std::vector<StoredEvent>> query_events(const EventQuery& query) = 0;

  // ---- signatures and approvals of registry packs (C12; moon/consent.h) ----
  // `sig.by`, `approval.by` and an event's data.actor are this process's user; the daemon
  // replaces them with its peer's uid (SO_PEERCRED), as it does for runs. `event`:
  // pack_signed (or null) for a signature, pack_approved for an approval. The daemon takes
  // approvals only from root or the Moon's owner (they let wider packs run for everyone).
  virtual Result<bool> add_signature(const SignatureRecord& sig, const nlohmann::ordered_json& event) = 0;
  virtual Result<std::vector<SignatureRecord>> signatures(const std::string& manifest_digest) = 0;
  virtual Status add_approval(const ApprovalRecord& approval, const nlohmann::ordered_json& event) = 0;
  virtual Result<std::optional<ApprovalRecord>> last_approval(const std::string& repository) = 0;
  virtual Result<std::vector<ApprovalRecord>> approvals_of(const std::string& digest) = 0;
  // A Moon event about a pack that goes with no record (pack_refused), actor as above.
  virtual Status record_pack_event(const nlohmann::ordered_json& event) = 0;
  // The bytes of the OCI image manifest `digest` of a pushed pack (HOME/oci/blobs),
  // checked against the digest; what `pack sign NAME@VERSION` signs.
  virtual Result<std::string> oci_manifest(const std::string& digest) = 0;

  virtual Result<MoonStatus> status() = 0;
};

// The user of `uid` (its name from the password database, "" when it has none).
Actor actor_for_uid(int64_t uid);
// This process's real user.
Actor current_actor();

// The embedded Moon of `home` (opened now: an unusable home is an error here). `reap`: mark
// the runs whose soyaos died run_incomplete first (E4); `moon serve`'s flag publisher,
// which opens one every minute, does not.
Result<std::unique_ptr<MoonBackend>> open_embedded(const std::filesystem::path& home, bool reap = true);
// Run `ctx` continued in the embedded Moon of `home` (live from now, nothing stored yet):
// open_run of the embedded Moon, and the fallback of a daemon that died during a run.
Result<std::unique_ptr<RunStream>> continue_run_embedded(const std::filesystem::path& home,
                                                         const scope::RunContext& ctx);
// The daemon at `socket`: checks now that it answers (a `hello`). `fallback_home`: when
// set, a later request whose connection cannot be made falls back to that embedded Moon.
Result<std::unique_ptr<MoonBackend>> open_remote(const std::filesystem::path& socket,
                                                 std::optional<std::filesystem::path> fallback_home);
// The selection described above.
Result<std::unique_ptr<MoonBackend>> open_moon(const std::filesystem::path& home);

// ---- the JSON forms used on the wire (also `--format json` of `moon status`) ----
// Who did something (a flag's cleared_by, a signature's or an approval's by, an event's
// data.actor): {"uid": N, "user": NAME or null}; read back, anything else is uid -1 (unknown).
nlohmann::ordered_json actor_to_json(const Actor& actor);
Actor actor_from_json(const nlohmann::ordered_json& j);
nlohmann::ordered_json to_json(const PackRecord&);
PackRecord pack_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const FlagRecord&);
FlagRecord flag_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const StoredEvent&);
StoredEvent event_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const EventQuery&);
EventQuery query_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const MoonStatus&);
MoonStatus status_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const PushReply&);
PushReply push_reply_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const SignatureRecord&);
SignatureRecord signature_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const ApprovalRecord&);
ApprovalRecord approval_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const RemoteOrigin&);
RemoteOrigin origin_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const QueuedFlag&);
QueuedFlag queued_flag_from_json(const nlohmann::ordered_json&);
nlohmann::ordered_json to_json(const FlagQueueReport&);
FlagQueueReport queue_report_from_json(const nlohmann::ordered_json&);
// The event types a client may have the Moon store with each request above.
inline constexpr const char* kSignedEvent = "pack_signed";
inline constexpr const char* kApprovedEvent = "pack_approved";
inline constexpr const char* kRefusedEvent = "pack_refused";

// Counts for status(): packs and events, read from HOME/moon.db (read-only connection).
Status count_state(const std::filesystem::path& home, MoonStatus& out);

}  // namespace soyaos::moon
