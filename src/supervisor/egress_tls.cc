// The TLS handshake after the first ClientHello of an https connection (gateway entries and
// Moon proxy tunnels, SPEC.md C6/C7, issue #18): until network::TlsHandshakeWatch has seen
// the server's first flight (and, after a HelloRetryRequest, checked the second ClientHello),
// both directions go through user space instead of splice: the server's bytes are shown to
// the watch and put into the pipe towards the agent; the agent's bytes wait in tls_pending
// until the watch lets them through (appended to `head`, which pump() sends first).

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

bool EgressService::Impl::tls_watch_step(Conn* c) {
  using State = network::TlsHandshakeWatch::State;
  auto& w = *c->tls_watch;
  char buf[16384];
  // Server -> agent: only while the first flight is unclassified, and only into an empty
  // pipe (which always has room for one buffer).
  if (w.state() == State::await_server && c->down.in_pipe == 0 && !c->down.eof) {
    const ssize_t n = ::recv(c->upstream.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      w.server_bytes(std::span(reinterpret_cast<const uint8_t*>(buf), static_cast<size_t>(n)));
      const ssize_t put = ::write(c->down.pipe_w.get(), buf, static_cast<size_t>(n));
      if (put > 0) c->down.in_pipe += static_cast<size_t>(put);  // exact, even when short (pipe_return)
      if (put != n) {
        close_conn(c, "reset", true);
        return false;
      }
    } else if (n == 0) {
      c->down.eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      close_conn(c, "reset", true);
      return false;
    }
  }
  // Agent -> upstream: read what fits, then let the watch decide.
  if (c->head_sent == c->head.size() && !c->tls_agent_eof && c->tls_pending.size() < kTlsPendingMax) {
    const size_t room = std::min(sizeof buf, kTlsPendingMax - c->tls_pending.size());
    const ssize_t n = ::recv(c->agent.get(), buf, room, MSG_DONTWAIT);
    if (n > 0) {
      c->tls_pending.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      c->tls_agent_eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      close_conn(c, "reset", true);
      return false;
    }
  }
  const size_t ok = w.client_bytes(std::span(reinterpret_cast<const uint8_t*>(c->tls_pending.data()),
                                             c->tls_pending.size()));
  if (w.state() == State::refused && w.server_fault()) {
    // The upstream, not the agent, sent what no TLS server sends first: its failure,
    // reported like an unreachable upstream (egress_closed, stderr), never a violation.
    close_conn(c, "upstream error", true, w.reason());
    return false;
  }
  if (w.state() == State::refused) {
    emit_opened(c);  // the connection's egress_opened (deferred by connected()) comes first
    const std::string target = egress_target(c->host, c->port, "https");
    if (c->proxy) {
      violation(target, "connect", "ECONNRESET", c->entry_key, "Moon proxy: " + w.reason());
    } else {
      violation(target, "connect", "ECONNRESET", c->entry ? plan.entry(*c->entry).key_path : "no match", w.reason());
    }
    close_conn(c, "refused", true);
    return false;
  }
  if (ok > 0) {
    c->head.erase(0, c->head_sent);
    c->head_sent = 0;
    c->head.append(c->tls_pending, 0, ok);
    c->tls_pending.erase(0, ok);
  }
  if (w.state() == State::done) {
    if (w.second_sni()) c->sni = w.second_sni().value_or(c->sni);
    c->tls_watch.reset();  // from here on, splice both ways
    if (c->tls_agent_eof) c->up.eof = true;
  } else if (c->tls_agent_eof && c->tls_pending.empty()) {
    c->up.eof = true;  // nothing held: pump_half passes the half-close on
  }
  return true;
}

}  // namespace soyaos::supervisor
