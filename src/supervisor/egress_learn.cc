// `soyaos pack learn` at the gateway (SPEC.md C13): a connection no entry allows — to a
// learning address the stub handed out (egress_dns.cc) or to any other destination — is
// accepted, its first bytes are read and classified (a TLS ClientHello -> https with its
// SNI, an HTTP/1.x request head -> http with its Host, anything else or silence -> tcp),
// and then it is reset. Nothing is resolved or connected upstream: what the agent tried is
// reported (a violation, which a learn run records as `learn_observed`), nothing leaves.

#include <sys/socket.h>

#include "network/http_head.h"
#include "network/tls_client_hello.h"
#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

void EgressService::Impl::learn_start(Conn* c) {
  c->learn = true;
  c->state = State::head;
  c->deadline = now_ms() + kLearnHeadMs;
  update_interest(c);
}

void EgressService::Impl::learn_done(Conn* c, const std::string& protocol, const std::string& detail) {
  violation(egress_target(c->host, c->port, protocol), "connect", "ECONNRESET", c->decision.closest, detail);
  close_conn(c, "learned", true);
}

void EgressService::Impl::learn_head(Conn* c) {
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(c->head.data()), c->head.size());
  const bool full = c->head.size() >= network::kHttpMaxHead;
  if (static_cast<uint8_t>(c->head[0]) == 0x16) {  // a TLS handshake record
    auto hello = network::parse_client_hello(bytes);
    if (hello.status == network::ParseStatus::need_more && !full) return;
    if (hello.status != network::ParseStatus::complete) {
      learn_done(c, "tcp", "learn: TLS-like bytes that are not a valid ClientHello");
      return;
    }
    const auto& sni = hello.hello.server_name;
    std::string detail = "learn: TLS ClientHello, " + (sni ? "SNI " + *sni : std::string("no SNI"));
    if (sni && !c->literal && *sni != c->host) detail += " (not the name the agent resolved: an https entry needs them equal)";
    if (sni && c->literal) detail += " (an https entry for an address refuses an SNI naming a host)";
    if (hello.hello.ech) detail += "; " + network::ech_refusal(hello.hello.ech_type);
    learn_done(c, "https", detail);
    return;
  }
  auto head = network::parse_http_head(bytes);
  if (head.status == network::ParseStatus::need_more && !full) return;
  if (head.status != network::ParseStatus::complete) {
    learn_done(c, "tcp", "learn: neither a TLS ClientHello nor an HTTP request");
    return;
  }
  const auto& h = head.head;
  std::string detail = "learn: HTTP request " + h.method + ", Host " + h.host;
  if (h.target_form == network::TargetForm::absolute || h.target_form == network::TargetForm::authority) {
    detail += " (a proxy-style request: an http entry refuses it)";
  }
  learn_done(c, "http", detail);
}

}  // namespace soyaos::supervisor
