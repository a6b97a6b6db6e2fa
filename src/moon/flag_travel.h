// The Moon's side of flags that travel (SPEC.md C12, C8 (4); docs/registry.md "Flags
// travel"): what is recorded when a flag is read from a registry, what is queued for a
// registry after a run with a violation, and the retry schedule of the queue. The registry
// I/O is the CLI's (cli/remote_flags.h); these run in whichever Moon holds the state — this
// process's embedded Moon, or a daemon's for its clients (moon/server_flags.h), so that
// a daemon builds and checks every record itself instead of taking a client's word.
// Library code: errors are values, nothing is printed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "moon/store.h"

namespace soyaos::moon {

// A flag referrer read from a registry, as its reader parsed it. The pack fields are the
// reader's (the pack it pulled or inspected); run_id, flagged_at, surface, resource and moon
// are the referrer body's claims (checked by check_received_flag, never trusted further).
struct ReceivedFlag {
  std::string name, version;    // the pack's NAME@VERSION (its manifest's)
  std::string tree_digest;      // "sha256:HEX" of its tree
  std::string registry;         // HOST[:PORT]
  std::string repository;       // REPO (without the registry)
  std::string manifest_digest;  // the image manifest the referrer's subject names
  std::string referrer;         // the referrer's own manifest digest
  std::string run_id, flagged_at, surface, resource, moon;
};

// Why `flag` is not one a Moon records ("" when it is): the body's tokens and bounds as
// docs/registry.md "Reading" lists them, and well-formed digests and names.
std::string check_received_flag(const ReceivedFlag& flag);
nlohmann::ordered_json to_json(const ReceivedFlag& flag);
ReceivedFlag received_flag_from_json(const nlohmann::ordered_json& j);
// Records `flag` (checked again here) as a flag of NAME@VERSION and of its tree digest, with
// its origin, and a pack_flagged event (received: true) stamped by this Moon's clock.
// `reported_by`: the daemon's peer who read it (data.reported_by), nullopt when embedded.
// True when new (a flag is known by its run id).
Result<bool> add_received_flag(Store& store, const ReceivedFlag& flag, const std::optional<Actor>& reported_by);

// Whether `registry`/`repository`/`manifest_digest`/`tree_digest` and the names of an origin
// are well-formed ("" when they are, else why).
std::string check_remote_origin(const RemoteOrigin& origin);

// After a run with a violation: what was queued, per registry.
struct FlagQueueReport {
  std::vector<std::string> registries;  // the registries flags were queued for (or would be)
  std::vector<std::string> notes;       // warnings (a full queue)
};
// Queues the flag of run `run_id` (its first violation: `surface`, `resource`) for every
// registry the content `tree_digest` came from (remote_origins). The body is built here:
// the resource as its sha256 only, this Moon's clock and key id (HOME/moon.pub).
Result<FlagQueueReport> queue_run_flags(Store& store, const std::filesystem::path& home, const std::string& tree_digest,
                                        const std::string& run_id, const std::string& surface,
                                        const std::string& resource);

// The outcome of one attempt to publish queued flag `id`: published as `referrer`, or
// failed with `error` (then retried by the background paths after a backoff: 30 s doubling
// to 1 h, computed from the row's own attempts; SOYAOS_FLAG_BACKOFF_S sets the first delay,
// for tests).
Status record_publish_result(Store& store, int64_t id, const std::string& referrer, const std::string& error);

// How long a publisher's claim on a queued flag holds when it never reports (it died): past
// it another publisher may push the flag.
inline constexpr int64_t kFlagClaimSeconds = 300;
// Claims queued flag `id` for `by` until now + kFlagClaimSeconds (Store::claim_flag).
Result<bool> claim_queued_flag(Store& store, int64_t id, const std::string& by);

}  // namespace soyaos::moon
