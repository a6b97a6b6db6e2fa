// The daemon's side of flags that travel (SPEC.md C12, C8 (4); docs/registry.md "Flags
// travel", docs/moon.md "Daemon mode"). The client does the registry I/O with its own
// credentials; the daemon holds the records and builds or checks each one itself:
//
//   remote_origin       {origin}          content TREE came from REGISTRY/REPO@DIGEST: from
//                                         root or the Moon's owner, or for a repository the
//                                         operator approved a version of (else EPERM)
//   received_flag       {flag}            a flag read from a registry: checked as a reader
//                                         checks it, recorded with the daemon's clock and
//                                         its peer as data.reported_by
//   queue_run_flag      {run_id}          after a run with a violation: the daemon reads the
//                                         run's digest and first violation from its own
//                                         record, which must be the peer's run (or the peer
//                                         root or the owner), builds the flag body and
//                                         queues it for the registries the content came from
//   queued_flags        {registry, due, limit}  unpublished flags (at most 64)
//   claim_queued_flag   {id}              before pushing it: {"claimed": true} when this
//                                         peer now holds the flag (unpublished, nobody
//                                         else's claim running), else false; from root, the
//                                         owner, or the user whose run raised the flag
//   flag_publish_result {id, referrer, error}   one attempt's outcome (releases the claim):
//                                         from root, the owner, or the user whose run
//                                         raised the flag
//
// Nothing the client says is taken as who or when: the peer is SO_PEERCRED's, times are the
// daemon's clock. `moon serve` also publishes its own queue (cmd_moon_serve.cc).
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "moon/backend.h"

namespace soyaos::moon {

// Handles `op` when it is one of the above, else nullopt. `peer_known`: SO_PEERCRED
// answered and `peer_uid` is the client's. `log`: one line per record written.
std::optional<Result<nlohmann::ordered_json>> handle_flag_op(MoonBackend& moon, const std::string& op,
                                                             const nlohmann::ordered_json& req, uid_t peer_uid,
                                                             bool peer_known,
                                                             const std::function<void(const std::string&)>& log);

}  // namespace soyaos::moon
