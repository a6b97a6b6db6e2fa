// The UDP relays (SPEC.md C6): one socket per udp entry, one upstream socket per agent flow.

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

// "ADDR:PORT" where a relay sends (IPv6 in brackets), for the events' connect_to.
std::string EgressService::Impl::relay_target(const Relay& r) {
  const std::string a = policy::to_string(*r.addr);
  return (r.addr->v6 ? "[" + a + "]" : a) + ":" + std::to_string(r.port);
}

void EgressService::Impl::relay_ready(Relay* r) {
  for (int budget = 0; budget < 64; ++budget) {
    char buf[65536];
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    ssize_t n = ::recvfrom(r->fd, buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) return;
    if (r->refused) continue;
    if (!r->addr) {
      if (r->pending.size() < 16) r->pending.push_back({{from, len}, std::string(buf, static_cast<size_t>(n))});
      if (!r->resolving) {
        r->resolving = true;
        const auto& e = plan.entry(r->entry);
        r->port = e.port;
        if (auto target = plan.operator_network().connect_target(e.host, e.port)) {
          r->connect_to = true;  // egress.connect_to: trusted as given, like dns.hosts
          r->port = target->port;
          std::vector<ResolvedAddress> one{{target->addr, true}};
          relay_resolved(r->index, Result<std::vector<ResolvedAddress>>(one));
        } else if (auto ip = policy::parse_ip(e.host)) {
          std::vector<ResolvedAddress> one{{*ip, false}};
          relay_resolved(r->index, Result<std::vector<ResolvedAddress>>(one));
        } else {
          submit(kRelayBit | r->index, e.host);
        }
      }
      continue;
    }
    forward(r, from, len, std::string_view(buf, static_cast<size_t>(n)));
  }
}

void EgressService::Impl::relay_resolved(uint64_t index, const Result<std::vector<ResolvedAddress>>& result) {
  if (index >= relays.size()) return;
  Relay* r = relays[index].get();
  r->resolving = false;
  const auto& e = plan.entry(r->entry);
  if (!result) {
    r->pending.clear();
    return;
  }
  std::string why, bad;
  for (const auto& a : result.value()) {
    if (auto refusal = address_refusal(a)) {
      why = *refusal;
      bad = policy::to_string(a.addr);
      continue;
    }
    r->addr = a.addr;
    break;
  }
  if (!r->addr) {
    r->refused = true;
    r->pending.clear();
    if (!bad.empty()) {
      violation(policy::parse_ip(e.host) ? egress_target(e.host, e.port, "udp")
                                         : egress_target(e.host + "[" + bad + "]", e.port, "udp"),
                "sendto", "EPERM", e.key_path, why);
    }
    return;
  }
  auto pending = std::move(r->pending);
  r->pending.clear();
  for (auto& [src, data] : pending) forward(r, src.first, src.second, data);
}

void EgressService::Impl::forward(Relay* r, const sockaddr_storage& from, socklen_t len, std::string_view data) {
  std::string key(reinterpret_cast<const char*>(&from), len);
  auto it = r->flows.find(key);
  if (it == r->flows.end()) {
    if (r->flows.size() >= 64) {
      // Bounded: the flow idle longest goes (the map is keyed by the agent's sockaddr, so
      // its first element was merely the lowest address, issue #18).
      auto oldest = std::min_element(r->flows.begin(), r->flows.end(), [](const auto& a, const auto& b) {
        return std::pair(a.second->last, a.second->id) < std::pair(b.second->last, b.second->id);
      });
      close_flow(oldest->second.get(), "flow limit");
    }
    const auto& e = plan.entry(r->entry);
    sockaddr_storage dst{};
    socklen_t dlen = to_sockaddr(*r->addr, r->port, &dst);
    UniqueFd up(::socket(r->addr->v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!up || ::connect(up.get(), reinterpret_cast<sockaddr*>(&dst), dlen) != 0) return;
    auto f = std::make_unique<Flow>();
    f->relay = r;
    f->agent = from;
    f->agent_len = len;
    f->up = std::move(up);
    f->id = next_id++;
    f->started = f->last = now_ms();
    f->w.obj = f.get();
    if (!watch(f->up.get(), EPOLLIN, &f->w)) return;
    if (cb.event) {
      Json d{{"connection", f->id}, {"entry", e.key_path}, {"host", e.host},
             {"port", e.port}, {"protocol", "udp"}, {"address", policy::to_string(*r->addr)}};
      if (r->connect_to) d["connect_to"] = relay_target(*r);
      cb.event("egress_opened", std::move(d));
    }
    it = r->flows.emplace(key, std::move(f)).first;
  }
  Flow* f = it->second.get();
  f->last = now_ms();
  if (::send(f->up.get(), data.data(), data.size(), MSG_DONTWAIT) > 0) f->bytes_out += data.size();
}

void EgressService::Impl::flow_ready(Flow* f) {
  for (int budget = 0; budget < 64; ++budget) {
    char buf[65536];
    ssize_t n = ::recv(f->up.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) return;
    f->last = now_ms();
    // Sent from the relay socket: conntrack un-NATs it, so the agent sees the reply come
    // from the address and port it wrote to.
    if (::sendto(f->relay->fd, buf, static_cast<size_t>(n), MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&f->agent), f->agent_len) > 0) {
      f->bytes_in += static_cast<uint64_t>(n);
    }
  }
}

void EgressService::Impl::close_flow(Flow* f, const std::string& reason) {
  const auto& e = plan.entry(f->relay->entry);
  if (cb.event) {
    Json d{{"connection", f->id}, {"entry", e.key_path}, {"host", e.host},
           {"port", e.port}, {"protocol", "udp"}, {"address", policy::to_string(*f->relay->addr)}};
    if (f->relay->connect_to) d["connect_to"] = relay_target(*f->relay);
    d["bytes_out"] = f->bytes_out;
    d["bytes_in"] = f->bytes_in;
    d["duration_ms"] = now_ms() - f->started;
    d["reason"] = reason;
    cb.event("egress_closed", std::move(d));
  }
  unwatch(f->up.get());
  Relay* r = f->relay;
  f->closed = true;
  for (auto it = r->flows.begin(); it != r->flows.end(); ++it) {
    if (it->second.get() == f) {
      dead_flows.push_back(std::move(it->second));
      r->flows.erase(it);
      break;
    }
  }
}

}  // namespace soyaos::supervisor
