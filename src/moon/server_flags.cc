#include "moon/server_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace soyaos::moon {
namespace {

using json = nlohmann::ordered_json;

// At most this many queued flags go to a client per request (one command's batch).
constexpr int64_t kMaxQueuedPerRequest = 64;

std::string req_str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A client's fields of the wrong type are their defaults (json::value would throw).
int64_t req_int(const json& j, const char* k, int64_t def) {
  auto it = j.find(k);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : def;
}
bool req_bool(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
json req_obj(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_object() ? *it : json::object();
}

bool run_id_ok(const std::string& id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_';
  });
}

// The first stored event of type `type` of run `run_id`, parsed; nullopt when none.
Result<std::optional<json>> first_event(MoonBackend& moon, const std::string& run_id, const char* type) {
  EventQuery q;
  q.run_id = run_id;
  q.type = type;
  q.limit = 1;
  q.first = true;
  auto events = moon.query_events(q);
  if (!events) return events.error();
  if (events->empty()) return std::optional<json>();
  json e = json::parse(events->front().json, nullptr, false);
  if (!e.is_object()) return make_error("the stored " + std::string(type) + " of run " + run_id + " is not JSON");
  return std::optional<json>(std::move(e));
}

// The uid the daemon attributed run `run_id` to (its run_started's soyaosuid); nullopt
// when the run was not started through a daemon, error when there is no such run.
Result<std::optional<int64_t>> run_uid(MoonBackend& moon, const std::string& run_id) {
  auto started = first_event(moon, run_id, "run_started");
  if (!started) return started.error();
  if (!*started) return make_error("no run " + run_id + " in this Moon", ENOENT);
  auto it = (*started)->find("soyaosuid");
  if (it == (*started)->end() || !it->is_number_integer()) return std::optional<int64_t>();
  return std::optional<int64_t>(it->get<int64_t>());
}

// Whether the peer may act on run `run_id`'s flag: root, the Moon's owner, or the run's user.
Status may_act_on_run(MoonBackend& moon, const std::string& op, const std::string& run_id, uid_t peer_uid) {
  if (peer_uid == 0 || peer_uid == ::geteuid()) return {};
  auto uid = run_uid(moon, run_id);
  if (!uid) return uid.error();
  if (*uid && **uid == static_cast<int64_t>(peer_uid)) return {};
  return make_error(op + ": refused: run " + run_id + " is not this client's (uid " + std::to_string(peer_uid) +
                        "); only its user, root or the Moon's owner may",
                    EPERM);
}

Result<json> queue_run_flag(MoonBackend& moon, const json& req, uid_t peer_uid,
                            const std::function<void(const std::string&)>& log) {
  const std::string run_id = req_str(req, "run_id");
  if (!run_id_ok(run_id)) return make_error("queue_run_flag: not a run id", EINVAL);
  if (auto st = may_act_on_run(moon, "queue_run_flag", run_id, peer_uid); !st) return st.error();
  // The digest and the violation are the daemon's record of the run, not this request's.
  auto started = first_event(moon, run_id, "run_started");
  if (!started) return started.error();
  if (!*started) return make_error("no run " + run_id + " in this Moon", ENOENT);
  // But that record is what the run's client streamed: only the daemon's stamping of its
  // user is the daemon's own. A flag queued here is published with the Moon's credentials
  // and key id (moon serve) to the origins root or the owner recorded, so it is queued only
  // for runs of root or the owner; another user's flag does not travel through a shared
  // daemon (docs/registry.md), or any local user could flag the owner's packs at will.
  auto uid = run_uid(moon, run_id);
  if (!uid) return uid.error();
  if (!*uid || (**uid != 0 && **uid != static_cast<int64_t>(::geteuid()))) {
    FlagQueueReport none;
    none.notes.push_back("the flag of run " + run_id +
                         " is not published: through a shared Moon daemon only the runs of root or the Moon's "
                         "owner (uid " + std::to_string(::geteuid()) + ") publish flags");
    log("queue_run_flag " + run_id + " by uid=" + std::to_string(peer_uid) + ": not queued (not root's or the owner's run)");
    return json{{"queued", to_json(none)}};
  }
  auto violation = first_event(moon, run_id, "capability_violation");
  if (!violation) return violation.error();
  if (!*violation) return json{{"queued", to_json(FlagQueueReport{})}};  // nothing to flag
  const json sd = req_obj(**started, "data");
  const json vd = req_obj(**violation, "data");
  const std::string digest = req_str(sd, "digest");
  if (digest.empty()) return json{{"queued", to_json(FlagQueueReport{})}};
  auto q = moon.queue_run_flag(
      run_id, [&digest]() -> Result<std::string> { return digest; }, req_str(vd, "surface"), req_str(vd, "resource"));
  if (!q) return q.error();
  for (const auto& r : q->registries) log("queue_run_flag " + run_id + " for " + r + " by uid=" + std::to_string(peer_uid));
  for (const auto& n : q->notes) log("queue_run_flag " + run_id + ": " + n);
  return json{{"queued", to_json(*q)}};
}

// Unpublished flag `req.id`, when the peer may act on its run (root, the owner, the run's user).
Result<QueuedFlag> pending_flag_for_peer(MoonBackend& moon, const std::string& op, const json& req, uid_t peer_uid) {
  auto it = req.find("id");
  if (it == req.end() || !it->is_number_integer()) return make_error(op + ": no id", EINVAL);
  const int64_t id = it->get<int64_t>();
  auto pending = moon.queued_flags("", false, kMaxQueuedFlags, -1);
  if (!pending) return pending.error();
  auto row = std::find_if(pending->begin(), pending->end(), [&](const QueuedFlag& q) { return q.id == id; });
  if (row == pending->end()) return make_error(op + ": no queued flag " + std::to_string(id) + " waits", ENOENT);
  if (auto st = may_act_on_run(moon, op, row->run_id, peer_uid); !st) return st.error();
  return std::move(*row);
}

Result<json> claim_flag(MoonBackend& moon, const json& req, uid_t peer_uid) {
  auto row = pending_flag_for_peer(moon, "claim_queued_flag", req, peer_uid);
  if (!row) return row.error();
  auto claimed = moon.claim_queued_flag(row->id, "uid " + std::to_string(peer_uid) + " through the daemon");
  if (!claimed) return claimed.error();
  return json{{"claimed", *claimed}};
}

Result<json> publish_result(MoonBackend& moon, const json& req, uid_t peer_uid,
                            const std::function<void(const std::string&)>& log) {
  auto found = pending_flag_for_peer(moon, "flag_publish_result", req, peer_uid);
  if (!found) return found.error();
  const QueuedFlag* row = &*found;
  const int64_t id = row->id;
  const std::string referrer = req_str(req, "referrer");
  if (auto st = moon.flag_publish_result(id, referrer, req_str(req, "error")); !st) return st.error();
  if (!referrer.empty()) {
    log("published flag of " + row->registry + "/" + row->repository + "@" + row->manifest_digest + " (run " +
        row->run_id + ") as referrer " + referrer + ", reported by uid=" + std::to_string(peer_uid));
  }
  return json::object();
}

}  // namespace

std::optional<Result<json>> handle_flag_op(MoonBackend& moon, const std::string& op, const json& req, uid_t peer_uid,
                                           bool peer_known, const std::function<void(const std::string&)>& log) {
  if (op == "queued_flags") {
    const int64_t limit = std::clamp<int64_t>(req_int(req, "limit", kMaxQueuedPerRequest), 1, kMaxQueuedPerRequest);
    // Root and the owner see the whole queue; any other client the flags of its own runs
    // (those it may report on, and no other user's flags).
    const bool all = peer_known && (peer_uid == 0 || peer_uid == ::geteuid());
    // An unknown peer sees none; another client only its runs' (one query: the uid filter).
    if (!all && !peer_known) return Result<json>(json{{"flags", json::array()}});
    auto l = moon.queued_flags(req_str(req, "registry"), req_bool(req, "due"), limit,
                               all ? int64_t{-1} : static_cast<int64_t>(peer_uid));
    if (!l) return Result<json>(l.error());
    json arr = json::array();
    for (const auto& q : *l) arr.push_back(to_json(q));
    return Result<json>(json{{"flags", std::move(arr)}});
  }
  if (op != "remote_origin" && op != "received_flag" && op != "queue_run_flag" && op != "flag_publish_result" &&
      op != "claim_queued_flag")
    return std::nullopt;
  if (!peer_known) return Result<json>(make_error(op + ": the client's credentials (SO_PEERCRED) are unknown", EPERM));
  if (op == "queue_run_flag") return queue_run_flag(moon, req, peer_uid, log);
  if (op == "flag_publish_result") return publish_result(moon, req, peer_uid, log);
  if (op == "claim_queued_flag") return claim_flag(moon, req, peer_uid);
  if (op == "received_flag") {
    const ReceivedFlag f = received_flag_from_json(req_obj(req, "flag"));
    if (auto why = check_received_flag(f); !why.empty())
      return Result<json>(make_error("received_flag: the flag " + why, EINVAL));
    auto added = moon.add_received_flag(f, actor_for_uid(static_cast<int64_t>(peer_uid)));
    if (!added) return Result<json>(added.error());
    if (*added) {
      log("received flag of " + f.name + "@" + f.version + " from " + f.registry + "/" + f.repository + " (referrer " +
          f.referrer + ") by uid=" + std::to_string(peer_uid));
    }
    return Result<json>(json{{"added", *added}});
  }
  // remote_origin: where a later violation of this content is published. It applies to the
  // flags of every run of that content, so only root and the owner may record one: another
  // user could otherwise point the owner's violations at a repository and digest of its
  // choosing (the daemon publishes only root's and the owner's flags, queue_run_flag).
  const RemoteOrigin o = origin_from_json(req_obj(req, "origin"));
  if (auto why = check_remote_origin(o); !why.empty())
    return Result<json>(make_error("remote_origin: the origin " + why, EINVAL));
  if (peer_uid != 0 && peer_uid != ::geteuid()) {
    // Not an error for the client's pull or run: its runs' flags do not travel through this
    // daemon anyway. Logged, and answered as not recorded.
    log("remote_origin " + o.registry + "/" + o.repository + " by uid=" + std::to_string(peer_uid) +
        ": not recorded (only root or the Moon's owner records origins)");
    return Result<json>(json{{"recorded", false},
                             {"why", "only root or the Moon's owner (uid " + std::to_string(::geteuid()) +
                                         ") records where content came from"}});
  }
  if (auto st = moon.add_remote_origin(o); !st) return Result<json>(st.error());
  return Result<json>(json{{"recorded", true}});
}

}  // namespace soyaos::moon
