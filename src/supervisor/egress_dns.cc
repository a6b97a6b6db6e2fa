// The DNS stub (SPEC.md C6), UDP and TCP on 127.0.0.1:53 in the agent's netns: A answers with
// fake addresses for allowed names only, NODATA for their AAAA, NXDOMAIN / REFUSED (and a
// violation) otherwise.

#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <array>
#include <cstring>

#include "network/dns_message.h"
#include "network/host_name.h"
#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

std::vector<uint8_t> EgressService::Impl::dns_reply(std::span<const uint8_t> msg, bool tcp) {
  auto q = network::parse_dns_query(msg);
  if (!q) {
    auto r = network::dns_header_reply_for(msg);
    return r ? *r : std::vector<uint8_t>{};
  }
  const std::string& name = q->name;
  const std::string type = network::qtype_name(q->qtype);
  const size_t max = tcp ? network::kDnsMaxMessage : 0;
  const std::string syscall = tcp ? "send" : "sendto";
  Json ev{{"name", name}, {"query_type", type}, {"transport", tcp ? "tcp" : "udp"}};
  auto finish = [&](std::vector<uint8_t> reply, const char* rcode, Json answer, bool denied) {
    ev["rcode"] = rcode;
    ev["answer"] = std::move(answer);
    ev["denied"] = denied;
    if (cb.event) cb.event("dns_query", ev);
    return reply;
  };
  const bool is_in = q->qclass == network::kDnsClassIn;
  // The Moon proxy's name (C7), which /etc/hosts also maps.
  if (plan.policy().moon_proxy && name == policy::kMoonProxyHost && is_in &&
      (q->qtype == network::qtype::a || q->qtype == network::qtype::aaaa)) {
    std::array<uint8_t, 4> lo{127, 0, 0, 1};
    if (q->qtype == network::qtype::a) {
      return finish(network::dns_answer(*q, std::span(&lo, 1), {}, 300, max), "NOERROR", Json::array({"127.0.0.1"}),
                    false);
    }
    return finish(network::dns_answer(*q, {}, {}, 300, max), "NOERROR", Json::array(), false);
  }
  // The name is canonicalised once, strictly, before any policy check (q->name is the
  // presentation form: a label holding '.', '\\' or a control byte shows as an escape, which
  // canonical_host_name refuses, so what is checked is what a resolver would look up).
  const auto canonical = network::canonical_host_name(name);
  const bool is_canonical = !q->name_unusual && canonical.ok() && canonical.value() == name;
  const auto entries = plan.entries_for_name(name);
  const bool allowed =
      is_canonical && (plan.any() ? !plan.operator_network().denies(name) : !entries.empty());
  // `pack learn` (C13): a canonical name nothing declares, and the operator does not deny,
  // gets a learning address; the gateway reads what the agent then sends (egress_learn.cc).
  const bool learning = !allowed && is_canonical && plan.learn() && !plan.denied_entry_for_name(name) &&
                        !plan.operator_network().denies(name);
  if (!allowed && !learning) {
    auto denied = is_canonical ? plan.denied_entry_for_name(name) : std::nullopt;
    std::string closest = denied ? plan.entry(*denied).key_path : "no match";
    std::string detail = denied || (plan.any() && plan.operator_network().denies(name))
                             ? "denied by the operator (egress.deny)"
                             : "";
    if (!is_canonical) {
      detail = canonical.ok() ? "not a host name (a label holds a byte outside letters, digits and '-')"
                              : canonical.error().message;
    }
    violation("dns:" + name, syscall, "NXDOMAIN", closest, detail);
    return finish(network::dns_error(*q, network::Rcode::nxdomain), "NXDOMAIN", Json::array(), true);
  }
  const std::string closest = entries.empty() ? "capabilities.egress" : plan.entry(entries.front()).key_path;
  if (!is_in || (q->qtype != network::qtype::a && q->qtype != network::qtype::aaaa)) {
    // Only addresses ever come back: DNS cannot carry data in or out (C6).
    violation("dns:" + name, syscall, "REFUSED", closest, "query type " + type + " (only A and AAAA are answered)");
    return finish(network::dns_error(*q, network::Rcode::refused), "REFUSED", Json::array(), true);
  }
  if (q->qtype == network::qtype::aaaa) {
    // Fake addresses are IPv4: no AAAA, so clients use the A answer (NODATA, not an error).
    return finish(network::dns_answer(*q, {}, {}, 300, max), "NOERROR", Json::array(), false);
  }
  auto fake = learning ? plan.learn_address_for(name) : plan.fake_address_for(name);
  if (learning) {
    violation("dns:" + name, syscall, fake ? "NOERROR" : "SERVFAIL", "no match",
              fake ? "learn: answered with a learning address"
                   : "learn: the learning addresses are exhausted (" + std::to_string(kMaxLearnNames) + " names per run)");
  }
  if (!fake) {
    return finish(network::dns_error(*q, network::Rcode::servfail), "SERVFAIL", Json::array(), false);
  }
  const uint32_t be = htonl(*fake);
  std::array<uint8_t, 4> a{};
  std::memcpy(a.data(), &be, 4);
  policy::IpAddress shown;
  std::memcpy(shown.bytes.data(), a.data(), 4);
  return finish(network::dns_answer(*q, std::span(&a, 1), {}, 300, max), "NOERROR",
                Json::array({policy::to_string(shown)}), false);
}

void EgressService::Impl::dns_udp_ready() {
  for (int budget = 0; budget < 64; ++budget) {
    uint8_t buf[4096];
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    ssize_t n = ::recvfrom(fds.dns_udp.get(), buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) return;
    auto reply = dns_reply(std::span<const uint8_t>(buf, static_cast<size_t>(n)), false);
    if (!reply.empty()) {
      (void)::sendto(fds.dns_udp.get(), reply.data(), reply.size(), MSG_DONTWAIT,
                     reinterpret_cast<sockaddr*>(&from), len);
    }
  }
}

void EgressService::Impl::dns_tcp_accept() {
  for (;;) {
    bool more = true;
    UniqueFd fd = accept_one(fds.dns_tcp.get(), &refused_dns_tcp, &more);
    if (!fd) {
      if (!more) return;
      continue;
    }
    if (dns_tcp.size() + dead_dns.size() >= budget.dns_tcp_cap) {
      ++refused_dns_tcp;  // closed: the client retries (limit_exceeded after the run)
      continue;
    }
    auto c = std::make_unique<DnsTcp>();
    c->fd = std::move(fd);
    c->deadline = now_ms() + limits.head_timeout_ms;
    c->w.obj = c.get();
    if (!watch(c->fd.get(), EPOLLIN, &c->w)) continue;
    int key = c->fd.get();
    dns_tcp[key] = std::move(c);
  }
}

void EgressService::Impl::dns_tcp_close(DnsTcp* c) {
  unwatch(c->fd.get());
  auto it = dns_tcp.find(c->fd.get());
  if (it == dns_tcp.end()) return;
  c->closed = true;
  dead_dns.push_back(std::move(it->second));
  dns_tcp.erase(it);
}

void EgressService::Impl::dns_tcp_ready(DnsTcp* c) {
  uint8_t buf[8192];
  ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    dns_tcp_close(c);
    return;
  }
  if (n < 0) return;
  c->buf.insert(c->buf.end(), buf, buf + n);
  // The deadline is absolute per query: only a complete, answered query earns the next
  // period. Refreshing it on every byte let a few clients trickling one byte at a time hold
  // every DNS-over-TCP slot forever (issue #18).
  for (;;) {
    auto frame = network::parse_dns_tcp_frame(c->buf);
    if (frame.status == network::ParseStatus::invalid) {
      dns_tcp_close(c);
      return;
    }
    if (frame.status == network::ParseStatus::need_more) return;
    auto reply = dns_reply(frame.message, true);
    c->deadline = now_ms() + limits.head_timeout_ms;
    c->buf.erase(c->buf.begin(), c->buf.begin() + static_cast<ptrdiff_t>(frame.frame_size));
    auto framed = reply.empty() ? Result<std::vector<uint8_t>>(make_error("empty")) : network::dns_tcp_frame(reply);
    // A client that does not read its answers is not waited for.
    if (!framed || ::send(c->fd.get(), framed->data(), framed->size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
                       static_cast<ssize_t>(framed->size())) {
      dns_tcp_close(c);
      return;
    }
  }
}

}  // namespace soyaos::supervisor
