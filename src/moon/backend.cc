// The embedded MoonBackend (Registry and Store in this process), the JSON forms of the
// records, and open_moon()'s choice between the embedded Moon and a daemon.
#include "moon/backend.h"

#include <sqlite3.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <vector>

#include "common/digest.h"
#include "common/text.h"
#include "lint/report.h"
#include "manifest/manifest.h"
#include "moon/live_runs.h"

namespace soyaos::moon {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

fs::path default_socket(const fs::path& home) { return home / "moon.sock"; }

namespace {

std::string str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
int64_t num(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}
// A member of a record read from JSON (a daemon client's request, a reply), or null: unlike
// json::value(), never throws when `j` is not an object or the member has another type.
const json& member(const json& j, const char* k) {
  static const json kNull;
  auto it = j.find(k);  // find() on a non-object is end()
  return it != j.end() ? *it : kNull;
}
bool boolean(const json& j, const char* k) {
  const json& v = member(j, k);
  return v.is_boolean() && v.get<bool>();
}
std::optional<std::string> opt(const json& j, const char* k) {
  auto it = j.find(k);
  if (it != j.end() && it->is_string()) return it->get<std::string>();
  return std::nullopt;
}

}  // namespace

Status RunStream::append_serialized(std::span<const scope::Event> events) {
  std::vector<json> parsed;
  parsed.reserve(events.size());
  for (const auto& e : events) {
    // Our own serialisation: it parses, and dumps back to the same text.
    json j = json::parse(e.json(), nullptr, false);
    if (j.is_discarded()) return make_error("a serialized event of run " + e.run_id + " is not JSON");
    parsed.push_back(std::move(j));
  }
  return append(parsed);
}

Result<std::unique_ptr<RunStream>> MoonBackend::open_run_serialized(const scope::RunContext& ctx,
                                                                    const scope::Event& first) {
  json j = json::parse(first.json(), nullptr, false);
  if (j.is_discarded()) return make_error("the serialized first event of run " + ctx.run_id + " is not JSON");
  return open_run(ctx, j);
}

namespace {

// A run streamed into the embedded Moon: a connection to moon.db that the writer thread of
// the run uses alone, and the run's live file, held by this process. The connection is the
// stream's own (continue_run_embedded) or borrowed from the EmbeddedMoon that opened the run
// (open_run), which must then outlive the stream and serve nothing else meanwhile.
class EmbeddedRunStream final : public RunStream {
 public:
  EmbeddedRunStream(Registry reg, LiveRun live, scope::RunContext ctx)
      : own_(std::move(reg)), reg_(&*own_), live_(std::move(live)), ctx_(std::move(ctx)) {}
  EmbeddedRunStream(Registry* borrowed, LiveRun live, scope::RunContext ctx)
      : reg_(borrowed), live_(std::move(live)), ctx_(std::move(ctx)) {}
  Status append(std::span<const json> events) override { return reg_->store().append_events(events); }
  Status append_serialized(std::span<const scope::Event> events) override {
    std::vector<EventRow> rows;
    rows.reserve(events.size());
    for (const auto& e : events) rows.push_back({e.json(), e.time, e.type, e.run_id, e.pack, e.version});
    return reg_->store().append_rows(rows);
  }
  Result<bool> flag(const json& violation) override {
    return reg_->flag(ctx_.pack, ctx_.version, ctx_.digest, ctx_.run_id, violation, current_actor());
  }
  Status end() override {
    live_.end();
    return {};
  }

 private:
  std::optional<Registry> own_;
  Registry* reg_;
  LiveRun live_;
  scope::RunContext ctx_;
};

class EmbeddedMoon final : public MoonBackend {
 public:
  explicit EmbeddedMoon(Registry reg) : reg_(std::move(reg)) {}
  [[nodiscard]] bool is_daemon() const override { return false; }
  [[nodiscard]] std::string describe() const override { return "embedded at " + reg_.home().string(); }

  Result<PushReply> push(const fs::path& dir, const Actor& actor) override {
    auto r = reg_.push(dir, actor);
    if (!r) return r.error();
    PushReply out;
    out.outcome = r->outcome;
    out.pack = r->pack;
    out.attempted_digest = r->attempted_digest;
    for (const auto& d : r->diagnostics) out.diagnostics.push_back(d.format());
    if (!r->findings.empty()) out.findings_text = lint::format_text(r->findings, false);
    return out;
  }
  Result<PackRecord> pull(const PackRef& ref, const fs::path& dest) override { return reg_.pull(ref, dest); }
  Result<PackRecord> get(const PackRef& ref) override { return reg_.get(ref); }
  Result<std::vector<PackRecord>> list() override { return reg_.list(); }
  Result<std::optional<PackRecord>> find_by_digest(const std::string& digest) override {
    return reg_.find_by_digest(digest);
  }
  Result<std::optional<FlagRecord>> active_flag(const std::string& name, const std::string& version,
                                                const std::string& digest) override {
    return reg_.active_flag(name, version, digest);
  }
  Result<std::vector<FlagRecord>> flags(const std::string& name, const std::string& version,
                                        const std::string& digest) override {
    return reg_.flags(name, version, digest);
  }
  Result<int> unflag(const std::string& name, const std::string& version, const std::string& reason,
                     const Actor& actor) override {
    return reg_.unflag(name, version, reason, actor);
  }
  Result<bool> flag(const std::string& name, const std::string& version, const std::string& digest,
                    const std::string& run_id, const json& violation, const Actor& actor) override {
    return reg_.flag(name, version, digest, run_id, violation, actor);
  }
  Status add_remote_origin(const RemoteOrigin& origin) override {
    if (auto why = check_remote_origin(origin); !why.empty()) return make_error("a registry origin " + why, EINVAL);
    return reg_.store().add_remote_origin(origin);
  }
  Result<bool> add_received_flag(const ReceivedFlag& flag, const std::optional<Actor>& reported_by) override {
    return moon::add_received_flag(reg_.store(), flag, reported_by);
  }
  Result<FlagQueueReport> queue_run_flag(const std::string& run_id, const TreeDigestFn& tree_digest,
                                         const std::string& surface, const std::string& resource) override {
    auto digest = tree_digest();
    if (!digest) return digest.error();
    return queue_run_flags(reg_.store(), reg_.home(), *digest, run_id, surface, resource);
  }
  Result<std::vector<QueuedFlag>> queued_flags(const std::string& registry, bool due_only, int64_t limit,
                                               int64_t run_uid) override {
    const int64_t now =
        due_only ? std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                       .count()
                 : 0;
    return reg_.store().queued_flags(registry, now, limit, run_uid);
  }
  Status flag_publish_result(int64_t id, const std::string& referrer, const std::string& error) override {
    return record_publish_result(reg_.store(), id, referrer, error);
  }
  Result<bool> claim_queued_flag(int64_t id, const std::string& by) override {
    return moon::claim_queued_flag(reg_.store(), id, by);
  }
  Result<std::string> keep_manifest(const std::string& text) override { return reg_.store().put_manifest(text); }
  Result<std::optional<std::string>> manifest(const std::string& digest) override {
    return reg_.store().manifest(digest);
  }
  // The stream writes through this Moon's own connection (issue #16: one moon.db connection
  // fewer to open per run). Its one caller, RunRecorder, owns this backend, keeps it past the
  // stream and calls nothing else on it (moon/recorder.h). Live before anything is stored, as
  // in continue_run_embedded.
  Result<std::unique_ptr<RunStream>> open_run(const scope::RunContext& ctx, const json& first) override {
    auto live = LiveRun::create(reg_.home(), ctx, "run");
    if (!live) return live.error();
    auto stream = std::make_unique<EmbeddedRunStream>(&reg_, std::move(live.value()), ctx);
    if (auto s = stream->append(std::span<const json>(&first, 1)); !s) {
      (void)stream->end();
      return s.error();
    }
    return std::unique_ptr<RunStream>(std::move(stream));
  }
  Result<std::unique_ptr<RunStream>> open_run_serialized(const scope::RunContext& ctx,
                                                         const scope::Event& first) override {
    auto live = LiveRun::create(reg_.home(), ctx, "run");
    if (!live) return live.error();
    auto stream = std::make_unique<EmbeddedRunStream>(&reg_, std::move(live.value()), ctx);
    if (auto s = stream->append_serialized(std::span<const scope::Event>(&first, 1)); !s) {
      (void)stream->end();
      return s.error();
    }
    return std::unique_ptr<RunStream>(std::move(stream));
  }
  Status append_events(std::span<const json> events) override { return reg_.store().append_events(events); }
  Result<std::vector<StoredEvent>> query_events(const EventQuery& q) override {
    return reg_.store().query_events(q);
  }
  Result<bool> add_signature(const SignatureRecord& sig, const json& event) override {
    return reg_.store().add_signature(sig, event);
  }
  Result<std::vector<SignatureRecord>> signatures(const std::string& manifest_digest) override {
    return reg_.store().signatures(manifest_digest);
  }
  Status add_approval(const ApprovalRecord& approval, const json& event) override {
    return reg_.store().add_approval(approval, event);
  }
  Result<std::optional<ApprovalRecord>> last_approval(const std::string& repository) override {
    return reg_.store().last_approval(repository);
  }
  Result<std::vector<ApprovalRecord>> approvals_of(const std::string& digest) override {
    return reg_.store().approvals_of(digest);
  }
  Status record_pack_event(const json& event) override {
    return reg_.store().append_events(std::span<const json>(&event, 1));
  }
  Result<std::string> oci_manifest(const std::string& digest) override {
    // The digest names a file: only "sha256:" and 64 lower-case hex digits (a daemon's
    // client chooses it).
    const bool hex = digest.size() == 71 && digest.rfind("sha256:", 0) == 0 &&
                     digest.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
    if (!hex) return make_error("not a manifest digest: " + digest, EINVAL);
    const fs::path blob = reg_.home() / "oci" / "blobs" / "sha256" / digest.substr(7);
    std::error_code ec;
    const auto size = fs::file_size(blob, ec);
    if (ec) return make_error("the OCI manifest " + blob.string() + ": " + ec.message(), ec.value());
    if (size > manifest::kMaxManifestBytes) return make_error("the OCI manifest " + blob.string() + " is too large");
    std::ifstream f(blob, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) return make_error("read the OCI manifest " + blob.string());
    if ("sha256:" + sha256_hex(bytes) != digest) {
      return make_error("the stored OCI manifest " + blob.string() + " does not match its digest " + digest +
                        " (soyaos moon check)");
    }
    return bytes;
  }
  Result<MoonStatus> status() override {
    MoonStatus s;
    s.home = reg_.home().string();
    if (auto c = count_state(reg_.home(), s); !c) return c.error();
    struct stat st {};
    const fs::path sock = default_socket(reg_.home());
    if (::lstat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) s.stale_socket = sock.string();
    return s;
  }

 private:
  Registry reg_;
};

}  // namespace

Result<std::unique_ptr<RunStream>> continue_run_embedded(const fs::path& home, const scope::RunContext& ctx) {
  // Live before anything is stored: a run whose run_started is on disk is always either
  // finished or found dead (never neither). The rename replaces the .live file of a daemon
  // that died holding this run, so no reaper marks it while it goes on here.
  auto live = LiveRun::create(home, ctx, "run");
  if (!live) return live.error();
  auto reg = Registry::open(home);  // not open_embedded(): no reaping of this very run
  if (!reg) {
    live->end();
    return reg.error();
  }
  return std::unique_ptr<RunStream>(
      std::make_unique<EmbeddedRunStream>(std::move(reg.value()), std::move(live.value()), ctx));
}

Result<std::unique_ptr<MoonBackend>> open_embedded(const fs::path& home, bool reap) {
  auto reg = Registry::open(home);
  if (!reg) return reg.error();
  // Runs whose soyaos died are marked run_incomplete by the next Moon that opens the home
  // (E4). Best effort here: a failure leaves them for the next one (or `moon check`).
  if (reap) (void)reap_dead_runs(home, reg->store());
  return std::unique_ptr<MoonBackend>(std::make_unique<EmbeddedMoon>(std::move(reg.value())));
}

Result<std::unique_ptr<MoonBackend>> open_moon(const fs::path& home) {
  const char* env = std::getenv(kSocketEnv);
  if (env != nullptr && *env != '\0') {
    auto remote = open_remote(env, std::nullopt);
    if (!remote) {
      return make_error("the Moon daemon at " + std::string(env) + " (" + kSocketEnv + ") does not answer: " +
                        remote.error().describe() + "; start it with `soyaos moon serve --socket " + env +
                        "`, or unset " + kSocketEnv + " to use the embedded Moon");
    }
    return remote;
  }
  const fs::path sock = default_socket(home);
  struct stat st {};
  if (::lstat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    auto remote = open_remote(sock, home);
    if (remote) return remote;
    // Nobody listening (a daemon that died, a stale socket file): the embedded Moon.
    // Anything else (no permission on the socket, a peer that is not a Moon) is an error:
    // the daemon exists but this user may not or cannot use it.
    const int e = remote.error().err;
    if (e != ECONNREFUSED && e != ENOENT) {
      return make_error("the Moon daemon at " + sock.string() + " cannot be used: " + remote.error().describe());
    }
  }
  return open_embedded(home);
}

Status count_state(const fs::path& home, MoonStatus& out) {
  const fs::path db = home / "moon.db";
  sqlite3* h = nullptr;
  int rc = sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = h != nullptr ? sqlite3_errmsg(h) : sqlite3_errstr(rc);
    sqlite3_close(h);
    return make_error("open " + db.string() + ": " + msg);
  }
  sqlite3_busy_timeout(h, 30000);
  auto count = [&](const char* sql, int64_t& v) -> Status {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, sql, -1, &st, nullptr) != SQLITE_OK) {
      return make_error(std::string("count in ") + db.string() + ": " + sqlite3_errmsg(h));
    }
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (r != SQLITE_ROW) return make_error(std::string("count in ") + db.string() + ": " + sqlite3_errmsg(h));
    return {};
  };
  Status s = count("SELECT count(*) FROM packs", out.packs);
  if (s) s = count("SELECT count(*) FROM events", out.events);
  sqlite3_close(h);
  return s;
}

// ---- JSON forms ----

json to_json(const PackRecord& p) {
  return {{"id", p.id},           {"name", p.name},
          {"version", p.version}, {"digest", p.digest},
          {"tree_digest", p.tree_digest}, {"oci_manifest", p.oci_manifest},
          {"oci_manifest_size", p.oci_manifest_size}, {"size", p.size},
          {"pushed_at", p.pushed_at}, {"manifest", p.manifest}};
}
PackRecord pack_from_json(const json& j) {
  PackRecord p;
  p.id = num(j, "id");
  p.name = str(j, "name");
  p.version = str(j, "version");
  p.digest = str(j, "digest");
  p.tree_digest = str(j, "tree_digest");
  p.oci_manifest = str(j, "oci_manifest");
  p.oci_manifest_size = num(j, "oci_manifest_size");
  p.size = num(j, "size");
  p.pushed_at = str(j, "pushed_at");
  p.manifest = str(j, "manifest");
  return p;
}

json actor_to_json(const Actor& a) {
  return {{"uid", a.uid}, {"user", a.user.empty() ? json(nullptr) : json(valid_utf8(a.user))}};
}
Actor actor_from_json(const json& j) {
  Actor a;  // uid -1: unknown (never 0, which is root)
  if (!j.is_object()) return a;
  if (auto it = j.find("uid"); it != j.end() && it->is_number_integer()) a.uid = it->get<int64_t>();
  a.user = str(j, "user");
  return a;
}

json to_json(const FlagRecord& f) {
  return {{"id", f.id},
          {"name", f.name},
          {"version", f.version},
          {"digest", f.digest},
          {"run_id", f.run_id},
          {"violation", f.violation},
          {"flagged_at", f.flagged_at},
          {"cleared", f.cleared},
          {"cleared_at", f.cleared_at},
          {"cleared_by", actor_to_json(f.cleared_by)},
          {"cleared_reason", f.cleared_reason},
          {"origin", f.origin},
          {"active", f.active}};
}
FlagRecord flag_from_json(const json& j) {
  FlagRecord f;
  f.id = num(j, "id");
  f.name = str(j, "name");
  f.version = str(j, "version");
  f.digest = str(j, "digest");
  f.run_id = str(j, "run_id");
  f.violation = str(j, "violation");
  f.flagged_at = str(j, "flagged_at");
  f.cleared = boolean(j, "cleared");
  f.cleared_at = str(j, "cleared_at");
  f.cleared_by = actor_from_json(member(j, "cleared_by"));
  f.cleared_reason = str(j, "cleared_reason");
  f.origin = str(j, "origin");
  f.active = boolean(j, "active");
  return f;
}

json to_json(const SignatureRecord& r) {
  return {{"id", r.id},
          {"manifest_digest", r.manifest_digest},
          {"key_id", r.key_id},
          {"signature", r.signature},
          {"reference", r.reference},
          {"added_at", r.added_at},
          {"by", actor_to_json(r.by)}};
}
SignatureRecord signature_from_json(const json& j) {
  SignatureRecord r;
  r.id = num(j, "id");
  r.manifest_digest = str(j, "manifest_digest");
  r.key_id = str(j, "key_id");
  r.signature = str(j, "signature");
  r.reference = str(j, "reference");
  r.added_at = str(j, "added_at");
  r.by = actor_from_json(member(j, "by"));
  return r;
}

json to_json(const ApprovalRecord& a) {
  return {{"id", a.id},
          {"repository", a.repository},
          {"digest", a.digest},
          {"reference", a.reference},
          {"manifest", a.manifest},
          {"approved_at", a.approved_at},
          {"by", actor_to_json(a.by)}};
}
ApprovalRecord approval_from_json(const json& j) {
  ApprovalRecord a;
  a.id = num(j, "id");
  a.repository = str(j, "repository");
  a.digest = str(j, "digest");
  a.reference = str(j, "reference");
  a.manifest = str(j, "manifest");
  a.approved_at = str(j, "approved_at");
  a.by = actor_from_json(member(j, "by"));
  return a;
}

json to_json(const RemoteOrigin& o) {
  return {{"tree_digest", o.tree_digest},         {"registry", o.registry}, {"repository", o.repository},
          {"manifest_digest", o.manifest_digest}, {"manifest_size", o.manifest_size},
          {"name", o.name},                       {"version", o.version}};
}
RemoteOrigin origin_from_json(const json& j) {
  RemoteOrigin o;
  o.tree_digest = str(j, "tree_digest");
  o.registry = str(j, "registry");
  o.repository = str(j, "repository");
  o.manifest_digest = str(j, "manifest_digest");
  o.manifest_size = num(j, "manifest_size");
  o.name = str(j, "name");
  o.version = str(j, "version");
  return o;
}

json to_json(const QueuedFlag& q) {
  return {{"id", q.id},
          {"registry", q.registry},
          {"repository", q.repository},
          {"manifest_digest", q.manifest_digest},
          {"manifest_size", q.manifest_size},
          {"run_id", q.run_id},
          {"body", q.body},
          {"queued_at", q.queued_at},
          {"attempts", q.attempts},
          {"next_attempt", q.next_attempt},
          {"last_error", q.last_error}};
}
QueuedFlag queued_flag_from_json(const json& j) {
  QueuedFlag q;
  q.id = num(j, "id");
  q.registry = str(j, "registry");
  q.repository = str(j, "repository");
  q.manifest_digest = str(j, "manifest_digest");
  q.manifest_size = num(j, "manifest_size");
  q.run_id = str(j, "run_id");
  q.body = str(j, "body");
  q.queued_at = str(j, "queued_at");
  q.attempts = num(j, "attempts");
  q.next_attempt = num(j, "next_attempt");
  q.last_error = str(j, "last_error");
  return q;
}

json to_json(const FlagQueueReport& r) { return {{"registries", r.registries}, {"notes", r.notes}}; }
FlagQueueReport queue_report_from_json(const json& j) {
  FlagQueueReport r;
  for (const char* k : {"registries", "notes"}) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_array()) continue;
    for (const auto& x : *it) {
      if (x.is_string()) (std::string(k) == "notes" ? r.notes : r.registries).push_back(x.get<std::string>());
    }
  }
  return r;
}

Actor actor_for_uid(int64_t uid) {
  Actor a;
  a.uid = uid;
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(static_cast<uid_t>(uid), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    a.user = found->pw_name;
  return a;
}

Actor current_actor() { return actor_for_uid(static_cast<int64_t>(::getuid())); }

json to_json(const StoredEvent& e) {
  return {{"seq", e.seq},   {"time", e.time},       {"type", e.type}, {"run_id", e.run_id},
          {"pack", e.pack}, {"version", e.version}, {"json", e.json}};
}
StoredEvent event_from_json(const json& j) {
  StoredEvent e;
  e.seq = num(j, "seq");
  e.time = str(j, "time");
  e.type = str(j, "type");
  e.run_id = str(j, "run_id");
  e.pack = str(j, "pack");
  e.version = str(j, "version");
  e.json = str(j, "json");
  return e;
}

json to_json(const EventQuery& q) {
  json j = {{"after_seq", q.after_seq}, {"limit", q.limit}};
  if (q.run_id) j["run_id"] = *q.run_id;
  if (q.type) j["type"] = *q.type;
  if (!q.types.empty()) j["types"] = q.types;
  if (q.pack) j["pack"] = *q.pack;
  if (q.version) j["version"] = *q.version;
  if (q.digest) j["digest"] = *q.digest;
  if (q.uid) j["uid"] = *q.uid;
  if (q.since) j["since"] = *q.since;
  if (q.until) j["until"] = *q.until;
  if (q.first) j["first"] = true;
  return j;
}
EventQuery query_from_json(const json& j) {
  EventQuery q;
  q.run_id = opt(j, "run_id");
  q.type = opt(j, "type");
  q.pack = opt(j, "pack");
  q.since = opt(j, "since");
  q.until = opt(j, "until");
  q.version = opt(j, "version");
  q.digest = opt(j, "digest");
  if (auto it = j.find("uid"); it != j.end() && it->is_number_integer()) q.uid = it->get<int64_t>();
  if (auto it = j.find("types"); it != j.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_string()) q.types.push_back(t.get<std::string>());
    }
  }
  q.first = boolean(j, "first");
  q.after_seq = num(j, "after_seq");
  q.limit = num(j, "limit");
  return q;
}

json to_json(const MoonStatus& s) {
  json j = {{"mode", s.daemon ? "daemon" : "embedded"}};
  if (s.daemon) j["socket"] = s.socket;
  j["home"] = s.home;
  j["packs"] = s.packs;
  j["events"] = s.events;
  if (s.daemon) {
    j["pid"] = s.pid;
    j["started_at"] = s.started_at;
    j["uptime_s"] = s.uptime_s;
    j["clients"] = s.clients;
    j["version"] = s.version;
  } else if (!s.stale_socket.empty()) {
    j["stale_socket"] = s.stale_socket;
  }
  return j;
}
MoonStatus status_from_json(const json& j) {
  MoonStatus s;
  s.daemon = str(j, "mode") == "daemon";
  s.socket = str(j, "socket");
  s.home = str(j, "home");
  s.packs = num(j, "packs");
  s.events = num(j, "events");
  s.pid = num(j, "pid");
  s.started_at = str(j, "started_at");
  s.uptime_s = num(j, "uptime_s");
  s.clients = num(j, "clients");
  s.version = str(j, "version");
  s.stale_socket = str(j, "stale_socket");
  return s;
}

json to_json(const PushReply& r) {
  return {{"outcome", to_string(r.outcome)},
          {"pack", to_json(r.pack)},
          {"attempted_digest", r.attempted_digest},
          {"diagnostics", r.diagnostics},
          {"findings_text", r.findings_text}};
}
PushReply push_reply_from_json(const json& j) {
  PushReply r;
  const std::string o = str(j, "outcome");
  for (auto c : {PushOutcome::pushed, PushOutcome::already_pushed, PushOutcome::conflict, PushOutcome::invalid,
                 PushOutcome::lint_errors}) {
    if (o == to_string(c)) r.outcome = c;
  }
  if (j.contains("pack") && j["pack"].is_object()) r.pack = pack_from_json(j["pack"]);
  r.attempted_digest = str(j, "attempted_digest");
  if (j.contains("diagnostics") && j["diagnostics"].is_array()) {
    for (const auto& d : j["diagnostics"]) {
      if (d.is_string()) r.diagnostics.push_back(d.get<std::string>());
    }
  }
  r.findings_text = str(j, "findings_text");
  return r;
}

}  // namespace soyaos::moon
