// Flags that travel (SPEC.md C12, C8 (4); docs/registry.md "Flags travel"): a violation of
// a run of a pack that came from a registry is published there as an OCI referrer of the
// pack's image manifest, and every host that pulls, inspects or runs that version reads
// those referrers into its Moon as flags with their origin (warned about on each run, as
// a local flag; `pack unflag` clears the local view only).
//
// Publishing never delays or fails a run: the flag is queued in the Moon (flag_outbox,
// bounded by moon::kMaxQueuedFlags) and published by the next command that talks to that
// registry (pull, push, inspect, approve, `run REF`), right after the run (one quick try,
// backoff honoured) and by `soyaos moon serve`'s loop. A failed try is retried with
// backoff (30 s doubling to 1 h) by the background paths; a command that talks to the
// registry anyway tries every queued flag of it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moon/backend.h"
#include "oci/client.h"
#include "oci/pack.h"

namespace soyaos::cli {

inline constexpr const char* kFlagArtifactType = "application/vnd.soyaos.flag.v1+json";
inline constexpr const char* kFlagMediaType = "application/vnd.soyaos.flag.v1+json";
// What a host reads of a pack's flag referrers: a hostile registry must not flood us.
inline constexpr size_t kMaxFlagReferrers = 16;
inline constexpr size_t kMaxFlagBytes = size_t{8} * 1024;

// Each function takes the Moon the command uses (moon/backend.h): embedded, or a daemon's,
// which checks and stamps every record itself (moon/server_flags.h); the registry I/O is
// this process's, with its own credentials.

// Remembers that `pack` came from its registry (a violation of its content is published there).
Status record_remote_origin(moon::MoonBackend& moon, const oci::RemotePack& pack);

// Reads the flag referrers of `pack` and records each valid one as a flag of NAME@VERSION
// (and its tree digest) with its origin; malformed, oversized or foreign ones are skipped.
// Returns warnings for stderr (bounded); never fails the command.
std::vector<std::string> read_remote_flags(moon::MoonBackend& moon, oci::Client& client, const oci::RemotePack& pack);

// After a run with a violation: queues a flag for every registry the content came from
// (their names added to `registries`). Warnings for stderr (a full queue).
std::vector<std::string> queue_run_flags(moon::MoonBackend& moon, const moon::MoonBackend::TreeDigestFn& tree_digest,
                                         const std::string& run_id, const std::string& surface,
                                         const std::string& resource, std::vector<std::string>& registries);

struct PublishOptions {
  std::string registry;         // "" every registry with queued flags
  oci::Client* client = nullptr;  // a client of `registry` to use (else one is opened per registry)
  bool honour_backoff = false;  // background paths (after a run, moon serve): only due flags
  bool quick = false;           // one attempt, short timeouts (right after a run)
};
// Publishes queued flags of `moon` with the registry credentials and configuration of
// `home`; what was published or failed, as lines for stderr.
std::vector<std::string> publish_queued_flags(moon::MoonBackend& moon, const std::filesystem::path& home,
                                              const PublishOptions& options);
// The same for a command that has no Moon open: the Moon of `home` when there is one to ask
// (a daemon, or an embedded moon.db); nothing is created.
std::vector<std::string> publish_queued_flags(const std::filesystem::path& home, const PublishOptions& options);

// The flags of a registry pack this Moon holds (local and read from registries), for
// `pack inspect REF`: text lines, and the JSON array.
std::vector<std::string> remote_flag_lines(moon::MoonBackend& moon, const oci::RemotePack& pack);
nlohmann::ordered_json remote_flags_json(moon::MoonBackend& moon, const oci::RemotePack& pack);

}  // namespace soyaos::cli
