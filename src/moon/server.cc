#include "moon/server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/text.h"
#include "common/unique_fd.h"
#include "moon/archive.h"
#include "moon/backend.h"
#include "moon/group_commit.h"
#include "moon/server_consent.h"
#include "moon/server_flags.h"
#include "moon/server_runs.h"
#include "moon/wire.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool known = false;  // SO_PEERCRED answered: uid/gid/pid are the peer's
  [[nodiscard]] std::string str() const {
    return "uid=" + std::to_string(uid) + " gid=" + std::to_string(gid) + " pid=" + std::to_string(pid);
  }
};

struct Shared {
  ServeOptions opt;
  std::string started_at;
  std::chrono::steady_clock::time_point started;
  std::mutex mu;
  std::condition_variable cv;
  std::set<int> clients;  // fds being served
  std::vector<std::unique_ptr<MoonBackend>> pool;  // idle embedded Moons
  std::atomic<bool> stopping{false};
  // Every client's run events are committed through it, batches that arrive together in
  // one transaction (moon/group_commit.h).
  std::unique_ptr<GroupCommit> commits;

  void log(const std::string& line) {
    if (opt.log) opt.log(line);
  }
  Result<std::unique_ptr<MoonBackend>> borrow() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!pool.empty()) {
        auto b = std::move(pool.back());
        pool.pop_back();
        return b;
      }
    }
    return open_embedded(opt.home);
  }
  void give_back(std::unique_ptr<MoonBackend> b) {
    std::lock_guard<std::mutex> lock(mu);
    pool.push_back(std::move(b));
  }
};

std::string req_str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Where a pushed archive is received: memory for up to 256 MiB (it is read once, right
// away), else an unnamed file in HOME/tmp.
Result<UniqueFd> temp_file(const fs::path& dir, uint64_t size) {
  if (size <= (uint64_t{256} << 20)) {
    UniqueFd mem(::memfd_create("soyaos-moon-push", MFD_CLOEXEC));
    if (mem) return mem;
  }
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return errno_error("create a temporary file in " + dir.string());
  return fd;
}

// A push: the client's canonical archive arrives as the attachment; it is checked against
// the digest the client computed, extracted into a private directory of the home and
// pushed from there exactly as an embedded push (validate, lint, archive, store).
Result<json> do_push(Shared& sh, MoonBackend& moon, wire::Conn& conn, const json& req, const Peer& peer) {
  const auto attachment = req.find("attachment");
  const uint64_t size = attachment != req.end() && attachment->is_number_unsigned() ? attachment->get<uint64_t>() : 0;
  const fs::path tmp_root = sh.opt.home / "tmp";
  std::error_code ec;
  fs::create_directories(tmp_root, ec);
  (void)::chmod(tmp_root.c_str(), 0700);
  auto file = temp_file(tmp_root, size);
  if (!file) {
    (void)conn.read_attachment(size, -1);
    return file.error();
  }
  if (auto s = conn.read_attachment(size, file->get()); !s) return s.error();
  if (::lseek(file->get(), 0, SEEK_SET) != 0) return errno_error("lseek");
  std::string dir_tmpl = (tmp_root / "push-XXXXXX").string();
  if (::mkdtemp(dir_tmpl.data()) == nullptr) return errno_error("mkdtemp " + dir_tmpl);
  const fs::path dir = dir_tmpl;
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{dir};
  auto got = extract_archive(file->get(), dir);
  if (!got) return make_error("the pushed archive is not a canonical pack archive: " + got.error().describe());
  const std::string want = req_str(req, "digest");
  if (*got != want) {
    return make_error("the pushed archive does not match the digest the client announced (" + want + ", received " +
                      *got + ")");
  }
  // Who pushed comes from the socket (SO_PEERCRED), never from the client's message.
  if (!peer.known) return make_error("push: the client's credentials (SO_PEERCRED) are unknown");
  auto r = moon.push(dir, actor_for_uid(peer.uid));
  if (!r) return r.error();
  // Diagnostics name the file as the client knows it. They are escaped for a terminal
  // (Diagnostic::format()), so the client's path is too, exactly once, as the embedded
  // Moon's diagnostics show it: a pack directory named with an ESC or a newline.
  const std::string shown = escape_for_terminal(req_str(req, "dir"));
  const std::string ours = escape_for_terminal(dir.string());
  for (auto& d : r->diagnostics) {
    if (d.rfind(ours, 0) == 0) d = shown + d.substr(ours.size());
  }
  if (r->outcome == PushOutcome::pushed) {
    sh.log("push " + r->pack.name + "@" + r->pack.version + " " + r->pack.digest + " by " + peer.str());
  }
  return json{{"push", to_json(*r)}};
}

// One request other than push/pull/query (those stream); the reply's fields besides "ok".
Result<json> dispatch(Shared& sh, MoonBackend& moon, const json& req, const Peer& peer, const std::string& op) {
  const std::string name = req_str(req, "name");
  const std::string version = req_str(req, "version");
  if (op == "hello") {
    return json{{"moon", "soyaos"}, {"v", wire::kProtocolVersion}, {"pid", ::getpid()}, {"version", sh.opt.version}};
  }
  if (op == "get") {
    auto p = moon.get(PackRef{name, version});
    if (!p) return p.error();
    return json{{"pack", to_json(*p)}};
  }
  if (op == "list") {
    auto l = moon.list();
    if (!l) return l.error();
    json arr = json::array();
    for (const auto& p : *l) arr.push_back(to_json(p));
    return json{{"packs", std::move(arr)}};
  }
  if (op == "find_by_digest") {
    auto p = moon.find_by_digest(req_str(req, "digest"));
    if (!p) return p.error();
    return json{{"pack", *p ? to_json(**p) : json(nullptr)}};
  }
  if (op == "active_flag") {
    auto f = moon.active_flag(name, version, req_str(req, "digest"));
    if (!f) return f.error();
    return json{{"flag", *f ? to_json(**f) : json(nullptr)}};
  }
  if (op == "flags") {
    auto f = moon.flags(name, version, req_str(req, "digest"));
    if (!f) return f.error();
    json arr = json::array();
    for (const auto& x : *f) arr.push_back(to_json(x));
    return json{{"flags", std::move(arr)}};
  }
  if (op == "unflag") {
    // Who did it comes from the socket (SO_PEERCRED), never from the client's message.
    if (!peer.known) return make_error("unflag: the client's credentials (SO_PEERCRED) are unknown");
    // Clearing a flag hides a pack that misbehaved: only the Moon's owner (the daemon's own
    // uid) or root may, never any member of the socket's group (issue #17).
    if (peer.uid != 0 && peer.uid != ::geteuid()) {
      return make_error("unflag " + name + "@" + version + ": refused: only root or the Moon's owner (uid " +
                            std::to_string(::geteuid()) + ") may clear a flag; this client is uid " +
                            std::to_string(peer.uid),
                        EPERM);
    }
    auto n = moon.unflag(name, version, req_str(req, "reason"), actor_for_uid(peer.uid));
    if (!n) return n.error();
    if (*n > 0) sh.log("unflag " + name + "@" + version + " (" + std::to_string(*n) + ") by " + peer.str());
    return json{{"cleared", *n}};
  }
  if (op == "keep_manifest") {
    // The digest is the Moon's own computation over the bytes received.
    if (!req.contains("manifest") || !req["manifest"].is_string()) return make_error("keep_manifest: no manifest text");
    auto d = moon.keep_manifest(req["manifest"].get<std::string>());
    if (!d) return d.error();
    return json{{"digest", *d}};
  }
  if (op == "manifest") {
    auto m = moon.manifest(req_str(req, "digest"));
    if (!m) return m.error();
    return json{{"manifest", *m ? json(**m) : json(nullptr)}};
  }
  if (auto r = handle_consent_op(moon, op, req, peer.uid, peer.known)) return std::move(*r);  // C12
  if (auto r = handle_flag_op(moon, op, req, peer.uid, peer.known, [&](const std::string& l) { sh.log(l); }))
    return std::move(*r);  // C12, C8 (4): flags that travel
  if (op == "status") {
    auto s = moon.status();
    if (!s) return s.error();
    s->daemon = true;
    s->socket = sh.opt.socket.string();
    s->stale_socket.clear();
    s->pid = ::getpid();
    s->started_at = sh.started_at;
    s->uptime_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - sh.started).count();
    {
      std::lock_guard<std::mutex> lock(sh.mu);
      s->clients = static_cast<int64_t>(sh.clients.size());
    }
    s->version = sh.opt.version;
    json j = to_json(*s);
    j["client"] = {{"uid", peer.uid}, {"gid", peer.gid}, {"pid", peer.pid}};
    return json{{"status", std::move(j)}};
  }
  return make_error("unknown request '" + op + "'");
}

void serve_client(Shared& sh, int fd) {
  Peer peer;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) peer = {cred.pid, cred.uid, cred.gid, true};
  timeval tv{600, 0};  // an idle client is let go after 10 minutes
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  timeval stv{300, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof stv);
  wire::Conn conn(fd);
  std::unique_ptr<MoonBackend> moon;
  ConnRuns runs(sh.opt.home, peer.uid, peer.known, sh.commits.get());  // the runs this client started here (E5)
  for (;;) {
    auto req = conn.receive();
    if (!req) {
      if (req.error().message != "eof" && !sh.stopping) sh.log("client " + peer.str() + ": " + req.error().describe());
      break;
    }
    const std::string op = req_str(*req, "op");
    if (!moon) {
      auto b = sh.borrow();
      if (!b) {
        sh.log("moon: " + b.error().describe());
        (void)conn.send(wire::error_reply(b.error()));
        break;
      }
      moon = std::move(b.value());
    }
    Status sent;
    // A request is the client's JSON: a field of an unexpected type makes nlohmann throw
    // (value(), get<>() on a string where an object was expected...). Whatever a handler
    // missed, it fails this client's request with EINVAL and closes its connection (an
    // attachment may be half read) — it never terminates the daemon for every user.
    try {
      if (auto r = runs.handle(*moon, op, *req)) {
        if (!*r) {
          sh.log(op + " by " + peer.str() + ": " + r->error().describe());
          sent = conn.send(wire::error_reply(r->error()));
        } else {
          json reply = {{"ok", true}};
          for (auto it = (*r)->begin(); it != (*r)->end(); ++it) reply[it.key()] = it.value();
          sent = conn.send(reply);
        }
        if (runs.any()) {
          // A run's connection may stay idle as long as the agent computes: its end (the
          // client's death included) is the run's end, not a timeout.
          timeval none{0, 0};
          (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        }
      } else if (op == "push") {
        auto r = do_push(sh, *moon, conn, *req, peer);
        json reply = r ? json{{"ok", true}} : wire::error_reply(r.error());
        if (r) {
          for (auto it = r->begin(); it != r->end(); ++it) reply[it.key()] = it.value();
        }
        sent = conn.send(reply);
      } else if (op == "pull") {
        auto p = moon->get(PackRef{req_str(*req, "name"), req_str(*req, "version")});
        if (!p) {
          sent = conn.send(wire::error_reply(p.error()));
        } else {
          const fs::path blob = sh.opt.home / "oci" / "blobs" / "sha256" / p->digest.substr(p->digest.find(':') + 1);
          UniqueFd bfd(::open(blob.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
          struct stat st {};
          if (!bfd || ::fstat(bfd.get(), &st) != 0) {
            sent = conn.send(wire::error_reply(
                errno_error("blob " + p->digest + " of " + p->name + "@" + p->version + " cannot be read: open " + blob.string())));
          } else {
            sent = conn.send_file({{"ok", true}, {"pack", to_json(*p)}, {"blob", blob.string()}}, bfd.get(),
                                  static_cast<uint64_t>(st.st_size));
          }
        }
      } else if (op == "query_events") {
        auto events = moon->query_events(query_from_json(req->value("query", json::object())));
        if (!events) {
          sent = conn.send(wire::error_reply(events.error()));
        } else {
          constexpr size_t kChunk = 5000;
          size_t i = 0;
          do {
            json arr = json::array();
            for (size_t n = 0; i < events->size() && n < kChunk; ++i, ++n) arr.push_back(to_json((*events)[i]));
            sent = conn.send({{"ok", true}, {"events", std::move(arr)}, {"more", i < events->size()}});
          } while (sent && i < events->size());
        }
      } else {
        auto r = dispatch(sh, *moon, *req, peer, op);
        if (!r) {
          sh.log(op + " by " + peer.str() + ": " + r.error().describe());
          sent = conn.send(wire::error_reply(r.error()));
        } else {
          json reply = {{"ok", true}};
          for (auto it = r->begin(); it != r->end(); ++it) reply[it.key()] = it.value();
          sent = conn.send(reply);
        }
      }
    } catch (const std::exception& e) {
      sh.log(op.substr(0, 64) + " by " + peer.str() + ": a malformed request: " + e.what());
      (void)conn.send(wire::error_reply(make_error("a malformed request: " + std::string(e.what()), EINVAL)));
      break;
    }
    if (!sent) break;
  }
  for (const auto& line : runs.close()) sh.log(line + " (" + peer.str() + ")");
  if (moon) sh.give_back(std::move(moon));
}

// Whether a Moon answers on `path`: its pid, 0 when nothing listens there.
Result<pid_t> probe(const fs::path& path) {
  auto remote = open_remote(path, std::nullopt);
  if (remote) {
    auto st = (*remote)->status();
    return st ? static_cast<pid_t>(st->pid) : pid_t{-1};
  }
  const int e = remote.error().err;
  if (e == ECONNREFUSED || e == ENOENT) return pid_t{0};
  return remote.error();
}

Result<UniqueFd> bind_socket(const ServeOptions& opt) {
  const fs::path& path = opt.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() >= sizeof addr.sun_path) {
    return make_error("socket path too long (" + std::to_string(path.native().size()) + " bytes, at most " +
                      std::to_string(sizeof addr.sun_path - 1) + "): " + path.string());
  }
  // The socket is bound, given its group and set listening under a temporary name in the
  // same directory, then linked to `path`: the path appears only once it accepts, so a
  // client that sees it (a script that waits for the file, then connects) is never refused
  // in between (ECONNREFUSED between bind and listen).
  // This process's own name (two daemons starting at once never share one).
  const std::string pid = std::to_string(::getpid());
  std::string temp = path.string() + "." + pid;
  if (temp.size() >= sizeof addr.sun_path) temp = (path.parent_path() / ("." + pid)).string();
  if (temp.size() >= sizeof addr.sun_path) {
    return make_error("socket path too long for its temporary name (" + temp + ", at most " +
                      std::to_string(sizeof addr.sun_path - 1) + " bytes)");
  }
  std::memcpy(addr.sun_path, temp.c_str(), temp.size());
  gid_t gid = 0;
  if (!opt.group.empty()) {
    std::vector<char> buf(16384);
    group gr{};
    group* found = nullptr;
    int rc = ::getgrnam_r(opt.group.c_str(), &gr, buf.data(), buf.size(), &found);
    if (rc != 0 || found == nullptr) return make_error("--group " + opt.group + ": no such group", rc);
    gid = gr.gr_gid;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error(path.string() + " exists and is not a socket: refusing to replace it");
    auto pid = probe(path);
    if (!pid) {
      return make_error("a socket at " + path.string() + " cannot be probed (" + pid.error().describe() +
                        "): refusing to replace it");
    }
    if (*pid != 0) {
      return make_error("a Moon daemon already answers on " + path.string() +
                        (*pid > 0 ? " (pid " + std::to_string(*pid) + ")" : std::string()));
    }
    if (::unlink(path.c_str()) != 0) return errno_error("remove the stale socket " + path.string());
  } else if (errno != ENOENT) {
    return errno_error("stat " + path.string());
  }
  // A temporary socket left by an earlier process of this pid that died before the link:
  // ours to remove (only a socket; anything else there is refused).
  if (::lstat(temp.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error(temp + " exists and is not a socket: refusing to replace it");
    if (::unlink(temp.c_str()) != 0) return errno_error("remove the stale socket " + temp);
  }
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket");
  // The socket is created 0600 (the umask applies to bind), so nobody else can connect
  // between bind and the group change.
  const mode_t old = ::umask(0177);
  const int b = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  ::umask(old);
  if (b != 0) return make_error("bind " + temp, bind_errno);
  if (!opt.group.empty()) {
    if (::chown(temp.c_str(), static_cast<uid_t>(-1), gid) != 0 || ::chmod(temp.c_str(), 0660) != 0) {
      Error e = errno_error("give " + temp + " to group " + opt.group);
      (void)::unlink(temp.c_str());
      return e;
    }
  }
  if (::listen(fd.get(), 128) != 0) {
    Error e = errno_error("listen " + temp);
    (void)::unlink(temp.c_str());
    return e;
  }
  // link(), not rename(): it never replaces a socket that another daemon put there since
  // the check above (EEXIST), as bind() on the path itself refused to.
  if (::link(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    (void)::unlink(temp.c_str());
    if (err == EEXIST) return make_error("another Moon daemon took " + path.string() + " meanwhile", err);
    return make_error("link " + temp + " to " + path.string(), err);
  }
  (void)::unlink(temp.c_str());
  return fd;
}

}  // namespace

Status serve(const ServeOptions& options) {
  auto sh = std::make_shared<Shared>();
  sh->opt = options;
  if (sh->opt.socket.empty()) sh->opt.socket = default_socket(sh->opt.home);
  sh->opt.socket = fs::absolute(sh->opt.socket);
  if (sh->opt.max_clients == 0) sh->opt.max_clients = 1;
  sh->commits = std::make_unique<GroupCommit>(sh->opt.home, GroupCommitLimits::from_env());
  // The home must be usable before anything is promised on the socket.
  {
    auto first = open_embedded(sh->opt.home);
    if (!first) return first.error();
    sh->pool.push_back(std::move(first.value()));
  }
  // Signals are taken through a signalfd by the accept loop; every thread (spawned after
  // this) inherits the mask. SIGPIPE: a client that went away is an EPIPE, not a death.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigset_t old_mask;
  if (::pthread_sigmask(SIG_BLOCK, &set, &old_mask) != 0) return make_error("pthread_sigmask");
  struct RestoreMask {
    sigset_t m;
    ~RestoreMask() { ::pthread_sigmask(SIG_SETMASK, &m, nullptr); }
  } restore{old_mask};
  (void)::signal(SIGPIPE, SIG_IGN);
  UniqueFd sigfd(::signalfd(-1, &set, SFD_CLOEXEC));
  if (!sigfd) return errno_error("signalfd");

  auto listener = bind_socket(sh->opt);
  if (!listener) return listener.error();
  sh->started = std::chrono::steady_clock::now();
  sh->started_at = scope::now_rfc3339();
  sh->log("listening on " + sh->opt.socket.string() + " (home " + sh->opt.home.string() + ", pid " +
          std::to_string(::getpid()) + ")");
  if (sh->opt.ready) sh->opt.ready(sh->opt.socket);

  std::string stop_reason;
  for (;;) {
    {
      // At most max_clients at once: further clients wait in the listen backlog.
      std::unique_lock<std::mutex> lock(sh->mu);
      sh->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return sh->clients.size() < sh->opt.max_clients; });
    }
    pollfd fds[2] = {{listener->get(), POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
    bool full;
    {
      std::lock_guard<std::mutex> lock(sh->mu);
      full = sh->clients.size() >= sh->opt.max_clients;
    }
    if (full) fds[0].fd = -1;  // only watch for signals until a slot frees
    int n = ::poll(fds, 2, full ? 200 : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      stop_reason = "poll: " + errno_error("poll").describe();
      break;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si{};
      if (::read(sigfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        stop_reason = std::string("signal ") + ::strsignal(static_cast<int>(si.ssi_signo));
      } else {
        stop_reason = "signal";
      }
      break;
    }
    if (fds[0].fd >= 0 && (fds[0].revents & POLLIN)) {
      int cfd = ::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (cfd < 0) continue;  // ECONNABORTED, EMFILE...: try again
      {
        std::lock_guard<std::mutex> lock(sh->mu);
        sh->clients.insert(cfd);
      }
      std::thread([sh, cfd] {
        serve_client(*sh, cfd);
        {
          std::lock_guard<std::mutex> lock(sh->mu);
          sh->clients.erase(cfd);
          ::close(cfd);
        }
        sh->cv.notify_all();
      }).detach();
    }
  }

  // Shutdown: no new clients; the socket goes first so that new commands use the embedded
  // Moon (or fail, with SOYAOS_MOON_SOCKET) instead of waiting.
  sh->stopping = true;
  (void)::unlink(sh->opt.socket.c_str());
  listener->reset();
  sh->log("stopping (" + stop_reason + ")");
  {
    std::unique_lock<std::mutex> lock(sh->mu);
    // Idle clients are woken (their read ends); a request being executed finishes first
    // unless it takes more than 10 s.
    for (int fd : sh->clients) (void)::shutdown(fd, SHUT_RD);
    sh->cv.wait_for(lock, std::chrono::seconds(10), [&] { return sh->clients.empty(); });
    if (!sh->clients.empty()) {
      for (int fd : sh->clients) (void)::shutdown(fd, SHUT_RDWR);
      sh->cv.wait_for(lock, std::chrono::seconds(2), [&] { return sh->clients.empty(); });
    }
  }
  const GroupCommitStats gc = sh->commits->stats();
  sh->log("group commit: " + std::to_string(gc.requests) + " batches of events (" + std::to_string(gc.events) +
          " events) in " + std::to_string(gc.transactions - gc.failed) + " transactions, at most " +
          std::to_string(gc.largest) + " batches in one; " + std::to_string(gc.failed) + " failed");
  sh->log("stopped");
  return {};
}

}  // namespace soyaos::moon
