// The daemon's side of signatures, approvals and consent events (SPEC.md C12; docs/moon.md
// "Daemon mode", docs/signing.md):
//
//   add_signature {signature, event}   a pack signature (and its pack_signed event, or null)
//   signatures    {digest}             the signatures held for an OCI manifest digest
//   add_approval  {approval, event}    an approval and its pack_approved event: root or the
//                                      Moon's owner only (it lets wider packs run for all)
//   last_approval {repository}         the newest approval of a repository (or null)
//   approvals_of  {digest}             the approvals of a digest
//   pack_event    {event}              a pack_refused event
//   oci_manifest  {digest}             a pushed pack's OCI image manifest bytes
//
// Who did it is the connection's peer (SO_PEERCRED), never the client's word: the record's
// `by`, the event's data.actor and its soyaosuid/soyaosuser attributes are set here; when
// is the daemon's clock (the record's time, the event's `time`). Each event must be of the
// type its request stores and at most 64 KiB; a signature record holds at most 64 KiB of
// signature (what the gate reads from a registry), and a manifest digest at most 32
// signature records (EFBIG, ENOSPC: every gate check of that digest verifies them all).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "moon/backend.h"

namespace soyaos::moon {

// Handles `op` when it is one of the above, else nullopt. `peer_known`: SO_PEERCRED
// answered and `peer_uid` is the client's.
std::optional<Result<nlohmann::ordered_json>> handle_consent_op(MoonBackend& moon, const std::string& op,
                                                                const nlohmann::ordered_json& req, uid_t peer_uid,
                                                                bool peer_known);

}  // namespace soyaos::moon
