// A TCP connection of the gateway or the Moon proxy once its destination is decided: upstream
// resolution (dns.hosts, then the resolver, refusing private answers), connect, relay both ways
// with splice(2), close (egress_opened / egress_closed).

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

// A connection the agent opened (to the gateway or the proxy listener), registered.
auto EgressService::Impl::new_conn(UniqueFd agent) -> Conn* {
  auto c = std::make_unique<Conn>();
  c->id = next_id++;
  c->agent = std::move(agent);
  c->started = c->last_activity = now_ms();
  c->w_agent.obj = c->w_up.obj = c.get();
  c->ev_agent = c->ev_up = UINT32_MAX;  // not in the epoll set yet
  Conn* conn = c.get();
  conns[conn->id] = std::move(c);
  return conn;
}

// Resets the agent's connection and reports the attempt.
void EgressService::Impl::refuse(Conn* c, const std::string& resource, const std::string& closest,
                                 const std::string& detail) {
  violation(resource, "connect", "ECONNRESET", closest, detail);
  close_conn(c, "refused", true);
}

void EgressService::Impl::close_conn(Conn* c, const std::string& reason, bool reset, const std::string& error) {
  // Only what is in the epoll set (ev_* == UINT32_MAX: never added): one syscall less each.
  if (c->agent && c->ev_agent != UINT32_MAX) unwatch(c->agent.get());
  if (c->upstream && c->ev_up != UINT32_MAX) unwatch(c->upstream.get());
  emit_opened(c);  // not yet emitted when the first pump ended the connection
  if (c->opened && cb.event) {
    Json d = base(*c);
    d["address"] = policy::to_string(c->upstream_addr);
    d["bytes_out"] = c->bytes_out;
    d["bytes_in"] = c->bytes_in;
    d["duration_ms"] = now_ms() - c->started;
    d["reason"] = reason;
    if (!error.empty()) d["error"] = error;
    cb.event("egress_closed", std::move(d));
  }
  if (reset) {
    reset_close(c->agent);
    reset_close(c->upstream);
  }
  // Nothing touches a closed connection's pipes again (dispatch skips it, and every caller
  // returns right after close_conn): they can serve the next connection now.
  pipe_return(c->up);
  pipe_return(c->down);
  c->closed = true;
  auto it = conns.find(c->id);
  if (it == conns.end()) return;
  dead_conns.push_back(std::move(it->second));
  conns.erase(it);
}

bool EgressService::Impl::pipe_take(Half& h) {
  if (!pipe_pool.empty()) {
    h.pipe_r = std::move(pipe_pool.back().r);
    h.pipe_w = std::move(pipe_pool.back().w);
    pipe_pool.pop_back();
    return true;
  }
  int p[2];
  if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return false;
  h.pipe_r.reset(p[0]);
  h.pipe_w.reset(p[1]);
  // Best effort: an unprivileged user past fs.pipe-user-pages-soft keeps the default size.
  (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(limits.pipe_bytes));
  return true;
}

void EgressService::Impl::pipe_return(Half& h) {
  if (!h.pipe_r || !h.pipe_w) return;
  // in_pipe counts every byte put in (splice, the TLS watch's write) and not yet taken out,
  // so 0 means empty; FIONREAD asks the kernel too, so that a miscount can only cost a pipe,
  // never hand one connection's bytes to the next (another destination, maybe).
  int queued = -1;
  if (h.in_pipe == 0 && pipe_pool.size() < std::min(kPipePool, budget.conn_cap) && ::ioctl(h.pipe_r.get(), FIONREAD, &queued) == 0 &&
      queued == 0) {
    pipe_pool.push_back({std::move(h.pipe_r), std::move(h.pipe_w)});
    return;
  }
  h.pipe_r.reset();
  h.pipe_w.reset();
}

void EgressService::Impl::resolve(Conn* c) {
  c->state = State::resolving;
  c->deadline = now_ms() + limits.connect_timeout_ms;
  update_interest(c);
  c->upstream_port = c->port;
  // egress.connect_to (C6a): the operator names the address and port for this destination,
  // trusted as given like dns.hosts; the checks on the agent's side are unchanged.
  if (auto target = plan.operator_network().connect_target(c->host, c->port)) {
    c->connect_to = true;
    c->upstream_port = target->port;
    c->addrs = {{target->addr, true}};
    connect_next(c);
    return;
  }
  if (c->literal) {
    c->addrs = {{c->literal_addr, false}};
    connect_next(c);
    return;
  }
  // dns.hosts is final and in memory: no need for a resolver thread (and its two
  // context switches on the connection's critical path).
  const auto& hosts = plan.operator_network().dns_hosts;
  if (auto it = hosts.find(c->host); it != hosts.end()) {
    c->addrs.clear();
    for (const auto& a : it->second) c->addrs.push_back({a, true});
    // IPv4 first, as resolve_host orders them.
    std::stable_sort(c->addrs.begin(), c->addrs.end(),
                     [](const ResolvedAddress& x, const ResolvedAddress& y) { return !x.addr.v6 && y.addr.v6; });
    connect_next(c);
    return;
  }
  submit(c->id, c->host);
}

void EgressService::Impl::resolved() {
  std::deque<ResolveDone> done;
  {
    std::lock_guard lock(pool->mu);
    done.swap(pool->done);
  }
  for (auto& d : done) {
    if ((d.id & kRelayBit) != 0) {
      relay_resolved(d.id & ~kRelayBit, d.result);
      continue;
    }
    auto it = conns.find(d.id);
    if (it == conns.end()) continue;
    Conn* c = it->second.get();
    if (c->closed) continue;
    if (!d.result) {
      fail_upstream(c, "resolve " + c->host + ": " + d.result.error().describe());
      continue;
    }
    c->addrs = std::move(d.result.value());
    connect_next(c);
  }
}

// Answers in the private ranges only count when dns.hosts gave them or the operator
// allows the range (C6 rebinding rule); egress.deny also covers addresses.
std::optional<std::string> EgressService::Impl::address_refusal(const ResolvedAddress& a) const {
  const auto& net = plan.operator_network();
  // Every form of the address (mapped, compatible, NAT64, 6to4...) is checked: an AAAA
  // answer ::ffff:<host address> reaches the host's services as surely as the A answer.
  if (net.denies_address(a.addr)) return "denied by the operator (egress.deny)";
  if (!a.from_hosts_map && net.refuses_private(a.addr)) {
    return "a private, loopback or link-local address (rebinding; egress.allow_private does not cover it)";
  }
  if (!a.from_hosts_map && !net.private_allowed(a.addr) &&
      std::any_of(host_addresses.begin(), host_addresses.end(),
                  [&](const policy::IpAddress& h) { return policy::same_address(h, a.addr); })) {
    return "an address of this host (egress.allow_private does not cover it)";
  }
  return std::nullopt;
}

// Traffic to it never leaves this host: 127/8, ::1 (in any form) or an interface's address.
bool EgressService::Impl::on_this_host(const policy::IpAddress& addr) const {
  for (const auto& f : policy::address_forms(addr)) {
    if (!f.v6 && f.bytes[0] == 127) return true;
    if (f.v6 && std::all_of(f.bytes.begin(), f.bytes.begin() + 15, [](uint8_t b) { return b == 0; }) &&
        f.bytes[15] == 1) {
      return true;
    }
  }
  return std::any_of(host_addresses.begin(), host_addresses.end(),
                     [&](const policy::IpAddress& h) { return policy::same_address(h, addr); });
}

// "connect 127.0.0.1:8443: Connection refused" (an IPv6 address in brackets).
std::string EgressService::Impl::connect_failure(const policy::IpAddress& addr, uint16_t port, int err) {
  const std::string a = policy::to_string(addr);
  return "connect " + (addr.v6 ? "[" + a + "]" : a) + ":" + std::to_string(port) + ": " + std::strerror(err);
}

void EgressService::Impl::connect_next(Conn* c) {
  std::string refused_detail, refused_addr;
  while (c->next_addr < c->addrs.size()) {
    const auto& a = c->addrs[c->next_addr++];
    if (auto why = address_refusal(a)) {
      refused_detail = *why;
      refused_addr = policy::to_string(a.addr);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = to_sockaddr(a.addr, c->upstream_port, &ss);
    UniqueFd s(::socket(a.addr.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s) {
      c->connect_error = "socket: " + std::string(std::strerror(errno));
      continue;
    }
    const bool local = on_this_host(a.addr);
    if (local) {
      // Over this host's loopback a pacing congestion control (BBR, if the host chose it)
      // only costs CPU: several times the relay's CPU per GiB (docs/benchmarks.md, "Egress").
      // cubic, else reno (an unprivileged process may only pick one of
      // net.ipv4.tcp_allowed_congestion_control; reno always is). Best effort: the
      // connection works the same under the host's default.
      for (std::string_view cc : {std::string_view("cubic"), std::string_view("reno")}) {
        if (::setsockopt(s.get(), IPPROTO_TCP, TCP_CONGESTION, cc.data(), static_cast<socklen_t>(cc.size())) == 0) {
          break;
        }
      }
    }
    // No Nagle on the relay's sockets (the agent's side inherits it from the listener,
    // EgressService::Impl::setup): the endpoints already chose how to batch their writes, and
    // a relay that holds a small segment back until the previous one is acknowledged meets the
    // peer's delayed ACK — 40 ms stalls in every TLS handshake through the gateway (write,
    // write, read: docs/benchmarks.md, "Connection set-up").
    const int one = 1;
    (void)::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&ss), len);
    if (rc != 0 && errno == EINPROGRESS && local) {
      // Over loopback the whole handshake runs inside connect(): the SYN-ACK only waits in
      // the socket's backlog, processed as connect() returns. Asking again says so (0, or
      // the refusal) without an epoll round, an EPOLLOUT registration and a getsockopt.
      rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&ss), len);
      if (rc != 0 && (errno == EALREADY || errno == EINPROGRESS)) errno = EINPROGRESS;
      if (rc != 0 && errno == EISCONN) rc = 0;
    }
    if (rc != 0 && errno != EINPROGRESS) {
      c->connect_error = connect_failure(a.addr, c->upstream_port, errno);
      continue;
    }
    c->upstream = std::move(s);
    c->upstream_addr = a.addr;
    c->state = State::connecting;
    c->deadline = now_ms() + limits.connect_timeout_ms;
    if (rc == 0) {
      connected(c, true);  // loopback handshakes often complete inside connect(): no wait
      return;
    }
    update_interest(c);
    return;
  }
  if (!refused_addr.empty()) {
    const std::string resource = c->literal ? egress_target(c->host, c->port, c->protocol)
                                            : egress_target(c->host + "[" + refused_addr + "]", c->port, c->protocol);
    if (c->proxy && !c->proxy_answered) {
      proxy_refuse(c, resource, refused_detail);  // still an HTTP exchange: 403
      return;
    }
    refuse(c, resource,
           !c->entry_key.empty() ? c->entry_key : c->entry ? plan.entry(*c->entry).key_path : "capabilities.egress",
           c->proxy ? "Moon proxy: " + refused_detail : refused_detail);
    return;
  }
  // Say why (the last address's error): a bare reset tells the agent's author nothing.
  fail_upstream(c, c->connect_error.empty() ? "no upstream address of " + c->host + " accepted the connection"
                                            : c->connect_error);
}

// The destination could not be reached: not the agent's violation, but reported.
void EgressService::Impl::fail_upstream(Conn* c, const std::string& why) {
  if (cb.event) {
    Json d = base(*c);
    d["bytes_out"] = 0;
    d["bytes_in"] = 0;
    d["duration_ms"] = now_ms() - c->started;
    d["reason"] = "upstream unreachable";
    d["error"] = why;
    cb.event("egress_closed", std::move(d));
  }
  if (c->proxy && !c->proxy_answered && c->proxy_phase == 1) {
    proxy_reply(c, "502 Bad Gateway", "soyaos moon proxy: " + why + "\n");
    return;
  }
  close_conn(c, "upstream unreachable", true);
}

void EgressService::Impl::connected(Conn* c, bool known_ok) {
  int err = 0;
  socklen_t len = sizeof err;
  if (!known_ok && ::getsockopt(c->upstream.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err == EINPROGRESS) return;
  if (err != 0) {
    c->connect_error = connect_failure(c->upstream_addr, c->upstream_port, err);
    if (c->ev_up != UINT32_MAX) unwatch(c->upstream.get());
    c->upstream.reset();
    c->ev_up = UINT32_MAX;
    connect_next(c);
    return;
  }
  if (c->intercept) {  // the gateway reads this one: an exchange thread takes it over
    intercept_handoff(c);
    return;
  }
  for (Half* h : {&c->up, &c->down}) {
    if (!pipe_take(*h)) {
      fail_upstream(c, "pipe2: " + std::string(std::strerror(errno)));
      return;
    }
  }
  c->opened = true;
  c->last_activity = now_ms();
  // egress_opened is built, written and queued for the Moon after the first pump: the
  // agent's first bytes (already waiting, often) leave for the upstream without waiting for
  // it. Everything that decides was done before this point and is unchanged; the event still
  // comes before this connection's egress_closed (close_conn emits it first if the pump
  // ended the connection), and is as durable as any other (E4).
  c->open_event_pending = true;
  // A tcp tunnel is established once the upstream is; an https tunnel was answered 200
  // before (its ClientHello had to be checked before anything was connected).
  if (c->proxy && c->proxy_connect && !c->proxy_tls && !send_established(c)) {
    close_conn(c, "reset", true);
    return;
  }
  c->state = State::relaying;
  pump(c);
  emit_opened(c);
}

void EgressService::Impl::emit_opened(Conn* c) {
  if (!c->open_event_pending) return;
  c->open_event_pending = false;
  if (!cb.event) return;
  Json d = base(*c);
  d["address"] = policy::to_string(c->upstream_addr);
  if (!c->sni.empty()) d["sni"] = c->sni;
  cb.event("egress_opened", std::move(d));
}

// Moves what can move without blocking, both ways; ends the connection when both
// directions are finished or the agent failed. The upstream's failure (a reset) ends the
// direction towards it only: what it sent before still reaches the agent, then the agent is
// reset (up_error), as a direct connection reads a peer's bytes before its reset.
void EgressService::Impl::pump(Conn* c, uint32_t ready) {
  bool reset_now = false;
  // A side is read when it reported something, or when its direction had bytes waiting (a
  // stream that was held back by the other side goes on at once). Otherwise it has nothing:
  // epoll is level-triggered and the side is watched for EPOLLIN whenever it may be read
  // (update_interest), so a read that could only fail with EAGAIN is not tried.
  const bool read_agent = (ready & kAgentReady) != 0 || c->up.in_pipe > 0;
  const bool read_upstream = (ready & kUpstreamReady) != 0 || c->down.in_pipe > 0;
  // An https handshake still followed: it moves bytes through user space (egress_tls.cc).
  if (c->tls_watch && !tls_watch_step(c)) return;
  const bool watching = c->tls_watch.has_value();
  const bool server_unseen = watching && c->tls_watch->state() == network::TlsHandshakeWatch::State::await_server;
  // The agent's first bytes, read for the protocol check, go first.
  while (c->up_error == 0 && c->head_sent < c->head.size()) {
    ssize_t w = ::send(c->upstream.get(), c->head.data() + c->head_sent, c->head.size() - c->head_sent,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      // While the handshake is followed the server's bytes go through the watch: no draining.
      if (errno != EAGAIN && watching) reset_now = true;
      if (errno != EAGAIN && !watching) upstream_failed(c, errno);
      break;
    }
    c->head_sent += static_cast<size_t>(w);
    c->bytes_out += static_cast<uint64_t>(w);
  }
  if (!reset_now && c->up_error == 0 && c->head_sent == c->head.size()) {
    if (!pump_half(c->up, c->agent.get(), c->upstream.get(), &c->bytes_out, !watching && read_agent)) {
      upstream_failed(c, errno);  // writing to the upstream failed
    } else if (c->up.from_error != 0) {
      reset_now = true;  // reading the agent failed: the agent is gone, the upstream is reset
    }
  }
  if (!reset_now) {
    if (!pump_half(c->down, c->upstream.get(), c->agent.get(), &c->bytes_in, !server_unseen && read_upstream)) {
      reset_now = true;  // writing to the agent failed
    } else if (c->down.from_error != 0 && c->up_error == 0) {
      upstream_failed(c, c->down.from_error);  // reading the upstream failed
    }
  }
  if (reset_now) {
    close_conn(c, "reset", true);
    return;
  }
  if (c->up_error != 0) {
    if (c->down.eof && c->down.in_pipe == 0 && reset_after_drain(c)) return;
  } else if (c->up.shut && c->down.shut) {
    close_conn(c, "closed", false);
    return;
  }
  update_interest(c);
}

void EgressService::Impl::upstream_failed(Conn* c, int err) {
  c->up_error = err != 0 ? err : ECONNRESET;
  if (c->down.from_error == 0) c->down.from_error = c->up_error;
  // A reset socket reports EPOLLHUP forever: out of the set whenever nothing is wanted of it
  // (update_interest adds it back for EPOLLIN while its receive queue may still hold bytes).
  c->up_hup = true;
}

bool EgressService::Impl::reset_after_drain(Conn* c) {
  // Bytes the agent's socket still holds (not yet acknowledged by the agent's kernel) would be
  // dropped by the reset: wait for them. The agent's socket wants no events meanwhile (every
  // byte towards it is in it); expire() asks again at each tick, and the idle timeout bounds
  // an agent that never reads.
  // An agent that reset (or closed) its end meanwhile keeps its unacknowledged count forever,
  // and its socket may be out of the epoll set (hung up earlier): its state, not the count,
  // then says there is nothing left to wait for.
  struct tcp_info info {};
  socklen_t len = sizeof info;
  const bool agent_gone = ::getsockopt(c->agent.get(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
                          info.tcpi_state == TCP_CLOSE;
  int unsent = 0;
  if (!agent_gone && ::ioctl(c->agent.get(), SIOCOUTQ, &unsent) == 0 && unsent > 0) return false;
  close_conn(c, "reset", true);
  return true;
}

bool EgressService::Impl::pump_half(Half& h, int from, int to, uint64_t* counter, bool read) {
  // `drained`: `from` had nothing more a moment ago (EAGAIN, or a short read — less than a
  // small message's worth, so a bulk stream still takes several chunks per wake-up). Not read
  // again in this call: epoll reports it when more comes (one EAGAIN splice less per
  // direction and wake-up; a 1-byte round trip used to try four).
  bool drained = !read;
  for (int rounds = 0; rounds < 16; ++rounds) {
    bool progress = false;
    if (h.in_pipe > 0) {
      ssize_t n = ::splice(h.pipe_r.get(), nullptr, to, nullptr, h.in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) {
        h.in_pipe -= static_cast<size_t>(n);
        *counter += static_cast<uint64_t>(n);
        progress = true;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return false;
      }
    }
    if (!drained && h.in_pipe == 0 && !h.eof) {
      ssize_t n = ::splice(from, nullptr, h.pipe_w.get(), nullptr, limits.pipe_bytes,
                           SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) {
        h.in_pipe += static_cast<size_t>(n);
        progress = true;
        if (static_cast<size_t>(n) < kShortRead) drained = true;
      } else if (n == 0) {
        h.eof = true;
        progress = true;
      } else if (errno == EAGAIN) {
        drained = true;
      } else if (errno != EINTR) {
        // `from` failed (a reset): like its end, except that `to` is then reset, not shut
        // down; the bytes before it, in the pipe, still go on. The caller decides.
        h.from_error = errno;
        h.eof = true;
        progress = true;
      }
    }
    if (h.eof && h.in_pipe == 0 && !h.shut && h.from_error == 0) {
      (void)::shutdown(to, SHUT_WR);  // half-close: the other side learns "no more data"
      h.shut = true;
    }
    if (!progress) break;
  }
  return true;
}

void EgressService::Impl::update_interest(Conn* c) {
  uint32_t a = 0, u = 0;
  switch (c->state) {
    case State::head: a = EPOLLIN; break;
    case State::resolving: break;
    case State::connecting: u = EPOLLOUT; break;
    case State::relaying:
      if (c->tls_watch) {
        if (c->up_error == 0 && !c->tls_agent_eof && c->head_sent == c->head.size() &&
            c->tls_pending.size() < kTlsPendingMax) {
          a |= EPOLLIN;
        }
      } else if (c->up_error == 0 && !c->up.eof && c->up.in_pipe == 0 && c->head_sent == c->head.size()) {
        a |= EPOLLIN;  // (nothing of the agent's can reach a failed upstream: not read)
      }
      if (c->down.in_pipe > 0) a |= EPOLLOUT;
      if (!c->down.eof && c->down.in_pipe == 0) u |= EPOLLIN;  // a failed upstream's last bytes too
      if (c->up_error == 0 && (c->up.in_pipe > 0 || c->head_sent < c->head.size())) u |= EPOLLOUT;
      break;
  }
  // While relaying, a side stays in the set even when nothing is wanted of it: EPOLLERR is
  // reported whatever the interest, so a reset of a side whose direction waits on the other
  // (its pipe full) is seen at once (hung_up) — unless it hung up, which is reported forever.
  const bool relaying = c->state == State::relaying;
  if (c->agent) rewatch_or_remove(c->agent.get(), a, &c->w_agent, &c->ev_agent, relaying, c->agent_hup);
  if (c->upstream) rewatch_or_remove(c->upstream.get(), u, &c->w_up, &c->ev_up, relaying, c->up_hup);
}

void EgressService::Impl::rewatch_or_remove(int fd, uint32_t events, Watch* w, uint32_t* current, bool keep,
                                            bool hup) {
  if (events != 0) {
    rewatch(fd, events, w, current);
    return;
  }
  if (hup) {
    if (*current != UINT32_MAX) unwatch(fd);
    *current = UINT32_MAX;
    return;
  }
  if (*current == UINT32_MAX) {
    // Not in the set yet: outside the relay nothing is waited for, so it is added when there
    // is (one epoll_ctl less per connection that resolves or connects before it needs the
    // agent's side); relaying, it goes in with no events, for EPOLLERR.
    if (keep) rewatch(fd, 0, w, current);
    return;
  }
  if (*current != 0) rewatch(fd, 0, w, current);  // kept with no events: cheaper than DEL/ADD churn
}

void EgressService::Impl::conn_event(Conn* c, bool agent_side, uint32_t ev) {
  switch (c->state) {
    case State::head:
      if (agent_side) head_ready(c);
      break;
    case State::resolving:
      break;
    case State::connecting:
      if (!agent_side) connected(c, false);
      break;
    case State::relaying:
      c->last_activity = now_ms();
      // Input (or its end, or an error) on this side: read it. EPOLLOUT alone only flushes
      // the pipe towards it (and, that pipe having held bytes, reads on behind them).
      pump(c, (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0 ? 0
              : agent_side                                             ? kAgentReady
                                                                       : kUpstreamReady);
      break;
  }
  if (!c->closed && (ev & (EPOLLERR | EPOLLHUP)) != 0) hung_up(c, agent_side, ev);
}

// EPOLLERR and EPOLLHUP are reported whatever a descriptor's interest: a side the relay has
// nothing to do with now (kept in the set with no events: its pipe is full and waits for the
// other side, or the upstream is still being resolved) would wake the loop again at once,
// for as long as the other side takes — an agent's reset behind a full pipe spun the loop
// until the run ended. With interest, the I/O that follows meets the error or the EOF itself.
void EgressService::Impl::hung_up(Conn* c, bool agent_side, uint32_t ev) {
  uint32_t& current = agent_side ? c->ev_agent : c->ev_up;
  const int fd = agent_side ? c->agent.get() : c->upstream.get();
  if (current != 0 || fd < 0) return;
  int err = 0;
  socklen_t len = sizeof err;
  if ((ev & EPOLLERR) != 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
    if (!agent_side && c->state == State::relaying && !c->tls_watch) {
      // The upstream's reset while the pipe towards the agent waits on the agent: what the
      // upstream sent before it (the pipe, its socket's receive queue: Linux keeps them
      // readable, ending in EOF now that SO_ERROR was read) still reaches the agent, which is
      // reset after the last byte (pump, reset_after_drain). The upstream leaves the set
      // until the pipe has room for the rest.
      upstream_failed(c, err);
      unwatch(fd);
      current = UINT32_MAX;
      pump(c, 0);
      return;
    }
    // The agent's reset (or a failure before the relay) ends the connection, as when a
    // splice meets it: the upstream is reset too, and whatever was still in the pipes is dropped.
    close_conn(c, "reset", true);
    return;
  }
  // Both directions are over on this socket (EPOLLHUP): out of the set whenever the relay
  // wants nothing of it (update_interest adds it back when it does; the I/O then sees the end).
  (agent_side ? c->agent_hup : c->up_hup) = true;
  unwatch(fd);
  current = UINT32_MAX;
}

}  // namespace soyaos::supervisor
