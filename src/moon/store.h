// The Moon's SQLite store, $SOYAOS_HOME/moon.db (docs/moon.md): the registry's index of
// pushed packs, the flags raised on pack versions (C8(4)) and the Scope events (E3, E4).
//
// Durability: WAL journal with synchronous=FULL, so a transaction is on disk (the WAL is
// fsynced) when its COMMIT returns; every multi-row write is one transaction taken with
// BEGIN IMMEDIATE (writers queue on the lock, busy_timeout 30 s, instead of failing on
// a read-to-write upgrade). Any number of processes may open the store at once.
// Library code: errors are values, nothing is printed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

struct sqlite3;

namespace soyaos::moon {

// Schema version kept in PRAGMA user_version. A database from a newer soyaos is refused.
inline constexpr int kSchemaVersion = 9;

namespace chain {
class MoonKey;
struct Checkpoint;
}  // namespace chain

// $SOYAOS_HOME, else $XDG_DATA_HOME/soyaos, else $HOME/.local/share/soyaos. Not created.
Result<std::filesystem::path> default_home();

// One pushed pack version (a row of `packs`).
struct PackRecord {
  int64_t id = 0;               // insertion order (AUTOINCREMENT): "pushed later" is id >
  std::string name;
  std::string version;
  std::string digest;           // "sha256:HEX" of the canonical archive (the layer blob)
  std::string tree_digest;      // "sha256:HEX" of common/digest.h tree_digest() of the pack
  std::string oci_manifest;     // "sha256:HEX" of the OCI image manifest blob
  int64_t oci_manifest_size = 0;
  int64_t size = 0;             // archive bytes
  std::string pushed_at;        // RFC 3339 UTC
  std::string manifest;         // soyapack.yaml as pushed
};

// One event already serialized (scope::Event): stored and hashed as it is. `time` is the
// event's own (the indexed column); an empty run_id, pack or version is stored as NULL.
struct EventRow {
  std::string_view json;
  std::string_view time;
  std::string_view type;
  std::string_view run_id;
  std::string_view pack;
  std::string_view version;
};

// Who changed the Moon's state by hand (`soyaos pack unflag`): in daemon mode the daemon
// takes the uid from the socket's peer credentials (SO_PEERCRED), never from the client.
struct Actor {
  int64_t uid = -1;
  std::string user;             // the uid's user name, "" when it has none
};

// One flag raised on NAME@VERSION by a run with a violation (a row of `flags`). A flag
// stays on its version until `soyaos pack unflag` clears it: pushing a newer version does
// not clear it (C8 (4)). `digest` is the tree digest of the pack that ran, so a directory
// run flags that content too: a later push of the same digest, or another run of the same
// directory, is flagged.
struct FlagRecord {
  int64_t id = 0;
  std::string name;
  std::string version;
  std::string digest;           // "sha256:HEX" tree digest of the pack that ran ("" before schema 2)
  std::string run_id;
  std::string violation;        // the capability_violation event (JSON text)
  std::string flagged_at;       // RFC 3339 UTC
  bool cleared = false;         // by `soyaos pack unflag`
  std::string cleared_at;
  Actor cleared_by;             // who ran `soyaos pack unflag`
  std::string cleared_reason;   // its --reason
  // "" when a run on this host raised it; else where it was read (schema 7): "flagged on
  // REGISTRY/REPO by moon KEY_ID (referrer sha256:…)" — a flag published by another host.
  std::string origin;
  bool active = false;          // not cleared
};

// A pack signature the Moon holds (C12): made by `soyaos pack sign`, or verified and kept
// at a pull so that a later run checks it offline. The signature covers the bytes of the
// OCI image manifest whose digest is `manifest_digest` (docs/registry.md "Signatures").
struct SignatureRecord {
  int64_t id = 0;
  std::string manifest_digest;  // "sha256:HEX" of the OCI image manifest signed
  std::string key_id;           // minisign key id, 16 upper-case hex digits
  std::string signature;        // the .minisig text
  std::string reference;        // what was signed or pulled (NAME@VERSION or REGISTRY/REPO@DIGEST)
  std::string added_at;         // RFC 3339 UTC
  Actor by;                     // who signed or pulled
};

// The operator's consent to a pack version's capabilities (C12): `soyaos pack approve`,
// `pack pull --approve` or a yes on a terminal. A later version of `repository` is diffed
// against the manifest of the newest approval; one that widens it is not run until approved.
struct ApprovalRecord {
  int64_t id = 0;               // insertion order: the newest approval of a repository is the highest id
  std::string repository;       // "REGISTRY/REPO" (a local pack: its NAME)
  std::string digest;           // "sha256:HEX" of the OCI image manifest approved
  std::string reference;        // as the operator named it
  std::string manifest;         // the soyapack.yaml approved (what later versions are diffed against)
  std::string approved_at;      // RFC 3339 UTC
  Actor by;
};

// A pack this Moon took from an OCI registry (C12; schema 7): a violation of a run of that
// content (by tree digest, so `pack pull -o DIR` then `run DIR` counts) is published there.
struct RemoteOrigin {
  std::string tree_digest;      // "sha256:HEX" of the pack's tree
  std::string registry;         // HOST[:PORT]
  std::string repository;       // REPO (without the registry)
  std::string manifest_digest;  // the image manifest the flag referrer's subject names
  int64_t manifest_size = 0;
  std::string name, version;
};

// A flag waiting to be published as an OCI referrer (a row of `flag_outbox`).
struct QueuedFlag {
  int64_t id = 0;
  std::string registry, repository, manifest_digest;
  int64_t manifest_size = 0;
  std::string run_id;           // the run that raised it (one referrer per run and pack)
  std::string body;             // the referrer's blob (docs/registry.md "Flags travel")
  std::string queued_at;        // RFC 3339 UTC
  int64_t attempts = 0;
  int64_t next_attempt = 0;     // unix seconds: not retried by the background paths before
  std::string last_error;
  std::string published_at;     // "" while queued
  std::string referrer;         // the referrer's manifest digest once published
};
// At most this many unpublished flags are queued (all registries together): past it a new
// flag stays local only and queue_flag says so.
inline constexpr int64_t kMaxQueuedFlags = 256;

// One stored Scope event.
struct StoredEvent {
  int64_t seq = 0;              // store-wide, increasing: `scope tail -f` polls by it
  std::string time;
  std::string type;
  std::string run_id;
  std::string pack;
  std::string version;
  std::string json;             // the event as appended (one line of JSON)
  std::string prev_hash;        // the hash chain (E6, moon/chain.h): the previous event's hash
  std::string hash;             // this event's
};

// Every set field must match (E7). Times compare as the stored UTC text.
struct EventQuery {
  std::optional<std::string> run_id;
  std::optional<std::string> type;
  std::vector<std::string> types;    // any of these (with `type`, that one too)
  std::optional<std::string> pack;
  std::optional<std::string> version;  // with `pack`: NAME@VERSION
  std::optional<std::string> digest;   // data.digest (the pack's tree digest)
  std::optional<int64_t> uid;          // events of runs whose run_started has user.uid, and
                                       // Moon changes whose actor.uid is this
  std::optional<std::string> since;  // RFC 3339 UTC; events with time >= since
  std::optional<std::string> until;  // RFC 3339 UTC; events with time < until
  int64_t after_seq = 0;             // only seq > after_seq
  int64_t limit = 0;                 // the LAST `limit` matches (0: all); result in seq order
  bool first = false;                // with `limit`: the FIRST `limit` matches instead (paging)
};

class Store {
 public:
  // Opens (creating when missing) HOME/moon.db and brings the schema up to date.
  // A corrupt file or one that is not a database is an error naming the file, with what
  // PRAGMA quick_check says when it can run.
  static Result<Store> open(const std::filesystem::path& home);

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  // ---- packs ----
  Result<std::optional<PackRecord>> pack(const std::string& name, const std::string& version);
  // Every pack, by name then semver.
  Result<std::vector<PackRecord>> packs();
  // The most recently pushed pack whose archive digest or tree digest is `digest`.
  Result<std::optional<PackRecord>> pack_by_digest(const std::string& digest);
  // Inserts the pack and its `pack_pushed` event in one transaction. False (nothing
  // written) when NAME@VERSION is already there.
  Result<bool> insert_pack(const PackRecord& pack, const nlohmann::ordered_json& pushed_event);

  // ---- flags ----
  // Records a flag of NAME@VERSION (and `digest`); one per (name, version, run_id): false
  // when that run already flagged it. The flag row is committed first, then `flagged_event`
  // (the `pack_flagged` event) is appended: an event-storage failure is reported but never
  // loses the flag.
  Result<bool> add_flag(const FlagRecord& flag, const nlohmann::ordered_json& flagged_event);
  // Every flag of NAME@VERSION, or of `digest` when it is not empty, oldest first.
  Result<std::vector<FlagRecord>> flags(const std::string& name, const std::string& version,
                                        const std::string& digest = "");
  // Clears the uncleared flags of NAME@VERSION (and of `digest` when not empty), recording
  // who and why, and appends `unflagged_event` (its data gets "cleared": N) in the same
  // transaction; nothing is appended when there was nothing to clear. Returns how many.
  Result<int> clear_flags(const std::string& name, const std::string& version, const std::string& digest,
                          const Actor& actor, const std::string& reason, nlohmann::ordered_json unflagged_event);

  // ---- flags that travel between hosts (C12, C8 (4); store_flags.cc) ----
  Status add_remote_origin(const RemoteOrigin& origin);
  // The registry packs whose tree digest is `tree_digest`.
  Result<std::vector<RemoteOrigin>> remote_origins(const std::string& tree_digest);
  enum class Queued { queued, duplicate, full };
  Result<Queued> queue_flag(const QueuedFlag& flag);
  // Unpublished flags for `registry` ("" any), oldest first, at most `limit`; `now` > 0:
  // only those whose next_attempt is due and that no publisher's claim holds. `run_uid` >= 0:
  // only the flags of runs the daemon attributed to that uid (their run_started's
  // soyaosuid), in the same query.
  Result<std::vector<QueuedFlag>> queued_flags(const std::string& registry, int64_t now, int64_t limit,
                                               int64_t run_uid = -1);
  // Claims unpublished flag `id` for one publisher (`by`, for diagnostics) until `until`
  // (unix seconds), in one UPDATE: true when this call took it, false when it is published
  // or a claim on it or on another flag of the same subject (registry, repository,
  // manifest) has not expired — one push at a time per subject's referrers. flag_published
  // and flag_publish_failed release it; a publisher that died releases it when `until`
  // passes.
  Result<bool> claim_flag(int64_t id, int64_t now, int64_t until, const std::string& by);
  // Queued flag `id`, published or not; nullopt when there is none.
  Result<std::optional<QueuedFlag>> queued_flag(int64_t id);
  Status flag_published(int64_t id, const std::string& referrer);
  Status flag_publish_failed(int64_t id, const std::string& error, int64_t next_attempt);

  // ---- signatures and approvals (C12; store_consent.cc) ----
  // Stores the signature and appends `event` (when not null) in one transaction; false,
  // nothing written, when the same signature of the same digest is there already.
  Result<bool> add_signature(const SignatureRecord& sig, const nlohmann::ordered_json& event);
  // The signatures held for an OCI manifest digest, oldest first.
  Result<std::vector<SignatureRecord>> signatures(const std::string& manifest_digest);
  // Records the approval and appends `event` in one transaction.
  Status add_approval(const ApprovalRecord& approval, const nlohmann::ordered_json& event);
  // The newest approval of `repository`, nullopt when it has none.
  Result<std::optional<ApprovalRecord>> last_approval(const std::string& repository);
  // The approvals of `digest` (any repository), oldest first.
  Result<std::vector<ApprovalRecord>> approvals_of(const std::string& digest);

  // ---- manifests of runs (E5) ----
  // Keeps `text` (a run's soyapack.yaml bytes) under "sha256:" + its sha256, once;
  // returns that digest. Directory runs included: run_started's manifest_digest names it.
  Result<std::string> put_manifest(const std::string& text);
  // The manifest text stored under `digest`, nullopt when none.
  Result<std::optional<std::string>> manifest(const std::string& digest);

  // ---- events ----
  // All of `events` in one durable transaction, or none of them. Each must be a JSON
  // object; `time`, `type` and data.{run_id,pack,version} are indexed when present.
  Status append_events(std::span<const nlohmann::ordered_json> events);
  // The same for events already serialized: each row's text is stored and hashed as given
  // (append_events serializes its objects and stores them through this). Every row needs
  // its time.
  Status append_rows(std::span<const EventRow> rows);
  Result<std::vector<StoredEvent>> query_events(const EventQuery& query);
  // SQLite's EXPLAIN QUERY PLAN of the statement query_events runs for `query`, one detail
  // a line ("SEARCH events USING INDEX events_digest (<expr>=? AND rowid>?)"): the indexes
  // of schema 5 are shown to serve --user and --pack sha256: (moon_store_test).
  Result<std::vector<std::string>> explain_query(const EventQuery& query);

  // ---- tamper evidence (E6, moon/chain.h; chain_verify.cc) ----
  // Verifies the hash chain, the checkpoints and the head file, and names every problem
  // (one line each, starting "seq N" or naming the checkpoint or file).
  struct ChainCheck {
    std::optional<std::string> run_id;  // only this run's events, the chain around them and its checkpoints
    const chain::MoonKey* key = nullptr;  // a pinned public key; else HOME/moon.pub
  };
  struct ChainReport {
    std::vector<std::string> problems;
    int64_t events = 0;        // rows examined
    int64_t checkpoints = 0;   // checkpoints examined
    int64_t last_seq = 0;      // the store's last event
    std::string key_id;        // the key checkpoints were verified with ("" none)
    int64_t chained_at_upgrade = 0;  // events up to this seq were chained when the schema was upgraded
  };
  Result<ChainReport> verify_chain(const ChainCheck& check);

  // ---- maintenance (`soyaos moon check`) ----
  // PRAGMA integrity_check and PRAGMA foreign_key_check: what they report, one problem a
  // line (none: the database is sound). An error when the checks cannot run at all.
  Result<std::vector<std::string>> check_integrity();

 private:
  Store() = default;
  Status init_schema();
  // Chains the events stored before schema 3 (the upgrade), inside its transaction.
  Status chain_existing_events();
  // The Moon's signing key, loaded (or created) on first use.
  Result<const chain::MoonKey*> signing_key();
  // Signs a checkpoint of the chain's current end and stores it (inside a transaction).
  Result<chain::Checkpoint> add_checkpoint(int64_t seq, const std::string& hash);
  // Writes the head file after a commit when a checkpoint asked for it.
  Status flush_head();
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
  std::unique_ptr<chain::MoonKey> key_;
  std::unique_ptr<chain::Checkpoint> pending_head_;
  bool head_warned_ = false;  // flush_head: a failed head write is reported once
};

// The Scope store API for `soyaos run` (E3, E4): append() returns only after the events
// are durable (one transaction, WAL fsynced at commit). Safe across processes.
class EventStore {
 public:
  static Result<EventStore> open(const std::filesystem::path& home);
  Status append(std::span<const nlohmann::ordered_json> events) { return store_.append_events(events); }
  Result<std::vector<StoredEvent>> query(const EventQuery& q) { return store_.query_events(q); }

 private:
  explicit EventStore(Store s) : store_(std::move(s)) {}
  Store store_;
};

}  // namespace soyaos::moon
