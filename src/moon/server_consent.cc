#include "moon/server_consent.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "moon/consent.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using json = nlohmann::ordered_json;

// What a client may have the daemon keep (docs/signing.md "Through a Moon daemon"): every
// stored signature is read and verified by each gate check of its digest, so a user of the
// socket must not be able to make those slow or the Moon large. A signature text as large
// as the gate reads from a registry (cli/remote_gate.cc), as many records per manifest
// digest as it reads referrers; an event far larger than any soyaos sends is refused.
constexpr size_t kMaxSignatureText = size_t{64} * 1024;
constexpr size_t kMaxKeyId = 64;
constexpr size_t kMaxReference = 2048;
constexpr size_t kMaxSignaturesPerDigest = 32;
constexpr size_t kMaxEventBytes = size_t{64} * 1024;

bool digest_ok(const std::string& d) {
  return d.size() == 71 && d.rfind("sha256:", 0) == 0 && d.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

std::string req_str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// `event` as the Moon stores it: of type `type` (or null when `may_be_null`), a Moon event
// (no run), with the peer as its actor.
Result<json> stamped(const json& req, const char* type, const Actor& peer, bool may_be_null) {
  const json event = req.contains("event") ? req["event"] : json();
  if (event.is_null() && may_be_null) return event;
  if (!event.is_object() || req_str(event, "type") != type)
    return make_error(std::string("the event of this request must be ") + type, EINVAL);
  if (!event.contains("data") || !event["data"].is_object() || (event["data"].contains("run_id") && !event["data"]["run_id"].is_null()))
    return make_error(std::string("a ") + type + " event is a Moon event: data without a run_id", EINVAL);
  if (event.dump().size() > kMaxEventBytes)
    return make_error(std::string("a ") + type + " event larger than " + std::to_string(kMaxEventBytes / 1024) +
                          " KiB is refused",
                      EFBIG);
  json out = event;
  out["data"]["actor"] = actor_to_json(peer);
  out["soyaosuid"] = peer.uid;
  out["soyaosuser"] = peer.user;
  // When is the daemon's clock, as who is its peer: a client cannot backdate a record.
  out["time"] = scope::now_rfc3339();
  return out;
}

}  // namespace

std::optional<Result<json>> handle_consent_op(MoonBackend& moon, const std::string& op, const json& req,
                                              uid_t peer_uid, bool peer_known) {
  if (op == "signatures") {
    auto l = moon.signatures(req_str(req, "digest"));
    if (!l) return Result<json>(l.error());
    json arr = json::array();
    for (const auto& x : *l) arr.push_back(to_json(x));
    return Result<json>(json{{"signatures", std::move(arr)}});
  }
  if (op == "last_approval") {
    auto a = moon.last_approval(req_str(req, "repository"));
    if (!a) return Result<json>(a.error());
    return Result<json>(json{{"approval", *a ? to_json(**a) : json(nullptr)}});
  }
  if (op == "approvals_of") {
    auto l = moon.approvals_of(req_str(req, "digest"));
    if (!l) return Result<json>(l.error());
    json arr = json::array();
    for (const auto& x : *l) arr.push_back(to_json(x));
    return Result<json>(json{{"approvals", std::move(arr)}});
  }
  if (op == "oci_manifest") {
    auto m = moon.oci_manifest(req_str(req, "digest"));
    if (!m) return Result<json>(m.error());
    return Result<json>(json{{"manifest", *m}});
  }
  if (op != "add_signature" && op != "add_approval" && op != "pack_event") return std::nullopt;

  // The writes: attributed to the peer.
  if (!peer_known) return Result<json>(make_error(op + ": the client's credentials (SO_PEERCRED) are unknown", EPERM));
  const Actor peer = actor_for_uid(static_cast<int64_t>(peer_uid));
  if (op == "add_signature") {
    auto event = stamped(req, kSignedEvent, peer, /*may_be_null=*/true);
    if (!event) return Result<json>(event.error());
    SignatureRecord sig = signature_from_json(req.contains("signature") ? req["signature"] : json::object());
    sig.by = peer;
    sig.added_at.clear();  // the Moon's clock
    if (!digest_ok(sig.manifest_digest))
      return Result<json>(make_error("add_signature: not a manifest digest: " + sig.manifest_digest.substr(0, 80), EINVAL));
    if (sig.signature.empty() || sig.signature.size() > kMaxSignatureText || sig.key_id.size() > kMaxKeyId ||
        sig.reference.size() > kMaxReference) {
      return Result<json>(make_error("add_signature: refused: a signature record holds a signature of at most " +
                                         std::to_string(kMaxSignatureText / 1024) + " KiB, a key id of at most " +
                                         std::to_string(kMaxKeyId) + " bytes and a reference of at most " +
                                         std::to_string(kMaxReference) + " bytes",
                                     EFBIG));
    }
    auto held = moon.signatures(sig.manifest_digest);
    if (!held) return Result<json>(held.error());
    const bool known = std::any_of(held->begin(), held->end(),
                                   [&](const SignatureRecord& r) { return r.signature == sig.signature; });
    // The bound is per client user: one user filling a public digest's records must not stop
    // the owner's pull keeping the signature that verified (then an offline `run REF` would
    // refuse the pack). Root and the owner are not bounded. (Counted, then inserted: clients
    // racing on one digest can pass the bound by the number of their connections.)
    const bool trusted = peer_uid == 0 || peer_uid == ::geteuid();
    const auto theirs = static_cast<size_t>(std::count_if(
        held->begin(), held->end(), [&](const SignatureRecord& r) { return r.by.uid == peer.uid; }));
    if (!known && !trusted && theirs >= kMaxSignaturesPerDigest) {
      return Result<json>(make_error("add_signature: refused: " + sig.manifest_digest + " already has " +
                                         std::to_string(theirs) + " signatures from uid " + std::to_string(peer_uid) +
                                         " in this Moon (at most " + std::to_string(kMaxSignaturesPerDigest) +
                                         " per user)",
                                     ENOSPC));
    }
    auto added = moon.add_signature(sig, *event);
    if (!added) return Result<json>(added.error());
    return Result<json>(json{{"added", *added}});
  }
  if (op == "add_approval") {
    // An approval lets a wider pack run for every user of this Moon: the operator's call.
    if (peer_uid != 0 && peer_uid != ::geteuid()) {
      return Result<json>(make_error("approve: refused: only root or the Moon's owner (uid " +
                                         std::to_string(::geteuid()) + ") may approve a pack; this client is uid " +
                                         std::to_string(peer_uid),
                                     EPERM));
    }
    auto event = stamped(req, kApprovedEvent, peer, /*may_be_null=*/false);
    if (!event) return Result<json>(event.error());
    ApprovalRecord a = approval_from_json(req.contains("approval") ? req["approval"] : json::object());
    a.by = peer;
    a.approved_at.clear();
    if (a.repository.empty() || a.digest.empty())
      return Result<json>(make_error("add_approval: no repository or digest", EINVAL));
    if (auto st = moon.add_approval(a, *event); !st) return Result<json>(st.error());
    return Result<json>(json::object());
  }
  auto event = stamped(req, kRefusedEvent, peer, /*may_be_null=*/false);
  if (!event) return Result<json>(event.error());
  if (auto st = moon.record_pack_event(*event); !st) return Result<json>(st.error());
  return Result<json>(json::object());
}

}  // namespace soyaos::moon
