// Intercepted egress connections (SPEC.md C11, issue #12): once the gateway has checked an
// https connection of an entry with `http` rules or a bound secret, or any plain http
// connection (every request's Host is checked, C6), and connected its upstream, the
// connection leaves the epoll loop for an exchange thread of its own (at most
// EgressLimits::max_exchanges at once): TLS is terminated on the agent's side with the run's
// CA (tls_authority.h) and made anew, verified, to the upstream; run_http_exchange then checks
// every request. The thread reports through the service's callbacks, which are thread-safe
// (run.cc serialises them): http_request, capability_violation, egress_closed.

#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "supervisor/egress_impl.h"
#include "supervisor/http_exchange.h"
#include "supervisor/tls_stream.h"

namespace soyaos::supervisor {
namespace {

int64_t mono_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Bytes the gateway read before the exchange began (the request head it checked), served
// first; then the socket.
class PrefixedStream final : public ByteStream {
 public:
  PrefixedStream(UniqueFd fd, std::string prefix) : inner_(std::move(fd)), prefix_(std::move(prefix)) {}
  IoResult read(std::span<uint8_t> buf) override {
    if (buf.empty()) return {IoStatus::error, 0, EINVAL};
    if (pos_ < prefix_.size()) {
      const size_t n = std::min(buf.size(), prefix_.size() - pos_);
      std::memcpy(buf.data(), prefix_.data() + pos_, n);
      pos_ += n;
      return {IoStatus::ok, n, 0};
    }
    return inner_.read(buf);
  }
  IoResult write(std::span<const uint8_t> buf) override { return inner_.write(buf); }
  IoResult shutdown_write() override { return inner_.shutdown_write(); }
  int fd() const override { return inner_.fd(); }
  short wanted_events() const override { return inner_.wanted_events(); }
  bool has_buffered_input() const override { return pos_ < prefix_.size(); }

 private:
  FdStream inner_;
  std::string prefix_;
  size_t pos_ = 0;
};

// Both handshakes at once (the agent's and the upstream's), bounded by `timeout_ms` and `stop_fd`.
// Returns which side failed: 0 none, 1 the agent, 2 the upstream, 3 timeout or stop.
int handshake_both(TlsStream& agent, TlsStream& upstream, int timeout_ms, int stop_fd) {
  const int64_t deadline = mono_ms() + timeout_ms;
  bool agent_done = false, up_done = false;
  for (;;) {
    if (!agent_done) {
      auto r = agent.handshake();
      if (r.status == IoStatus::error || r.status == IoStatus::eof) return 1;
      agent_done = r.status == IoStatus::ok;
    }
    if (!up_done) {
      auto r = upstream.handshake();
      if (r.status == IoStatus::error || r.status == IoStatus::eof) return 2;
      up_done = r.status == IoStatus::ok;
    }
    if (agent_done && up_done) return 0;
    const int64_t left = deadline - mono_ms();
    if (left <= 0) return 3;
    struct pollfd p[3] = {{agent.fd(), static_cast<short>(agent_done ? 0 : agent.wanted_events()), 0},
                          {upstream.fd(), static_cast<short>(up_done ? 0 : upstream.wanted_events()), 0},
                          {stop_fd, POLLIN, 0}};
    if (::poll(p, 3, static_cast<int>(left)) < 0 && errno != EINTR) return 3;
    if ((p[2].revents & POLLIN) != 0) return 3;
  }
}

// Best effort, blocking for at most a second: the agent learns why (502) instead of a bare reset.
void answer_bad_gateway(ByteStream& agent, const std::string& why) {
  nlohmann::json body{{"error", "soyaos gateway: upstream unavailable"}, {"detail", why}};
  const std::string b = body.dump() + "\n";
  const std::string msg = "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: " +
                          std::to_string(b.size()) + "\r\nconnection: close\r\n\r\n" + b;
  size_t off = 0;
  const int64_t deadline = mono_ms() + 1000;
  while (off < msg.size() && mono_ms() < deadline) {
    auto r = agent.write(std::span(reinterpret_cast<const uint8_t*>(msg.data()) + off, msg.size() - off));
    if (r.status == IoStatus::ok) {
      off += r.n;
    } else if (r.status == IoStatus::would_block) {
      struct pollfd p{agent.fd(), agent.wanted_events(), 0};
      (void)::poll(&p, 1, 100);
    } else {
      return;
    }
  }
  (void)agent.shutdown_write();
  // Read what the agent still sends (its request) until it closes or for up to a second:
  // closing with unread input makes the kernel reset the connection, and the reset can
  // destroy the 502 before the agent reads it (seen under load as an EOF in the handshake).
  uint8_t sink[4096];
  const int64_t drain_until = mono_ms() + 1000;
  while (mono_ms() < drain_until) {
    auto r = agent.read(std::span(sink, sizeof sink));
    if (r.status == IoStatus::ok) continue;
    if (r.status != IoStatus::would_block) break;
    struct pollfd p{agent.fd(), agent.wanted_events(), 0};
    (void)::poll(&p, 1, 100);
  }
}

}  // namespace

Status EgressService::Impl::setup_exchanges() {
  exchanges.stop.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!exchanges.stop) return errno_error("eventfd (intercepted connections)");
  return {};
}

// The cap bounds the supervisor's threads and memory, like the connection cap its descriptors:
// a bound of the sandbox's resources, not the agent's violation, but never silent — the agent
// sees a reset, and limit_exceeded (`intercepted_connections`) counts it after the run. Checked
// when the gateway decides to intercept (before any upstream is contacted) and again at the
// handoff (threads only end meanwhile, but decided connections may have queued up).
bool EgressService::Impl::exchange_cap_reached(Conn* c) {
  {
    std::lock_guard lock(exchanges.mu);
    if (exchanges.active < limits.max_exchanges) return false;
  }
  ++refused_exchanges;
  close_conn(c, "intercepted connection cap", true);
  return true;
}

// The loop's side: the connection is decided and its upstream connected; a thread takes it.
void EgressService::Impl::intercept_handoff(Conn* c) {
  if (exchange_cap_reached(c)) return;
  ExchangeJob job;
  job.id = c->id;
  job.agent = std::move(c->agent);
  job.upstream = std::move(c->upstream);
  job.head = std::move(c->head);
  job.tls = c->protocol == "https";
  job.host = c->host;
  job.port = c->port;
  job.entry_key = plan.entry(*c->entry).key_path;
  job.rules = plan.entry(*c->entry).http;
  job.operator_entry = plan.from_proxy_allow(*c->entry);
  job.intercepted =
      job.tls || (!job.operator_entry && icpt != nullptr && icpt->intercepts(plan.entry(*c->entry), c->host));
  job.base = base(*c);
  if (job.intercepted) job.base["intercepted"] = true;
  job.address = policy::to_string(c->upstream_addr);
  job.started = c->started;
  if (cb.event) {
    Json d = job.base;
    d["address"] = job.address;
    cb.event("egress_opened", d);
  }
  // The connection leaves the loop: nothing of it stays in the epoll set.
  if (job.agent && c->ev_agent != UINT32_MAX) unwatch(job.agent.get());
  if (job.upstream && c->ev_up != UINT32_MAX) unwatch(job.upstream.get());
  c->closed = true;
  if (auto it = conns.find(c->id); it != conns.end()) {
    dead_conns.push_back(std::move(it->second));
    conns.erase(it);
  }
  Json closed = job.base;
  closed["address"] = job.address;
  const int64_t started = job.started;
  std::string failure;
  {
    std::lock_guard lock(exchanges.mu);
    const uint64_t id = job.id;
    try {
      exchanges.threads.emplace(id,
                                std::thread([this, j = std::move(job)]() mutable { exchange_main(std::move(j)); }));
      ++exchanges.active;  // the thread decrements it under this lock: never before this
    } catch (const std::system_error& e) {
      failure = e.what();  // no thread (EAGAIN): the job, its sockets with it, is gone
    }
  }
  if (!failure.empty() && cb.event) {
    closed["bytes_out"] = 0;
    closed["bytes_in"] = 0;
    closed["duration_ms"] = now_ms() - started;
    closed["reason"] = "interception failed";
    closed["error"] = "exchange thread: " + failure;
    cb.event("egress_closed", closed);
  }
}

void EgressService::Impl::exchange_main(ExchangeJob job) {
  uint64_t bytes_out = 0, bytes_in = 0;
  std::string reason = "closed", error;
  std::unique_ptr<ByteStream> agent, upstream;
  if (job.tls) {
    std::unique_ptr<TlsStream> a, u;
    auto ctx = icpt->authority->server_context(job.host);
    if (ctx) {
      auto s = TlsStream::server(std::move(job.agent), *ctx, job.head);
      auto cl = TlsStream::client(std::move(job.upstream), icpt->upstream, job.host, icpt->upstream_sessions.get(),
                                  job.host + ":" + std::to_string(job.port));
      if (s && cl) {
        a = std::move(s.value());
        u = std::move(cl.value());
      } else {
        error = !s ? s.error().describe() : cl.error().describe();
      }
    } else {
      error = ctx.error().describe();
    }
    if (a && u) {
      switch (handshake_both(*a, *u, limits.head_timeout_ms, exchanges.stop.get())) {
        case 0: break;
        case 1:
          reason = "agent TLS handshake failed";
          error = a->handshake_error();
          break;
        case 2:
          // Not the agent's violation: the upstream is not who it should be, or is gone. The
          // agent gets a 502 saying so once its own handshake is through.
          reason = "upstream unreachable";
          error = "TLS to " + job.host + ": " + u->handshake_error();
          for (const int64_t until = mono_ms() + limits.head_timeout_ms; !a->handshake_done() && mono_ms() < until;) {
            auto r = a->handshake();
            if (r.status != IoStatus::would_block) break;
            struct pollfd p[2] = {{a->fd(), a->wanted_events(), 0}, {exchanges.stop.get(), POLLIN, 0}};
            (void)::poll(p, 2, 100);
            if ((p[1].revents & POLLIN) != 0) break;
          }
          if (a->handshake_done()) answer_bad_gateway(*a, error);
          break;
        default:
          reason = "handshake timeout";
          break;
      }
    } else {
      reason = "interception failed";
    }
    if (reason == "closed" && error.empty()) {
      agent = std::move(a);
      upstream = std::move(u);
    }
  } else {
    agent = std::make_unique<PrefixedStream>(std::move(job.agent), std::move(job.head));
    upstream = std::make_unique<FdStream>(std::move(job.upstream));
  }
  if (agent && upstream) {
    HttpExchangePolicy pol;
    pol.host = job.host;
    pol.port = job.port;
    pol.tls = job.tls;
    pol.manifest_entry = job.entry_key;
    pol.rules = job.rules;
    pol.head_timeout_ms = limits.head_timeout_ms;
    pol.idle_timeout_ms = limits.idle_timeout_ms;
    // Every placeholder of the run is looked for (no Interception: the run has no secrets);
    // only a pack entry's own host gets its secrets' values, never an operator's entry.
    if (icpt != nullptr) {
      for (const auto& s : icpt->secrets) {
        const bool bound =
            !job.operator_entry && std::find(s.hosts.begin(), s.hosts.end(), job.host) != s.hosts.end();
        pol.secrets.push_back({s.placeholder, s.value, bound, s.name});
      }
    }
    const std::string scheme = job.tls ? "https://" : "http://";
    const std::string authority = job.host + ((job.tls && job.port == 443) || (!job.tls && job.port == 80)
                                                  ? std::string()
                                                  : ":" + std::to_string(job.port));
    HttpExchangeCallbacks hcb;
    hcb.on_request = [&](const HttpRequestRecord& r) {
      bytes_out += r.bytes_up;
      bytes_in += r.bytes_down;
      if (!cb.event) return;
      Json d{{"connection", job.id},
             {"method", r.method},
             {"path", r.path},
             {"status", r.status},
             {"bytes_up", r.bytes_up},
             {"bytes_down", r.bytes_down},
             {"duration_ms", r.duration_ms},
             {"manifest_entry", job.entry_key},
             {"host", job.host}};
      cb.event("http_request", d);
    };
    // A refusal's resource is the URL the request named. An origin-form target ("/p") is
    // relative to this entry; any other form (absolute "http://h/p", authority "h:443", "*")
    // names its own target, which is what the refusal is about: it is kept as sent, not glued
    // to the entry's URL.
    const auto resource = [&](const HttpRefusal& r) {
      if (!r.path.empty() && r.path.front() != '/') return r.method + " " + r.path;
      return r.method + " " + scheme + authority + r.path;
    };
    hcb.on_refusal = [&](const HttpRefusal& r) { violation(resource(r), "write", "EACCES", r.rule, r.reason); };
    hcb.on_secret_echo = [&](const HttpRefusal& r) { violation(resource(r), "read", "EACCES", r.rule, r.reason); };
    run_http_exchange(*agent, *upstream, pol, hcb, exchanges.stop.get());
    // Whatever the exchange left open ends now, cleanly (close_notify) when it can.
    (void)agent->shutdown_write();
  }
  if (cb.event) {
    Json d = job.base;
    d["address"] = job.address;
    d["bytes_out"] = bytes_out;
    d["bytes_in"] = bytes_in;
    d["duration_ms"] = now_ms() - job.started;
    d["reason"] = reason;
    if (!error.empty()) d["error"] = error;
    cb.event("egress_closed", d);
  }
  std::lock_guard lock(exchanges.mu);
  exchanges.done.push_back(job.id);
  --exchanges.active;
}

// Joins the threads that finished (the loop's timer), or every one (stop).
void EgressService::Impl::reap_exchanges(bool all) {
  if (all && exchanges.stop) {
    uint64_t one = 1;
    (void)::write(exchanges.stop.get(), &one, sizeof one);
  }
  std::vector<std::thread> joinable;
  {
    std::lock_guard lock(exchanges.mu);
    if (all) {
      for (auto& [id, t] : exchanges.threads) joinable.push_back(std::move(t));
      exchanges.threads.clear();
      exchanges.done.clear();
    } else {
      for (uint64_t id : exchanges.done) {
        if (auto it = exchanges.threads.find(id); it != exchanges.threads.end()) {
          joinable.push_back(std::move(it->second));
          exchanges.threads.erase(it);
        }
      }
      exchanges.done.clear();
    }
  }
  for (auto& t : joinable) {
    if (t.joinable()) t.join();
  }
}

}  // namespace soyaos::supervisor
