// The daemon-mode MoonBackend: every operation is a request to `soyaos moon serve` over its
// unix socket (wire format: moon/wire.h). One connection per request, so an idle client
// (a run in progress) holds no daemon thread.
//
// Pack archives cross the socket as attachments: push sends the canonical archive the
// client writes (archive.h) and the daemon validates, lints and stores it like an
// embedded push; pull receives the stored archive and verifies its sha256 here, while
// extracting, exactly as an embedded pull does.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "moon/archive.h"
#include "moon/backend.h"
#include "moon/unpack.h"
#include "moon/wire.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr int kTimeoutSeconds = 300;

Result<UniqueFd> dial(const fs::path& path, int timeout_s = kTimeoutSeconds) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() >= sizeof addr.sun_path) {
    return make_error("moon socket path too long (" + std::to_string(path.native().size()) + " bytes, at most " +
                      std::to_string(sizeof addr.sun_path - 1) + "): " + path.string());
  }
  std::memcpy(addr.sun_path, path.c_str(), path.native().size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket");
  timeval tv{timeout_s, 0};
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    return errno_error("connect " + path.string());
  }
  return fd;
}

struct Session {
  UniqueFd fd;
  wire::Conn conn;
  explicit Session(UniqueFd f) : fd(std::move(f)), conn(fd.get()) {}
};

// Sends `req` and reads one reply; a non-ok reply is an error.
Result<json> call(Session& s, const json& req, std::string_view attachment = {}) {
  if (auto st = s.conn.send(req, attachment); !st) return st.error();
  auto reply = s.conn.receive();
  if (!reply) {
    if (reply.error().message == "eof") return make_error("the Moon daemon closed the connection without an answer");
    return reply.error();
  }
  if (!reply->value("ok", false)) return wire::reply_error(*reply);
  return reply;
}

// A run streamed to the daemon over a connection of its own, open for the run's whole
// life: the daemon holds the run live while the connection is up and marks it
// run_incomplete (connection_lost) when it drops before run_end. When the connection
// itself fails (the daemon died) and the Moon was found through the home's own socket,
// the run goes on in the embedded Moon of that home, as every request does then; a batch
// in flight when the daemon died may then be stored twice (at least once, never lost).
class RemoteRunStream final : public RunStream {
 public:
  RemoteRunStream(std::unique_ptr<Session> s, fs::path socket, scope::RunContext ctx,
                  std::optional<fs::path> fallback_home)
      : s_(std::move(s)), socket_(std::move(socket)), ctx_(std::move(ctx)), fallback_home_(std::move(fallback_home)) {}
  Status append(std::span<const json> events) override {
    if (fallback_) return fallback_->append(events);
    json arr = json::array();
    for (const auto& e : events) arr.push_back(e);
    auto r = rpc({{"op", "run_events"}, {"run_id", ctx_.run_id}, {"events", std::move(arr)}});
    if (!r) return r.error();
    if (fallback_) return fallback_->append(events);
    return {};
  }
  Result<bool> flag(const json& violation) override {
    if (fallback_) return fallback_->flag(violation);
    auto r = rpc({{"op", "run_flag"}, {"run_id", ctx_.run_id}, {"violation", violation}});
    if (!r) return r.error();
    if (fallback_) return fallback_->flag(violation);
    return r->value("added", false);
  }
  Status end() override {
    if (fallback_) return fallback_->end();
    auto r = rpc({{"op", "run_end"}, {"run_id", ctx_.run_id}});
    if (!r) return r.error();
    if (fallback_) return fallback_->end();
    return {};
  }
  [[nodiscard]] bool broken() const override { return broken_ && !fallback_; }
  void interrupt() override {
    interrupted_ = true;
    (void)::shutdown(s_->fd.get(), SHUT_RDWR);
  }

 private:
  // One request. A transport failure with a fallback home switches to it: the reply is
  // then an empty object and fallback_ is set (the caller repeats the operation there).
  Result<json> rpc(const json& req) {
    if (broken_) return make_error("the Moon daemon at " + socket_.string() + " went away during run " + ctx_.run_id, EPIPE);
    if (auto st = s_->conn.send(req); !st) return transport_failed(st.error());
    auto reply = s_->conn.receive();
    if (!reply) return transport_failed(reply.error().message == "eof"
                                            ? make_error("it closed the connection", EPIPE)
                                            : reply.error());
    if (!reply->value("ok", false)) return wire::reply_error(*reply);
    return reply;
  }
  Result<json> transport_failed(const Error& cause) {
    broken_ = true;
    const Error e = make_error("the Moon daemon at " + socket_.string() + " went away during run " + ctx_.run_id +
                                   " (" + cause.describe() + ")",
                               cause.err);
    if (!fallback_home_ || interrupted_) return e;
    auto emb = continue_run_embedded(*fallback_home_, ctx_);
    if (!emb) return make_error(e.describe() + "; the embedded Moon: " + emb.error().describe(), e.err);
    fallback_ = std::move(emb.value());
    return json::object();
  }

  std::unique_ptr<Session> s_;
  fs::path socket_;
  scope::RunContext ctx_;
  std::optional<fs::path> fallback_home_;
  std::unique_ptr<RunStream> fallback_;
  bool broken_ = false;
  std::atomic<bool> interrupted_{false};
};

class RemoteMoon final : public MoonBackend {
 public:
  RemoteMoon(fs::path socket, std::optional<fs::path> fallback_home)
      : socket_(std::move(socket)), fallback_home_(std::move(fallback_home)) {}

  [[nodiscard]] bool is_daemon() const override { return true; }
  [[nodiscard]] std::string describe() const override { return "daemon at " + socket_.string(); }

  Status hello() {
    auto s = dial(socket_, 10);  // a daemon that is up answers this at once
    if (!s) return s.error();
    Session session(std::move(s.value()));
    auto r = call(session, {{"op", "hello"}, {"v", wire::kProtocolVersion}});
    if (!r) return r.error();
    if (r->value("moon", "") != "soyaos" || r->value("v", 0) != wire::kProtocolVersion) {
      return make_error(socket_.string() + " is not a Moon daemon speaking protocol v" +
                        std::to_string(wire::kProtocolVersion));
    }
    return {};
  }

  Result<PushReply> push(const fs::path& dir, const Actor& actor) override {
    auto s = session();
    if (!s) return s.error();
    if (!*s) return fallback_->push(dir, actor);
    UniqueFd mem(::memfd_create("soyaos-push", MFD_CLOEXEC));
    if (!mem) return errno_error("memfd_create");
    auto info = write_archive(dir, mem.get());
    if (!info) return info.error();
    if (::lseek(mem.get(), 0, SEEK_SET) != 0) return errno_error("lseek");
    json req = {{"op", "push"}, {"dir", dir.string()}, {"digest", info->digest}};
    if (auto st = (*s)->conn.send_file(req, mem.get(), info->size); !st) return st.error();
    auto reply = receive(**s);
    if (!reply) return reply.error();
    return push_reply_from_json((*reply)["push"]);
  }

  Result<PackRecord> pull(const PackRef& ref, const fs::path& dest_in) override {
    auto s = session();
    if (!s) return s.error();
    if (!*s) return fallback_->pull(ref, dest_in);
    Session& session = **s;
    if (auto st = session.conn.send({{"op", "pull"}, {"name", ref.name}, {"version", ref.version}}); !st) return st.error();
    auto reply = receive(session);
    if (!reply) return reply.error();
    const PackRecord rec = pack_from_json((*reply)["pack"]);
    const std::string blob = reply->value("blob", "");
    const uint64_t size = reply->value("attachment", uint64_t{0});

    // The destination, as Registry::pull checks it (after the pack is known to exist).
    std::error_code ec;
    const fs::path dest = fs::absolute(dest_in, ec).lexically_normal();
    if (ec) return make_error("resolve " + dest_in.string(), ec.value());
    const fs::path target = dest.filename().empty() ? dest.parent_path() : dest;
    struct stat st {};
    if (::lstat(target.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return make_error("pull " + ref.str() + ": " + dest_in.string() + " exists and is not a directory");
      if (!fs::is_empty(target, ec) || ec)
        return make_error("pull " + ref.str() + ": " + dest_in.string() +
                          " exists and is not empty (refusing to extract into it)");
    } else if (errno != ENOENT) {
      return errno_error("stat " + dest_in.string());
    }
    fs::create_directories(target.parent_path(), ec);
    if (ec) return make_error("create " + target.parent_path().string(), ec.value());

    UniqueFd mem(::memfd_create("soyaos-pull", MFD_CLOEXEC));
    if (!mem) return errno_error("memfd_create");
    if (auto r = session.conn.read_attachment(size, mem.get()); !r) return r.error();
    if (::lseek(mem.get(), 0, SEEK_SET) != 0) return errno_error("lseek");

    // moon/unpack.h, as the embedded pull does: size and digest verified on the bytes
    // received before anything is unpacked (a daemon, or anything between, cannot hand over
    // other content than its record names), the tree digest after, nothing left at dest_in
    // on failure.
    UnpackExpect expect;
    expect.what = "blob " + rec.digest + " of " + ref.str() + " (the registry copy at " + blob + ")";
    expect.digest = rec.digest;
    expect.size = static_cast<uint64_t>(rec.size);
    expect.size_known = rec.size > 0;
    expect.tree_digest = rec.tree_digest;
    if (auto s = unpack_archive(mem.get(), expect, target); !s) return make_error("pull " + ref.str() + ": " + s.error().describe());
    return rec;
  }

  Result<PackRecord> get(const PackRef& ref) override {
    auto r = request({{"op", "get"}, {"name", ref.name}, {"version", ref.version}}, [&](MoonBackend& b) -> Result<json> {
      auto p = b.get(ref);
      if (!p) return p.error();
      return json{{"pack", to_json(*p)}};
    });
    if (!r) return r.error();
    return pack_from_json((*r)["pack"]);
  }

  Result<std::vector<PackRecord>> list() override {
    auto r = request({{"op", "list"}}, [&](MoonBackend& b) -> Result<json> {
      auto l = b.list();
      if (!l) return l.error();
      json arr = json::array();
      for (const auto& p : *l) arr.push_back(to_json(p));
      return json{{"packs", arr}};
    });
    if (!r) return r.error();
    std::vector<PackRecord> out;
    for (const auto& p : (*r)["packs"]) out.push_back(pack_from_json(p));
    return out;
  }

  Result<std::optional<PackRecord>> find_by_digest(const std::string& digest) override {
    auto r = request({{"op", "find_by_digest"}, {"digest", digest}}, [&](MoonBackend& b) -> Result<json> {
      auto p = b.find_by_digest(digest);
      if (!p) return p.error();
      return json{{"pack", *p ? to_json(**p) : json(nullptr)}};
    });
    if (!r) return r.error();
    if ((*r)["pack"].is_null()) return std::optional<PackRecord>();
    return std::optional<PackRecord>(pack_from_json((*r)["pack"]));
  }

  Result<std::optional<FlagRecord>> active_flag(const std::string& name, const std::string& version,
                                                const std::string& digest) override {
    json req = {{"op", "active_flag"}, {"name", name}, {"version", version}, {"digest", digest}};
    auto r = request(req, [&](MoonBackend& b) -> Result<json> {
      auto f = b.active_flag(name, version, digest);
      if (!f) return f.error();
      return json{{"flag", *f ? to_json(**f) : json(nullptr)}};
    });
    if (!r) return r.error();
    if ((*r)["flag"].is_null()) return std::optional<FlagRecord>();
    return std::optional<FlagRecord>(flag_from_json((*r)["flag"]));
  }

  Result<std::vector<FlagRecord>> flags(const std::string& name, const std::string& version,
                                        const std::string& digest) override {
    json req = {{"op", "flags"}, {"name", name}, {"version", version}, {"digest", digest}};
    auto r = request(req, [&](MoonBackend& b) -> Result<json> {
      auto f = b.flags(name, version, digest);
      if (!f) return f.error();
      json arr = json::array();
      for (const auto& x : *f) arr.push_back(to_json(x));
      return json{{"flags", arr}};
    });
    if (!r) return r.error();
    std::vector<FlagRecord> out;
    for (const auto& f : (*r)["flags"]) out.push_back(flag_from_json(f));
    return out;
  }

  // The actor is not sent: the daemon records its peer's uid (SO_PEERCRED). It is used
  // only when the request falls back to the embedded Moon (this process's own user).
  Result<int> unflag(const std::string& name, const std::string& version, const std::string& reason,
                     const Actor& actor) override {
    json req = {{"op", "unflag"}, {"name", name}, {"version", version}, {"reason", reason}};
    auto r = request(req, [&](MoonBackend& b) -> Result<json> {
      auto n = b.unflag(name, version, reason, actor);
      if (!n) return n.error();
      return json{{"cleared", *n}};
    });
    if (!r) return r.error();
    return r->value("cleared", 0);
  }

  // The actor is not sent either (as unflag).
  Result<bool> flag(const std::string& name, const std::string& version, const std::string& digest,
                    const std::string& run_id, const json& violation, const Actor& actor) override {
    json req = {{"op", "flag"},       {"name", name},     {"version", version},
                {"digest", digest},   {"run_id", run_id}, {"violation", violation}};
    auto r = request(req, [&](MoonBackend& b) -> Result<json> {
      auto added = b.flag(name, version, digest, run_id, violation, actor);
      if (!added) return added.error();
      return json{{"added", *added}};
    });
    if (!r) return r.error();
    return r->value("added", false);
  }

  // ---- flags that travel (server_flags.h): the daemon checks and stamps every record ----
  Status add_remote_origin(const RemoteOrigin& origin) override {
    auto r = request({{"op", "remote_origin"}, {"origin", to_json(origin)}}, [&](MoonBackend& b) -> Result<json> {
      if (auto st = b.add_remote_origin(origin); !st) return st.error();
      return json::object();
    });
    if (!r) return r.error();
    return {};
  }

  Result<bool> add_received_flag(const ReceivedFlag& flag, const std::optional<Actor>& reported_by) override {
    auto r = request({{"op", "received_flag"}, {"flag", to_json(flag)}}, [&](MoonBackend& b) -> Result<json> {
      auto added = b.add_received_flag(flag, reported_by);
      if (!added) return added.error();
      return json{{"added", *added}};
    });
    if (!r) return r.error();
    return r->value("added", false);
  }

  // Only the run id is sent: the daemon reads the digest and the violation from its own
  // record of the run. The rest serves the fallback (the only caller of tree_digest).
  Result<FlagQueueReport> queue_run_flag(const std::string& run_id, const TreeDigestFn& tree_digest,
                                         const std::string& surface, const std::string& resource) override {
    auto r = request({{"op", "queue_run_flag"}, {"run_id", run_id}}, [&](MoonBackend& b) -> Result<json> {
      auto q = b.queue_run_flag(run_id, tree_digest, surface, resource);
      if (!q) return q.error();
      return json{{"queued", to_json(*q)}};
    });
    if (!r) return r.error();
    return queue_report_from_json(r->value("queued", json::object()));
  }

  Result<std::vector<QueuedFlag>> queued_flags(const std::string& registry, bool due_only, int64_t limit,
                                               int64_t run_uid) override {
    json req = {{"op", "queued_flags"}, {"registry", registry}, {"due", due_only}, {"limit", limit}};
    auto r = request(req, [&](MoonBackend& b) -> Result<json> {
      auto l = b.queued_flags(registry, due_only, limit, run_uid);
      if (!l) return l.error();
      json arr = json::array();
      for (const auto& q : *l) arr.push_back(to_json(q));
      return json{{"flags", std::move(arr)}};
    });
    if (!r) return r.error();
    std::vector<QueuedFlag> out;
    for (const auto& q : r->value("flags", json::array())) out.push_back(queued_flag_from_json(q));
    return out;
  }

  Status flag_publish_result(int64_t id, const std::string& referrer, const std::string& error) override {
    json req = {{"op", "flag_publish_result"}, {"id", id}, {"referrer", referrer}, {"error", error}};
    auto r = request(req, [&](MoonBackend& b) -> Result<json> {
      if (auto st = b.flag_publish_result(id, referrer, error); !st) return st.error();
      return json::object();
    });
    if (!r) return r.error();
    return {};
  }

  // Only the id is sent: the daemon names its peer as the claimer.
  Result<bool> claim_queued_flag(int64_t id, const std::string& by) override {
    auto r = request({{"op", "claim_queued_flag"}, {"id", id}}, [&](MoonBackend& b) -> Result<json> {
      auto c = b.claim_queued_flag(id, by);
      if (!c) return c.error();
      return json{{"claimed", *c}};
    });
    if (!r) return r.error();
    return r->value("claimed", false);
  }

  Result<std::string> keep_manifest(const std::string& text) override {
    auto r = request({{"op", "keep_manifest"}, {"manifest", text}}, [&](MoonBackend& b) -> Result<json> {
      auto d = b.keep_manifest(text);
      if (!d) return d.error();
      return json{{"digest", *d}};
    });
    if (!r) return r.error();
    return r->value("digest", "");
  }

  Result<std::optional<std::string>> manifest(const std::string& digest) override {
    auto r = request({{"op", "manifest"}, {"digest", digest}}, [&](MoonBackend& b) -> Result<json> {
      auto m = b.manifest(digest);
      if (!m) return m.error();
      return json{{"manifest", *m ? json(**m) : json(nullptr)}};
    });
    if (!r) return r.error();
    if (!r->contains("manifest") || !(*r)["manifest"].is_string()) return std::optional<std::string>();
    return std::optional<std::string>((*r)["manifest"].get<std::string>());
  }

  Result<std::unique_ptr<RunStream>> open_run(const scope::RunContext& ctx, const json& first) override {
    auto s = session();
    if (!s) return s.error();
    if (!*s) return fallback_->open_run(ctx, first);
    auto r = call(**s, {{"op", "run_begin"}, {"run_id", ctx.run_id}, {"event", first}});
    if (!r) return r.error();
    // The connection stays open for the run: the daemon knows the run is alive by it.
    return std::unique_ptr<RunStream>(std::make_unique<RemoteRunStream>(std::move(s.value()), socket_, ctx, fallback_home_));
  }

  // The daemon accepts events only of a run started on the same connection (E5): a
  // stand-alone record (a replay's cache_hit) is a run of its own, begun and ended here.
  Status append_events(std::span<const json> events) override {
    if (events.empty()) return {};
    auto s = session();
    if (!s) return s.error();
    if (!*s) return fallback_->append_events(events);
    const json& first = events.front();
    const std::string run_id =
        first.contains("data") && first["data"].is_object() ? first["data"].value("run_id", "") : "";
    auto r = call(**s, {{"op", "run_begin"}, {"run_id", run_id}, {"event", first}});
    if (!r) return r.error();
    if (events.size() > 1) {
      json arr = json::array();
      for (size_t i = 1; i < events.size(); ++i) arr.push_back(events[i]);
      if (auto e = call(**s, {{"op", "run_events"}, {"run_id", run_id}, {"events", std::move(arr)}}); !e)
        return e.error();
    }
    if (auto e = call(**s, {{"op", "run_end"}, {"run_id", run_id}}); !e) return e.error();
    return {};
  }

  Result<std::vector<StoredEvent>> query_events(const EventQuery& q) override {
    auto s = session();
    if (!s) return s.error();
    if (!*s) return fallback_->query_events(q);
    Session& session = **s;
    if (auto st = session.conn.send({{"op", "query_events"}, {"query", to_json(q)}}); !st) return st.error();
    std::vector<StoredEvent> out;
    for (;;) {
      auto reply = receive(session);
      if (!reply) return reply.error();
      for (const auto& e : (*reply)["events"]) out.push_back(event_from_json(e));
      if (!reply->value("more", false)) break;
    }
    return out;
  }

  // Who signed, approved or was refused is not taken from these requests: the daemon
  // stamps its peer (SO_PEERCRED). The records' own `by` serve only the fallback.
  Result<bool> add_signature(const SignatureRecord& sig, const json& event) override {
    auto r = request({{"op", "add_signature"}, {"signature", to_json(sig)}, {"event", event}},
                     [&](MoonBackend& b) -> Result<json> {
                       auto added = b.add_signature(sig, event);
                       if (!added) return added.error();
                       return json{{"added", *added}};
                     });
    if (!r) return r.error();
    return r->value("added", false);
  }

  Result<std::vector<SignatureRecord>> signatures(const std::string& manifest_digest) override {
    auto r = request({{"op", "signatures"}, {"digest", manifest_digest}}, [&](MoonBackend& b) -> Result<json> {
      auto l = b.signatures(manifest_digest);
      if (!l) return l.error();
      json arr = json::array();
      for (const auto& x : *l) arr.push_back(to_json(x));
      return json{{"signatures", std::move(arr)}};
    });
    if (!r) return r.error();
    std::vector<SignatureRecord> out;
    for (const auto& x : r->value("signatures", json::array())) out.push_back(signature_from_json(x));
    return out;
  }

  Status add_approval(const ApprovalRecord& approval, const json& event) override {
    auto r = request({{"op", "add_approval"}, {"approval", to_json(approval)}, {"event", event}},
                     [&](MoonBackend& b) -> Result<json> {
                       if (auto st = b.add_approval(approval, event); !st) return st.error();
                       return json::object();
                     });
    if (!r) return r.error();
    return {};
  }

  Result<std::optional<ApprovalRecord>> last_approval(const std::string& repository) override {
    auto r = request({{"op", "last_approval"}, {"repository", repository}}, [&](MoonBackend& b) -> Result<json> {
      auto a = b.last_approval(repository);
      if (!a) return a.error();
      return json{{"approval", *a ? to_json(**a) : json(nullptr)}};
    });
    if (!r) return r.error();
    if (!r->contains("approval") || !(*r)["approval"].is_object()) return std::optional<ApprovalRecord>();
    return std::optional<ApprovalRecord>(approval_from_json((*r)["approval"]));
  }

  Result<std::vector<ApprovalRecord>> approvals_of(const std::string& digest) override {
    auto r = request({{"op", "approvals_of"}, {"digest", digest}}, [&](MoonBackend& b) -> Result<json> {
      auto l = b.approvals_of(digest);
      if (!l) return l.error();
      json arr = json::array();
      for (const auto& x : *l) arr.push_back(to_json(x));
      return json{{"approvals", std::move(arr)}};
    });
    if (!r) return r.error();
    std::vector<ApprovalRecord> out;
    for (const auto& x : r->value("approvals", json::array())) out.push_back(approval_from_json(x));
    return out;
  }

  Status record_pack_event(const json& event) override {
    auto r = request({{"op", "pack_event"}, {"event", event}}, [&](MoonBackend& b) -> Result<json> {
      if (auto st = b.record_pack_event(event); !st) return st.error();
      return json::object();
    });
    if (!r) return r.error();
    return {};
  }

  Result<std::string> oci_manifest(const std::string& digest) override {
    auto r = request({{"op", "oci_manifest"}, {"digest", digest}}, [&](MoonBackend& b) -> Result<json> {
      auto m = b.oci_manifest(digest);
      if (!m) return m.error();
      return json{{"manifest", *m}};
    });
    if (!r) return r.error();
    const std::string bytes = r->value("manifest", "");
    // Checked here too: the bytes signed are the bytes the digest names.
    if ("sha256:" + sha256_hex(bytes) != digest) {
      return make_error("the Moon daemon's OCI manifest " + digest + " does not match its digest");
    }
    return bytes;
  }

  Result<MoonStatus> status() override {
    auto s = session();
    if (!s) return s.error();
    if (!*s) return fallback_->status();
    auto r = call(**s, {{"op", "status"}});
    if (!r) return r.error();
    return status_from_json((*r)["status"]);
  }

 private:
  // A connected session, or nullptr (with fallback_ ready) when the daemon is gone and a
  // fallback home was given.
  Result<std::unique_ptr<Session>> session() {
    if (fallback_) return std::unique_ptr<Session>();
    auto fd = dial(socket_);
    if (fd) return std::make_unique<Session>(std::move(fd.value()));
    const int e = fd.error().err;
    if (fallback_home_ && (e == ECONNREFUSED || e == ENOENT)) {
      auto emb = open_embedded(*fallback_home_);
      if (!emb) return emb.error();
      fallback_ = std::move(emb.value());
      return std::unique_ptr<Session>();
    }
    return make_error("the Moon daemon at " + socket_.string() + " does not answer: " + fd.error().describe());
  }

  static Result<json> receive(Session& s) {
    auto reply = s.conn.receive();
    if (!reply) {
      if (reply.error().message == "eof") return make_error("the Moon daemon closed the connection without an answer");
      return reply.error();
    }
    if (!reply->value("ok", false)) return wire::reply_error(*reply);
    return reply;
  }

  // One request with a JSON reply; `local` runs the same operation on the fallback.
  template <typename Local>
  Result<json> request(const json& req, Local&& local) {
    auto s = session();
    if (!s) return s.error();
    if (!*s) return local(*fallback_);
    return call(**s, req);
  }

  fs::path socket_;
  std::optional<fs::path> fallback_home_;
  std::unique_ptr<MoonBackend> fallback_;
};

}  // namespace

Result<std::unique_ptr<MoonBackend>> open_remote(const fs::path& socket, std::optional<fs::path> fallback_home) {
  auto m = std::make_unique<RemoteMoon>(socket, std::move(fallback_home));
  if (auto s = m->hello(); !s) return s.error();
  return std::unique_ptr<MoonBackend>(std::move(m));
}

}  // namespace soyaos::moon
