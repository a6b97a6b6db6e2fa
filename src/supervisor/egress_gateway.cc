// The egress gateway (SPEC.md C6, 127.0.0.1:15001 and [::1]:15001): every redirected connection's
// original destination -> the entries that allow it -> the protocol check (TLS SNI for https,
// the HTTP/1.x Host for http, nothing for tcp); egress_conn.cc then resolves, connects, relays
// (an http connection, and an intercepted https one, through an exchange thread that reads
// every request: egress_intercept.cc).

#include <sys/socket.h>

#include <algorithm>

#include "network/http_head.h"
#include "network/tls_client_hello.h"
#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

// One connection per readiness report: the listener is level-triggered, so another pending
// connection is reported again by the next epoll_wait (with whatever else is ready, in turn),
// and the usual single connection costs no accept4 that ends in EAGAIN.
void EgressService::Impl::gateway_accept(const UniqueFd& listener) {
  bool more = true;
  UniqueFd fd = accept_one(listener.get(), &refused_conns, &more);
  if (!fd) return;
  // The per-run cap (bounded memory and descriptors; closed ones of this epoll batch still
  // hold theirs): a bound, not a policy decision — counted for limit_exceeded.
  if (open_connections() >= budget.conn_cap) {
    reset_close(fd);
    ++refused_conns;
    return;
  }
  // The listener says the family: no getsockname per connection.
  auto dst = comet::original_destination(fd, &listener == &fds.gateway_tcp6 ? AF_INET6 : AF_INET);
  if (!dst) {
    reset_close(fd);
    return;
  }
  Conn* conn = new_conn(std::move(fd));
  policy::IpAddress addr = from_sockaddr(*dst, &conn->port);
  if (!addr.v6 && EgressPlan::is_fake(v4_host_order(addr))) {
    auto name = plan.name_for_fake(v4_host_order(addr));
    if (!name) {
      refuse(conn, egress_target(policy::to_string(addr), conn->port, "tcp"), "no match",
             "a fake address the DNS stub never handed out");
      return;
    }
    conn->host = *name;
    conn->decision = plan.decide_name(conn->host, conn->port, false);
  } else {
    conn->literal = true;
    conn->literal_addr = addr;
    conn->host = policy::to_string(addr);
    conn->decision = plan.decide_literal(addr, conn->port, false);
  }
  if (!conn->decision.any && conn->decision.entries.empty() && plan.learn()) {
    learn_start(conn);  // `pack learn`: read the first bytes, then close (egress_learn.cc)
    return;
  }
  if (!conn->decision.any && conn->decision.entries.empty()) {
    refuse(conn, egress_target(conn->host, conn->port, "tcp"), conn->decision.closest,
           plan.any() ? "denied by the operator (egress.deny)" : "no entry allows this destination");
    return;
  }
  // tcp entries (and "*") check only host and port: no need to wait for data.
  for (size_t i : conn->decision.entries) {
    if (plan.entry(i).protocol == Protocol::tcp) {
      conn->entry = i;
      break;
    }
  }
  if (conn->entry || conn->decision.any) {
    conn->protocol = "tcp";
    resolve(conn);
    return;
  }
  conn->state = State::head;
  conn->deadline = now_ms() + limits.head_timeout_ms;
  update_interest(conn);
}

// The agent spoke first (https and http entries): is it what the entry allows?
void EgressService::Impl::head_ready(Conn* c) {
  char buf[4096];
  ssize_t n = ::recv(c->agent.get(), buf, sizeof buf, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    close_conn(c, "agent closed", false);  // nothing was asked of anyone: not a violation
    return;
  }
  if (n < 0) return;
  c->head.append(buf, static_cast<size_t>(n));
  if (c->learn) {
    learn_head(c);
    return;
  }
  if (c->proxy) {
    if (c->proxy_phase == 1) {
      proxy_request(c);
    } else {
      proxy_tunnel_hello(c);
    }
    return;
  }
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(c->head.data()), c->head.size());
  auto has = [&](Protocol p) {
    return std::any_of(c->decision.entries.begin(), c->decision.entries.end(),
                       [&](size_t i) { return plan.entry(i).protocol == p; });
  };
  auto first = [&](Protocol p) {
    for (size_t i : c->decision.entries) {
      if (plan.entry(i).protocol == p) return i;
    }
    return c->decision.entries.front();
  };
  if (static_cast<uint8_t>(c->head[0]) == 0x16) {  // a TLS handshake record
    auto hello = network::parse_client_hello(bytes);
    if (hello.status == network::ParseStatus::need_more && c->head.size() < network::kHttpMaxHead) return;
    const std::string target = egress_target(c->host, c->port, "https");
    if (!has(Protocol::https)) {
      refuse(c, target, plan.entry(c->decision.entries.front()).key_path, "TLS on an entry that is not https");
      return;
    }
    const std::string key = plan.entry(first(Protocol::https)).key_path;
    if (hello.status != network::ParseStatus::complete) {
      refuse(c, target, key,
             "not a valid TLS ClientHello" + (hello.reason.empty() ? std::string() : ": " + hello.reason));
      return;
    }
    // Intercepted (C11): the gateway answers the TLS itself, so an ECH extension (GREASE, as
    // browsers and recent clients send it) hides nothing from it and is accepted (issue #18).
    // (Only the pack's own entries: an operator's proxy.allow entry is never intercepted.)
    const size_t https_entry = first(Protocol::https);
    const bool intercept = icpt != nullptr && icpt->authority != nullptr && !plan.from_proxy_allow(https_entry) &&
                           icpt->intercepts(plan.entry(https_entry), c->host);
    if (hello.hello.ech && !intercept) {
      refuse(c, target, key, network::ech_refusal(hello.hello.ech_type));
      return;
    }
    const auto& sni = hello.hello.server_name;
    // An IP-literal entry allows that address, not every site the server there hosts: an SNI
    // naming a host would select one (issue #18). No SNI, or the literal itself, is fine.
    if (c->literal && sni && *sni != c->host) {
      refuse(c, target, key, "SNI `" + *sni + "` names a host, but the entry is the address " + c->host);
      return;
    }
    if (!c->literal && !sni) {
      refuse(c, target, key, "no SNI in the ClientHello (https entries require it)");
      return;
    }
    if (!c->literal && *sni != c->host) {
      refuse(c, target, key, "SNI `" + *sni + "` does not match `" + c->host + "`");
      return;
    }
    c->sni = sni.value_or("");
    if (intercept) {
      if (exchange_cap_reached(c)) return;
      c->intercept = true;  // the handshake is ours (egress_intercept.cc): nothing to follow
    } else {
      c->tls_watch.emplace(sni);  // the second flight (a HelloRetryRequest's second hello) is checked too
    }
    c->entry = first(Protocol::https);
    c->protocol = "https";
  } else {
    auto head = network::parse_http_head(bytes);
    if (head.status == network::ParseStatus::need_more && c->head.size() < network::kHttpMaxHead) return;
    const bool https_only = !has(Protocol::http);
    const std::string target = egress_target(c->host, c->port, https_only ? "https" : "http");
    const std::string key = plan.entry(first(https_only ? Protocol::https : Protocol::http)).key_path;
    if (head.status != network::ParseStatus::complete) {
      refuse(c, target, key,
             std::string(https_only ? "not a TLS ClientHello on an https entry" : "not an HTTP/1.x request") +
                 (head.reason.empty() ? "" : ": " + head.reason));
      return;
    }
    if (https_only) {
      refuse(c, target, key, "plaintext HTTP on an https entry");
      return;
    }
    // Intercepted (C11): every request, this one included, is checked by the exchange, which
    // answers a refusal with a 403 the agent can read.
    if (icpt != nullptr && !plan.from_proxy_allow(first(Protocol::http)) &&
        icpt->intercepts(plan.entry(first(Protocol::http)), c->host)) {
      if (exchange_cap_reached(c)) return;
      c->entry = first(Protocol::http);
      c->protocol = "http";
      c->intercept = true;
      resolve(c);
      return;
    }
    const auto& h = head.head;
    if (h.target_form == network::TargetForm::absolute || h.target_form == network::TargetForm::authority) {
      refuse(c, target, key, "a proxy-style request (" + std::string(network::to_string(h.target_form)) +
                                 " target): the gateway is not a proxy");
      return;
    }
    const std::string want = c->literal && c->literal_addr.v6 ? "[" + c->host + "]" : c->host;
    if (h.host != want || (h.port && *h.port != c->port)) {
      refuse(c, target, key, "Host `" + h.host + (h.port ? ":" + std::to_string(*h.port) : "") +
                                 "` does not match `" + c->host + "`");
      return;
    }
    // Forwarded unchanged: nothing else in the head may name another host, and no h2c.
    if (const std::string why = network::http_entry_refusal(h); !why.empty()) {
      refuse(c, target, key, why);
      return;
    }
    c->entry = first(Protocol::http);
    c->protocol = "http";
    // Not only this request: every later one on the connection is read as well (C6: each
    // request's Host must match; C11: a placeholder of a secret not bound here is refused),
    // so the exchange takes the connection once its upstream is connected — a thread per
    // connection, like an intercepted one. This head, already checked, is its first request.
    if (exchange_cap_reached(c)) return;
    c->intercept = true;
  }
  resolve(c);
}

}  // namespace soyaos::supervisor
