#include "moon/server_runs.h"

#include <vector>

#include "moon/store.h"

namespace soyaos::moon {
using json = nlohmann::ordered_json;

namespace {

std::string sval(const json& j, const char* k) {
  if (!j.is_object()) return "";
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& data_of(const json& e) {
  static const json kEmpty = json::object();
  if (!e.is_object()) return kEmpty;
  auto it = e.find("data");
  return it != e.end() && it->is_object() ? *it : kEmpty;
}

}  // namespace

ConnRuns::~ConnRuns() {
  for (size_t i = 0; i < runs_.size(); ++i) writer_closed();
}

void ConnRuns::writer_closed() {
  if (commits_ != nullptr) commits_->writer_closed();
}

Status ConnRuns::store(MoonBackend& moon, std::vector<json> rows) {
  if (commits_ != nullptr) return commits_->append(std::move(rows));
  return moon.append_events(rows);
}

std::optional<Result<json>> ConnRuns::handle(MoonBackend& moon, const std::string& op, const json& req) {
  const std::string run_id = sval(req, "run_id");
  if (op == "run_begin") return begin(moon, req);
  if (op == "run_events") return events(moon, run_id, req.contains("events") ? req["events"] : json());
  if (op == "run_flag") return flag(moon, run_id, req.contains("violation") ? req["violation"] : json());
  if (op == "run_end") {
    auto it = runs_.find(run_id);
    if (it == runs_.end()) return Result<json>(make_error("run_end: run " + run_id + " was not started on this connection", EPERM));
    it->second.live.end();
    runs_.erase(it);
    writer_closed();
    return Result<json>(json::object());
  }
  // The older forms: allowed only for runs of this connection, like the run ops.
  if (op == "append_events") {
    if (!req.contains("events") || !req["events"].is_array() || req["events"].empty())
      return Result<json>(make_error("append_events: no events array"));
    return events(moon, sval(data_of(req["events"].front()), "run_id"), req["events"]);
  }
  if (op == "flag") {
    auto it = runs_.find(run_id);
    if (it == runs_.end() || sval(req, "name") != it->second.ctx.pack || sval(req, "version") != it->second.ctx.version)
      return Result<json>(make_error("flag: only the pack of a run started on this connection can be flagged", EPERM));
    return flag(moon, run_id, req.contains("violation") ? req["violation"] : json());
  }
  return std::nullopt;
}

Result<json> ConnRuns::attributed(const json& e, const std::string& run_id) const {
  if (!e.is_object()) return make_error("an event is not a JSON object", EINVAL);
  if (sval(data_of(e), "run_id") != run_id)
    return make_error("an event of run '" + sval(data_of(e), "run_id") + "' is not one of run " + run_id +
                          " started on this connection: refused",
                      EPERM);
  json out = e;
  // The daemon, not the client, says who wrote it (E5).
  out["soyaosuid"] = static_cast<int64_t>(uid_);
  out["soyaosuser"] = actor_for_uid(static_cast<int64_t>(uid_)).user;
  return out;
}

Result<json> ConnRuns::begin(MoonBackend& moon, const json& req) {
  if (!known_) return make_error("run_begin: the client's credentials (SO_PEERCRED) are unknown", EPERM);
  const json& first = req.contains("event") ? req["event"] : json();
  const std::string type = sval(first, "type");
  if (type != "run_started" && type != "cache_hit")
    return make_error("run_begin: a run begins with run_started (or a replay's cache_hit), not '" + type + "'", EINVAL);
  const json& d = data_of(first);
  const std::string run_id = sval(d, "run_id");
  if (!valid_run_id(run_id) || run_id != sval(req, "run_id"))
    return make_error("run_begin: invalid run id '" + run_id + "'", EINVAL);
  if (runs_.count(run_id) != 0) return make_error("run_begin: run " + run_id + " is already started", EEXIST);
  // A run id the Moon already has events of belongs to someone else's run.
  EventQuery q;
  q.run_id = run_id;
  q.limit = 1;
  auto existing = moon.query_events(q);
  if (!existing) return existing.error();
  if (!existing->empty())
    return make_error("run_begin: run " + run_id + " already has a record: refused", EEXIST);
  scope::RunContext ctx{"", run_id, sval(d, "pack"), sval(d, "version"), sval(d, "digest")};
  std::string source = sval(first, "source");
  ctx.host = source.rfind("soyaos://", 0) == 0 ? source.substr(9, source.find('/', 9) - 9) : "localhost";
  auto event = attributed(first, run_id);
  if (!event) return event.error();
  ConnRun run{ctx, LiveRun()};
  if (type == "run_started") {
    auto live = LiveRun::create(home_, ctx, "daemon");
    if (!live) return live.error();
    run.live = std::move(live.value());
  }
  if (commits_ != nullptr) commits_->writer_opened();  // its next batch is coming
  std::vector<json> rows;
  rows.push_back(std::move(event.value()));
  if (auto s = store(moon, std::move(rows)); !s) {
    run.live.end();
    writer_closed();
    return s.error();
  }
  runs_.emplace(run_id, std::move(run));
  return json::object();
}

Result<json> ConnRuns::events(MoonBackend& moon, const std::string& run_id, const json& events) {
  if (!events.is_array()) return make_error("run_events: no events array", EINVAL);
  if (runs_.count(run_id) == 0)
    return make_error("events for run " + run_id + ", which was not started on this connection: refused", EPERM);
  std::vector<json> rows;
  rows.reserve(events.size());
  for (const auto& e : events) {
    auto a = attributed(e, run_id);
    if (!a) return a.error();
    rows.push_back(std::move(a.value()));
  }
  if (auto s = store(moon, std::move(rows)); !s) return s.error();
  return json::object();
}

Result<json> ConnRuns::flag(MoonBackend& moon, const std::string& run_id, const json& violation) {
  auto it = runs_.find(run_id);
  if (it == runs_.end())
    return make_error("flag for run " + run_id + ", which was not started on this connection: refused", EPERM);
  if (sval(violation, "type") != "capability_violation" || sval(data_of(violation), "run_id") != run_id)
    return make_error("run_flag: the reason must be a capability_violation of run " + run_id, EINVAL);
  const auto& ctx = it->second.ctx;
  // Who raised it: the connection's peer, never the client's claim (E5).
  auto added = moon.flag(ctx.pack, ctx.version, ctx.digest, run_id, violation, actor_for_uid(static_cast<int64_t>(uid_)));
  if (!added) return added.error();
  return json{{"added", *added}};
}

std::vector<std::string> ConnRuns::close() {
  std::vector<std::string> log;
  if (runs_.empty()) return log;
  auto store = Store::open(home_);
  for (auto& [id, run] : runs_) {
    if (!run.live.active()) continue;  // a replay's record: nothing to mark
    if (!store) {
      // The run's live file stays (this daemon releases its lock): the next reaper marks it.
      log.push_back("run " + id + ": connection lost; cannot mark it: " + store.error().describe());
      continue;
    }
    auto m = mark_incomplete(*store, run.ctx, kIncompleteConnectionLost,
                             {{"holder", "daemon"}, {"client_uid", static_cast<int64_t>(uid_)}});
    if (!m) {
      log.push_back("run " + id + ": connection lost; cannot mark it: " + m.error().describe());
      continue;
    }
    log.push_back("run " + id + ": connection lost before run_end" + (*m ? "; marked run_incomplete" : ""));
    run.live.end();
  }
  for (size_t i = 0; i < runs_.size(); ++i) writer_closed();
  runs_.clear();
  return log;
}

}  // namespace soyaos::moon
