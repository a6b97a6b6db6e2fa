// The Moon proxy (SPEC.md C7): CONNECT and plain HTTP requests, allowed by the operator's
// proxy.allow only; an allowed request continues as a connection of egress_conn.cc. A plain
// request is forwarded with `Connection: close`, and the connection then goes to an exchange
// thread (egress_intercept.cc) that reads every later request on it as well.

#include <sys/socket.h>

#include <algorithm>
#include <cctype>

#include "network/host_name.h"
#include "network/http_head.h"
#include "network/tls_client_hello.h"
#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {
namespace {

// The first of the run's placeholders found in the request target or a field (name or
// value) of `h`; "" when none (and always when the run has no secrets: `icpt` is null).
std::string placeholder_in(const network::HttpHead& h, const Interception* icpt) {
  if (icpt == nullptr) return {};
  for (const InterceptSecret& s : icpt->secrets) {
    if (s.placeholder.empty()) continue;
    bool found = h.target.find(s.placeholder) != std::string::npos;
    for (const auto& [name, value] : h.fields) {
      found = found || name.find(s.placeholder) != std::string::npos || value.find(s.placeholder) != std::string::npos;
    }
    if (found) return s.placeholder;
  }
  return {};
}

}  // namespace

void EgressService::Impl::proxy_accept() {
  for (;;) {
    bool more = true;
    UniqueFd fd = accept_one(fds.proxy_tcp.get(), &refused_conns, &more);
    if (!fd) {
      if (!more) return;
      continue;
    }
    if (open_connections() >= budget.conn_cap) {  // the gateway's cap, shared
      reset_close(fd);
      ++refused_conns;
      continue;
    }
    Conn* conn = new_conn(std::move(fd));
    conn->proxy = true;
    conn->proxy_phase = 1;
    conn->entry_key = proxy_entry_key();
    conn->state = State::head;
    conn->deadline = now_ms() + limits.head_timeout_ms;
    update_interest(conn);
  }
}

bool EgressService::Impl::send_established(Conn* c) {
  static constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
  c->proxy_answered = true;
  return ::send(c->agent.get(), kEstablished, sizeof kEstablished - 1, MSG_DONTWAIT | MSG_NOSIGNAL) ==
         static_cast<ssize_t>(sizeof kEstablished - 1);
}

std::string EgressService::Impl::proxy_entry_key() const {
  for (const auto& e : plan.policy().egress) {
    if (e.protocol == Protocol::moon_proxy) return e.key_path;
  }
  return "capabilities.egress";
}

void EgressService::Impl::proxy_reply(Conn* c, const char* status, const std::string& body) {
  const std::string reply = std::string("HTTP/1.1 ") + status +
                            "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)::send(c->agent.get(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  close_conn(c, status, false);
}

// The request itself as a violation's resource: "moon-proxy:" and its first line (up to
// 120 bytes), bytes outside printable ASCII as \xNN — a malformed request has no target to
// name, and the line is what the agent sent.
std::string EgressService::Impl::proxy_request_resource(const Conn& c) {
  std::string out = "moon-proxy:";
  const size_t end = std::min({c.head.find("\r\n"), c.head.find('\n'), c.head.size(), size_t{120}});
  for (size_t i = 0; i < end; ++i) {
    const auto u = static_cast<unsigned char>(c.head[i]);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += static_cast<char>(u);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  if (end < c.head.size() && end == 120) out += "...";
  return out;
}

// A request the proxy cannot or will not parse (SPEC C7: malformed requests included): 400
// and a violation naming the request; the agent's next request on a new connection is served.
void EgressService::Impl::proxy_bad_request(Conn* c, const std::string& why) {
  violation(proxy_request_resource(*c), "connect", "EPROTO", c->entry_key, "Moon proxy: " + why);
  proxy_reply(c, "400 Bad Request", "soyaos moon proxy: " + why + "\n");
}

void EgressService::Impl::proxy_refuse(Conn* c, const std::string& target, const std::string& detail) {
  violation(target, "connect", "EACCES", c->entry_key, "Moon proxy: " + detail);
  proxy_reply(c, "403 Forbidden", "soyaos moon proxy: " + detail + "\n");
}

// "host:port" or "[v6]:port" -> (host, port); false when malformed.
bool EgressService::Impl::split_authority(std::string_view a, std::string* host, uint16_t* port) {
  size_t colon;
  if (!a.empty() && a.front() == '[') {
    const size_t close = a.find(']');
    if (close == std::string_view::npos) return false;
    *host = std::string(a.substr(1, close - 1));
    colon = close + 1;
    if (colon < a.size() && a[colon] != ':') return false;
  } else {
    colon = a.rfind(':');
    *host = std::string(a.substr(0, colon));
  }
  if (colon >= a.size()) return false;
  const std::string_view digits = a.substr(colon + 1);
  if (digits.empty() || digits.size() > 5) return false;
  uint32_t value = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return false;
    value = value * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (value == 0 || value > 65535) return false;
  *port = static_cast<uint16_t>(value);
  for (auto& ch : *host) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return !host->empty();
}

void EgressService::Impl::proxy_request(Conn* c) {
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(c->head.data()), c->head.size());
  auto parsed = network::parse_http_head(bytes);
  if (parsed.status == network::ParseStatus::need_more && c->head.size() < network::kHttpMaxHead) return;
  if (parsed.status != network::ParseStatus::complete) {
    proxy_bad_request(c, parsed.reason);
    return;
  }
  const auto& h = parsed.head;
  std::string host, path;
  uint16_t port = 0;
  if (h.target_form == network::TargetForm::authority) {
    if (!split_authority(h.target, &host, &port)) {
      proxy_bad_request(c, "CONNECT needs HOST:PORT");
      return;
    }
    c->proxy_connect = true;
  } else if (h.target_form == network::TargetForm::absolute) {
    // http://host[:port]/path — https:// in absolute form would need the proxy to speak
    // TLS for the agent; clients use CONNECT for https.
    constexpr std::string_view kScheme = "http://";
    std::string_view t = h.target;
    if (t.size() <= kScheme.size() ||
        !std::equal(kScheme.begin(), kScheme.end(), t.begin(),
                    [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
      proxy_bad_request(c, "only http:// in absolute form (use CONNECT for https)");
      return;
    }
    t.remove_prefix(kScheme.size());
    const size_t slash = t.find_first_of("/?");
    std::string_view authority = t.substr(0, slash);
    path = slash == std::string_view::npos ? "/" : std::string(t.substr(slash));
    if (path.front() == '?') path = "/" + path;
    if (authority.find(':') == std::string_view::npos || (authority.front() == '[' && authority.back() == ']')) {
      std::string a = std::string(authority) + ":80";
      if (!split_authority(a, &host, &port)) {
        proxy_bad_request(c, "bad request target");
        return;
      }
    } else if (!split_authority(authority, &host, &port)) {
      proxy_bad_request(c, "bad request target");
      return;
    }
  } else {
    proxy_bad_request(c, "not a proxy request (absolute URI or CONNECT)");
    return;
  }
  c->host = host;
  c->port = port;
  if (auto ip = policy::parse_ip(host)) {
    c->literal = true;
    c->literal_addr = *ip;
    c->host = policy::to_string(*ip);
  } else {
    // Canonical once, strictly, before any check: the system resolver would decode
    // `secre\t` or `\115ecret` into a name egress.deny lists (issue #18).
    auto canonical = network::canonical_host_name(host);
    if (!canonical) {
      std::string shown;
      for (unsigned char ch : host.substr(0, 80)) {
        shown += (ch >= 0x21 && ch < 0x7f && ch != '\\') ? std::string(1, static_cast<char>(ch)) : "?";
      }
      proxy_refuse(c, egress_target(shown, port, c->proxy_connect ? "https" : "http"),
                   "the target is not a host name: " + canonical.error().message);
      return;
    }
    c->host = std::move(canonical.value());
  }
  // proxy.allow: host + port + protocol (CONNECT: https or tcp entries; plain: http).
  const auto& allow = plan.proxy_allow();
  std::optional<size_t> match;
  bool host_seen = false;
  for (size_t i = 0; i < allow.size(); ++i) {
    const auto& e = allow[i];
    const bool host_ok = c->literal ? policy::parse_ip(e.host) == c->literal_addr
                                    : manifest::host_matches(e.host, c->host);
    if (!host_ok) continue;
    host_seen = true;
    const bool proto_ok = c->proxy_connect ? (e.protocol == Protocol::https || e.protocol == Protocol::tcp)
                                           : e.protocol == Protocol::http;
    if (e.port == port && proto_ok) {
      match = i;
      break;
    }
  }
  const std::string proto = c->proxy_connect ? (match && allow[*match].protocol == Protocol::tcp ? "tcp" : "https")
                                             : "http";
  const std::string target = egress_target(c->host, port, proto);
  if (plan.operator_network().denies(c->host)) {
    proxy_refuse(c, target, "denied by the operator (egress.deny)");
    return;
  }
  if (!match) {
    proxy_refuse(c, target, host_seen ? "proxy.allow lists this host with another port or protocol"
                                      : "not in the operator's proxy.allow");
    return;
  }
  if (!c->proxy_connect) {
    // The Host field must name the request's own target: forwarded as it is, another
    // name would reach another site on the same upstream (virtual-host fronting).
    // Without a Host field (HTTP/1.0 clients may omit it) the target names the host, and the
    // forwarded request gets a Host naming exactly that target.
    const std::string want = c->literal && c->literal_addr.v6 ? "[" + c->host + "]" : c->host;
    if (h.has_host && (h.host != want || (h.port && *h.port != port) || (!h.port && port != 80))) {
      proxy_refuse(c, target, "the Host field `" + h.host + (h.port ? ":" + std::to_string(*h.port) : "") +
                                  "` does not name the request's target `" + c->host + ":" + std::to_string(port) +
                                  "`");
      return;
    }
    // Forwarded as it is: no other field may name another host, and no h2c.
    if (const std::string why = network::http_entry_refusal(h); !why.empty()) {
      proxy_refuse(c, target, why);
      return;
    }
    // C11: the proxy reads this request, and an operator's entry never gets a secret's value,
    // so a placeholder here is on its way to a host it is not bound to (or, to its own host,
    // would arrive as the placeholder): refused wherever it stands in the head.
    if (const std::string placeholder = placeholder_in(h, icpt); !placeholder.empty()) {
      proxy_refuse(c, target, "a secret's placeholder (`" + placeholder +
                                  "`): the Moon proxy never replaces placeholders, a secret goes only to its own "
                                  "hosts through the pack's entries");
      return;
    }
  }
  c->entry_key = allow[*match].key_path;
  c->protocol = proto;
  c->proxy_tls = proto == "https";
  const std::string rest = c->head.substr(h.head_size);
  if (c->proxy_connect) {
    c->head = rest;  // bytes the client sent after CONNECT belong to the tunnel
  } else {
    // Forwarded in origin form, one request per connection (Connection: close), so a
    // kept-alive proxy connection can never carry a request for another host.
    std::string out = h.method + " " + path + " HTTP/1." + std::to_string(h.minor_version) + "\r\n";
    for (const auto& [name, value] : h.fields) {
      std::string lower = name;
      for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (lower == "connection" || lower == "proxy-connection" || lower == "keep-alive" ||
          lower.rfind("proxy-", 0) == 0) {
        continue;
      }
      out += name + ": " + value + "\r\n";
    }
    if (!h.has_host) {
      out += "Host: " + (c->literal && c->literal_addr.v6 ? "[" + c->host + "]" : c->host) +
             (port == 80 ? std::string() : ":" + std::to_string(port)) + "\r\n";
    }
    out += "Connection: close\r\n\r\n";
    c->head = out + rest;
    // And whatever the client sends after this head is read too, request by request, as on
    // a plain http entry at the gateway (review 1, F3): an exchange thread takes the
    // connection once its upstream is connected, and the rewritten head is its first request.
    // (A later request in absolute form, as proxy clients send, is refused there: a 403.)
    if (exchange_cap_reached(c)) return;
    c->entry = plan.policy().egress.size() + *match;  // plan.entry(): the pack's, then proxy.allow
    c->intercept = true;
  }
  c->head_sent = 0;
  if (c->proxy_connect && c->proxy_tls) {
    // The tunnel of an https entry must carry TLS for that very host, as at the gateway:
    // answer 200, read the ClientHello, and only then resolve and connect upstream.
    if (!send_established(c)) {
      close_conn(c, "reset", true);
      return;
    }
    c->proxy_phase = 2;
    c->deadline = now_ms() + limits.head_timeout_ms;
    if (!c->head.empty()) {
      proxy_tunnel_hello(c);
    } else {
      update_interest(c);
    }
    return;
  }
  resolve(c);
}

void EgressService::Impl::proxy_tunnel_hello(Conn* c) {
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(c->head.data()), c->head.size());
  auto hello = network::parse_client_hello(bytes);
  if (hello.status == network::ParseStatus::need_more && c->head.size() < network::kHttpMaxHead) {
    update_interest(c);
    return;
  }
  const std::string target = egress_target(c->host, c->port, "https");
  std::string why;
  if (hello.status != network::ParseStatus::complete) {
    why = "the tunnel does not start with a TLS ClientHello";
  } else if (hello.hello.ech) {
    why = network::ech_refusal(hello.hello.ech_type);
  } else if (c->literal && hello.hello.server_name && *hello.hello.server_name != c->host) {
    why = "SNI `" + *hello.hello.server_name + "` names a host, but the tunnel is to the address " + c->host;
  } else if (!c->literal && hello.hello.server_name != c->host) {
    why = hello.hello.server_name ? "SNI `" + *hello.hello.server_name + "` does not match `" + c->host + "`"
                                  : "no SNI in the tunnel's ClientHello";
  }
  if (!why.empty()) {
    violation(target, "connect", "ECONNRESET", c->entry_key, "Moon proxy: " + why);
    close_conn(c, "refused", true);
    return;
  }
  c->sni = hello.hello.server_name.value_or("");
  c->tls_watch.emplace(hello.hello.server_name);  // and a second ClientHello must keep that SNI
  c->head_sent = 0;
  c->proxy_phase = 3;
  resolve(c);  // the ClientHello (in c->head) goes upstream first
}

}  // namespace soyaos::supervisor
