#include "supervisor/egress_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "network/dns_message.h"
#include "network/http_head.h"
#include "network/tls_client_hello.h"
#include "supervisor/resolver.h"

namespace soyaos::supervisor {
namespace {

using Json = nlohmann::ordered_json;
using manifest::Protocol;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

enum class Kind : uint8_t {
  wake, timer, nflog, dns_udp, dns_tcp_listen, dns_tcp, gateway_listen, conn_agent, conn_upstream,
  relay, relay_flow, proxy_listen
};

struct Watch {
  Kind kind;
  void* obj = nullptr;
};

// Closes with a TCP reset (SO_LINGER 0): the agent's next call fails with ECONNRESET.
void reset_close(UniqueFd& fd) {
  if (!fd) return;
  struct linger lg {1, 0};
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  fd.reset();
}

policy::IpAddress from_sockaddr(const sockaddr_storage& ss, uint16_t* port) {
  policy::IpAddress a;
  if (ss.ss_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    std::memcpy(a.bytes.data(), &s6->sin6_addr, 16);
    a.v6 = true;
    *port = ntohs(s6->sin6_port);
  } else {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss);
    std::memcpy(a.bytes.data(), &s4->sin_addr, 4);
    *port = ntohs(s4->sin_port);
  }
  return a;
}

socklen_t to_sockaddr(const policy::IpAddress& a, uint16_t port, sockaddr_storage* ss) {
  *ss = {};
  if (a.v6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(ss);
    s6->sin6_family = AF_INET6;
    std::memcpy(&s6->sin6_addr, a.bytes.data(), 16);
    s6->sin6_port = htons(port);
    return sizeof(sockaddr_in6);
  }
  auto* s4 = reinterpret_cast<sockaddr_in*>(ss);
  s4->sin_family = AF_INET;
  std::memcpy(&s4->sin_addr, a.bytes.data(), 4);
  s4->sin_port = htons(port);
  return sizeof(sockaddr_in);
}

uint32_t v4_host_order(const policy::IpAddress& a) {
  uint32_t be = 0;
  std::memcpy(&be, a.bytes.data(), 4);
  return ntohl(be);
}


// ---- the resolver pool: blocking lookups off the loop ----
// Workers hold the shared state, so that stop() never waits for a slow upstream resolver:
// it abandons the pool, and late answers fall on the floor.
struct ResolveJob {
  uint64_t id;  // connection id, or relay index | kRelayBit
  std::string name;
};
struct ResolveDone {
  uint64_t id;
  Result<std::vector<ResolvedAddress>> result;
};
struct ResolverPool {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<ResolveJob> jobs;
  std::deque<ResolveDone> done;
  bool stopping = false;
  UniqueFd wake;  // eventfd the loop watches
  policy::OperatorNetwork network;
  size_t workers = 0;
};
constexpr uint64_t kRelayBit = uint64_t{1} << 63;

void resolver_worker(std::shared_ptr<ResolverPool> pool) {
  for (;;) {
    ResolveJob job;
    {
      std::unique_lock lock(pool->mu);
      pool->cv.wait(lock, [&] { return pool->stopping || !pool->jobs.empty(); });
      if (pool->stopping) return;
      job = std::move(pool->jobs.front());
      pool->jobs.pop_front();
    }
    auto result = resolve_host(pool->network, job.name);
    std::lock_guard lock(pool->mu);
    if (pool->stopping) return;
    pool->done.push_back({job.id, std::move(result)});
    uint64_t one = 1;
    (void)::write(pool->wake.get(), &one, sizeof one);
  }
}

}  // namespace

struct EgressService::Impl {
  // ---- gateway connections ----
  struct Half {  // one direction: from -> pipe -> to
    UniqueFd pipe_r, pipe_w;
    size_t in_pipe = 0;
    bool eof = false;   // `from` has no more data
    bool shut = false;  // `to`'s write side was shut down after the last byte
  };
  enum class State { head, resolving, connecting, relaying };
  struct Conn {
    uint64_t id = 0;
    UniqueFd agent, upstream;
    State state = State::head;
    std::string host;  // the name behind the fake address, or the literal address
    bool literal = false;
    policy::IpAddress literal_addr;
    uint16_t port = 0;
    EgressDecision decision;
    std::optional<size_t> entry;
    std::string protocol = "tcp";
    std::string sni;
    std::string head;       // the agent's first bytes, forwarded before splicing
    size_t head_sent = 0;
    std::vector<ResolvedAddress> addrs;
    size_t next_addr = 0;
    policy::IpAddress upstream_addr;
    Half up, down;  // up: agent -> upstream; down: upstream -> agent
    uint64_t bytes_out = 0, bytes_in = 0;
    int64_t deadline = 0, last_activity = 0, started = 0;
    bool opened = false;
    bool closed = false;  // closed during this epoll batch; freed after it
    // The Moon proxy (C7): phase 1 waits for the request head, phase 2 (after CONNECT to an
    // https entry) for the tunnel's ClientHello. entry_key names the proxy.allow entry.
    bool proxy = false;
    int proxy_phase = 0;
    bool proxy_connect = false;
    bool proxy_tls = false;
    bool proxy_answered = false;  // a 200 went to the agent: from then on, only resets
    std::string entry_key;
    uint32_t ev_agent = 0, ev_up = 0;
    Watch w_agent{Kind::conn_agent, nullptr}, w_up{Kind::conn_upstream, nullptr};
  };
  struct DnsTcp {
    UniqueFd fd;
    std::vector<uint8_t> buf;
    int64_t deadline = 0;
    bool closed = false;
    Watch w{Kind::dns_tcp, nullptr};
  };
  struct Relay;
  struct Flow {
    Relay* relay = nullptr;
    sockaddr_storage agent{};
    socklen_t agent_len = 0;
    UniqueFd up;
    uint64_t id = 0, bytes_out = 0, bytes_in = 0;
    int64_t started = 0, last = 0;
    bool closed = false;
    Watch w{Kind::relay_flow, nullptr};
  };
  struct Relay {
    size_t index = 0, entry = 0;
    int fd = -1;
    bool resolving = false, refused = false;
    std::optional<policy::IpAddress> addr;
    std::deque<std::pair<std::pair<sockaddr_storage, socklen_t>, std::string>> pending;
    std::map<std::string, std::unique_ptr<Flow>> flows;
    Watch w{Kind::relay, nullptr};
  };

  EgressPlan& plan;
  comet::NetworkFds fds;
  EgressCallbacks cb;
  EgressLimits limits;
  UniqueFd epoll, wake, timer;
  std::shared_ptr<ResolverPool> pool;
  std::thread thread;
  std::atomic<bool> stopping{false};
  bool stopped = false;
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  std::map<int, std::unique_ptr<DnsTcp>> dns_tcp;
  std::vector<std::unique_ptr<Relay>> relays;
  std::vector<uint16_t> service_ports;
  std::vector<policy::IpAddress> host_addresses;  // this host's own interface addresses
  // Objects closed while an epoll batch is being dispatched: a later event of the same
  // batch may still point at them, so they are freed only after the batch.
  std::vector<std::unique_ptr<Conn>> dead_conns;
  std::vector<std::unique_ptr<DnsTcp>> dead_dns;
  std::vector<std::unique_ptr<Flow>> dead_flows;
  uint64_t next_id = 1;
  Watch w_wake{Kind::wake}, w_timer{Kind::timer}, w_nflog{Kind::nflog}, w_dns_udp{Kind::dns_udp},
      w_dns_tcp{Kind::dns_tcp_listen}, w_gw4{Kind::gateway_listen}, w_gw6{Kind::gateway_listen},
      w_proxy{Kind::proxy_listen}, w_pool{Kind::wake};

  Impl(EgressPlan& p, comet::NetworkFds f, EgressCallbacks c, EgressLimits l)
      : plan(p), fds(std::move(f)), cb(std::move(c)), limits(l) {}

  Json base(const Conn& c) const {
    Json d{{"connection", c.id},
           {"entry", !c.entry_key.empty() ? c.entry_key
                     : c.entry            ? plan.entry(*c.entry).key_path
                                          : std::string("capabilities.egress")},
           {"host", c.host},
           {"port", c.port},
           {"protocol", c.protocol}};
    if (c.proxy) d["via"] = "moon-proxy";
    if (!c.sni.empty()) d["sni"] = c.sni;  // https: the SNI that was checked (also on egress_closed)
    return d;
  }

  void violation(const std::string& resource, const std::string& syscall, const std::string& err,
                 const std::string& closest, const std::string& detail) {
    Violation v;
    v.surface = "network";
    v.resource = resource;
    v.syscall = syscall;
    v.errno_name = err;
    v.manifest_entry = closest;
    v.detail = detail;
    if (cb.violation) cb.violation(v);
  }

  // ---- epoll plumbing ----
  Status watch(int fd, uint32_t events, Watch* w) {
    struct epoll_event ev {};
    ev.events = events;
    ev.data.ptr = w;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return errno_error("epoll_ctl add");
    return {};
  }
  void rewatch(int fd, uint32_t events, Watch* w, uint32_t* current) {
    if (events == *current) return;
    struct epoll_event ev {};
    ev.events = events;
    ev.data.ptr = w;
    (void)::epoll_ctl(epoll.get(), *current == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
    *current = events;
  }
  void unwatch(int fd) { (void)::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr); }

  Status setup() {
    epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll) return errno_error("epoll_create1 (egress)");
    wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake) return errno_error("eventfd (egress)");
    timer.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!timer) return errno_error("timerfd_create (egress)");
    struct itimerspec its {};
    its.it_interval.tv_nsec = 250'000'000;
    its.it_value.tv_nsec = 250'000'000;
    if (::timerfd_settime(timer.get(), 0, &its, nullptr) != 0) return errno_error("timerfd_settime (egress)");
    pool = std::make_shared<ResolverPool>();
    pool->network = plan.operator_network();
    pool->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!pool->wake) return errno_error("eventfd (resolver)");

    // The host's own addresses (in the supervisor's netns): reaching one is reaching the
    // host's services, whatever range it lies in (a public address, TEST-NET, ...).
    struct ifaddrs* ifs = nullptr;
    if (::getifaddrs(&ifs) != 0) return errno_error("getifaddrs (the host's own addresses)");
    for (auto* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) {
        continue;
      }
      sockaddr_storage ss{};
      std::memcpy(&ss, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      uint16_t ignored = 0;
      host_addresses.push_back(from_sockaddr(ss, &ignored));
    }
    ::freeifaddrs(ifs);
    const auto& np = plan.network_plan();
    service_ports = {53, np.gateway_port};
    if (np.proxy_port != 0) service_ports.push_back(np.proxy_port);
    for (size_t i = 0; i < np.allow_udp.size(); ++i) {
      service_ports.push_back(static_cast<uint16_t>(np.udp_relay_port + i));
    }
    std::pair<int, Watch*> base_fds[] = {{wake.get(), &w_wake},           {timer.get(), &w_timer},
                                         {pool->wake.get(), &w_pool},     {fds.nflog.get(), &w_nflog},
                                         {fds.dns_udp.get(), &w_dns_udp}, {fds.dns_tcp.get(), &w_dns_tcp},
                                         {fds.gateway_tcp.get(), &w_gw4}};
    for (auto [fd, w] : base_fds) {
      if (auto s = watch(fd, EPOLLIN, w); !s) return s;
    }
    if (fds.gateway_tcp6) {
      if (auto s = watch(fds.gateway_tcp6.get(), EPOLLIN, &w_gw6); !s) return s;
    }
    if (fds.proxy_tcp) {
      if (auto s = watch(fds.proxy_tcp.get(), EPOLLIN, &w_proxy); !s) return s;
    }
    for (size_t i = 0; i < fds.udp_relay.size(); ++i) {
      auto r = std::make_unique<Relay>();
      r->index = i;
      r->entry = plan.udp_entries().at(i);
      r->fd = fds.udp_relay[i].get();
      r->w.obj = r.get();
      if (auto s = watch(r->fd, EPOLLIN, &r->w); !s) return s;
      relays.push_back(std::move(r));
    }
    return {};
  }

  void submit(uint64_t id, const std::string& name) {
    {
      std::lock_guard lock(pool->mu);
      pool->jobs.push_back({id, name});
      // Up to 4 lookups at once; each worker lives as long as the pool has work.
      if (pool->workers < 4 && pool->workers < pool->jobs.size() + 1) {
        ++pool->workers;
        std::thread(resolver_worker, pool).detach();
      }
    }
    pool->cv.notify_one();
  }

  // ---- the loop ----
  void run() {
    while (!stopping.load()) {
      struct epoll_event events[64];
      int n = ::epoll_wait(epoll.get(), events, 64, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      for (int i = 0; i < n; ++i) dispatch(static_cast<Watch*>(events[i].data.ptr), events[i].events);
      dead_conns.clear();
      dead_dns.clear();
      dead_flows.clear();
    }
  }

  void dispatch(Watch* w, uint32_t ev) {
    switch (w->kind) {
      case Kind::wake: {
        uint64_t v = 0;
        if (w == &w_pool) {
          (void)::read(pool->wake.get(), &v, sizeof v);
          resolved();
        } else {
          (void)::read(wake.get(), &v, sizeof v);
        }
        break;
      }
      case Kind::timer: {
        uint64_t v = 0;
        (void)::read(timer.get(), &v, sizeof v);
        expire();
        break;
      }
      case Kind::nflog: drain_nflog(); break;
      case Kind::dns_udp: dns_udp_ready(); break;
      case Kind::dns_tcp_listen: dns_tcp_accept(); break;
      case Kind::dns_tcp:
        if (!static_cast<DnsTcp*>(w->obj)->closed) dns_tcp_ready(static_cast<DnsTcp*>(w->obj));
        break;
      case Kind::gateway_listen: gateway_accept(w == &w_gw6 ? fds.gateway_tcp6 : fds.gateway_tcp); break;
      case Kind::conn_agent:
      case Kind::conn_upstream:
        if (!static_cast<Conn*>(w->obj)->closed) conn_event(static_cast<Conn*>(w->obj), w->kind == Kind::conn_agent, ev);
        break;
      case Kind::relay: relay_ready(static_cast<Relay*>(w->obj)); break;
      case Kind::relay_flow:
        if (!static_cast<Flow*>(w->obj)->closed) flow_ready(static_cast<Flow*>(w->obj));
        break;
      case Kind::proxy_listen: proxy_accept(); break;
    }
  }

  // ---- NFLOG: the netns refused a packet ----
  void drain_nflog() {
    auto read = comet::read_nflog(fds.nflog);
    if (!read) return;
    for (const auto& p : read->packets) {
      if (std::find(service_ports.begin(), service_ports.end(), p.sport) != service_ports.end()) {
        continue;  // a late reply from one of our own sockets, not the agent's attempt
      }
      policy::IpAddress addr;
      addr.bytes = p.daddr;
      addr.v6 = p.v6;
      const bool tcp = p.proto == IPPROTO_TCP, udp = p.proto == IPPROTO_UDP;
      std::string host = policy::to_string(addr), closest = "no match", detail;
      if (!addr.v6 && EgressPlan::is_fake(v4_host_order(addr))) {
        if (auto name = plan.name_for_fake(v4_host_order(addr))) {
          host = *name;
          if (tcp || udp) closest = plan.decide_name(host, p.dport, udp).closest;
        }
      } else if (tcp || udp) {
        closest = plan.decide_literal(addr, p.dport, udp).closest;
      }
      if (plan.any() && udp) detail = "egress \"*\" covers TCP only: UDP needs a udp entry";
      std::string resource = (tcp || udp) ? egress_target(host, p.dport, tcp ? "tcp" : "udp")
                                          : comet::to_string(p);
      violation(resource, tcp ? "connect" : "sendto", tcp ? "ECONNREFUSED" : "EPERM", closest, detail);
    }
    if (read->overrun) {
      violation("nflog", "connect", "ECONNREFUSED", "no match",
                "more refused packets than the NFLOG socket could hold: some were not reported one by one");
    }
  }

  // ---- the DNS stub ----
  std::vector<uint8_t> dns_reply(std::span<const uint8_t> msg, bool tcp) {
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
    const auto entries = plan.entries_for_name(name);
    const bool allowed = !q->name_unusual && !name.empty() &&
                         (plan.any() ? !plan.operator_network().denies(name) : !entries.empty());
    if (!allowed) {
      auto denied = plan.denied_entry_for_name(name);
      std::string closest = denied ? plan.entry(*denied).key_path : "no match";
      std::string detail = denied || (plan.any() && plan.operator_network().denies(name))
                               ? "denied by the operator (egress.deny)"
                               : "";
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
    auto fake = plan.fake_address_for(name);
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

  void dns_udp_ready() {
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

  void dns_tcp_accept() {
    for (;;) {
      UniqueFd fd(::accept4(fds.dns_tcp.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) return;
      if (dns_tcp.size() >= limits.max_dns_tcp) continue;  // closed: the client retries
      auto c = std::make_unique<DnsTcp>();
      c->fd = std::move(fd);
      c->deadline = now_ms() + limits.head_timeout_ms;
      c->w.obj = c.get();
      if (!watch(c->fd.get(), EPOLLIN, &c->w)) continue;
      int key = c->fd.get();
      dns_tcp[key] = std::move(c);
    }
  }

  void dns_tcp_close(DnsTcp* c) {
    unwatch(c->fd.get());
    auto it = dns_tcp.find(c->fd.get());
    if (it == dns_tcp.end()) return;
    c->closed = true;
    dead_dns.push_back(std::move(it->second));
    dns_tcp.erase(it);
  }

  void dns_tcp_ready(DnsTcp* c) {
    uint8_t buf[8192];
    ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      dns_tcp_close(c);
      return;
    }
    if (n < 0) return;
    c->buf.insert(c->buf.end(), buf, buf + n);
    c->deadline = now_ms() + limits.head_timeout_ms;
    for (;;) {
      auto frame = network::parse_dns_tcp_frame(c->buf);
      if (frame.status == network::ParseStatus::invalid) {
        dns_tcp_close(c);
        return;
      }
      if (frame.status == network::ParseStatus::need_more) return;
      auto reply = dns_reply(frame.message, true);
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

  // ---- the gateway ----
  void gateway_accept(const UniqueFd& listener) {
    for (;;) {
      UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) return;
      if (conns.size() >= limits.max_connections) {
        reset_close(fd);  // the per-sandbox cap (bounded memory); not a policy decision
        continue;
      }
      auto dst = comet::original_destination(fd);
      if (!dst) {
        reset_close(fd);
        continue;
      }
      Conn* conn = new_conn(std::move(fd));
      policy::IpAddress addr = from_sockaddr(*dst, &conn->port);
      if (!addr.v6 && EgressPlan::is_fake(v4_host_order(addr))) {
        auto name = plan.name_for_fake(v4_host_order(addr));
        if (!name) {
          refuse(conn, egress_target(policy::to_string(addr), conn->port, "tcp"), "no match",
                 "a fake address the DNS stub never handed out");
          continue;
        }
        conn->host = *name;
        conn->decision = plan.decide_name(conn->host, conn->port, false);
      } else {
        conn->literal = true;
        conn->literal_addr = addr;
        conn->host = policy::to_string(addr);
        conn->decision = plan.decide_literal(addr, conn->port, false);
      }
      if (!conn->decision.any && conn->decision.entries.empty()) {
        refuse(conn, egress_target(conn->host, conn->port, "tcp"), conn->decision.closest,
               plan.any() ? "denied by the operator (egress.deny)" : "no entry allows this destination");
        continue;
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
        continue;
      }
      conn->state = State::head;
      conn->deadline = now_ms() + limits.head_timeout_ms;
      update_interest(conn);
    }
  }

  // A connection the agent opened (to the gateway or the proxy listener), registered.
  Conn* new_conn(UniqueFd agent) {
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
  void refuse(Conn* c, const std::string& resource, const std::string& closest, const std::string& detail) {
    violation(resource, "connect", "ECONNRESET", closest, detail);
    close_conn(c, "refused", true);
  }

  void close_conn(Conn* c, const std::string& reason, bool reset) {
    if (c->agent) unwatch(c->agent.get());
    if (c->upstream) unwatch(c->upstream.get());
    if (c->opened && cb.event) {
      Json d = base(*c);
      d["address"] = policy::to_string(c->upstream_addr);
      d["bytes_out"] = c->bytes_out;
      d["bytes_in"] = c->bytes_in;
      d["duration_ms"] = now_ms() - c->started;
      d["reason"] = reason;
      cb.event("egress_closed", d);
    }
    if (reset) {
      reset_close(c->agent);
      reset_close(c->upstream);
    }
    c->closed = true;
    auto it = conns.find(c->id);
    if (it == conns.end()) return;
    dead_conns.push_back(std::move(it->second));
    conns.erase(it);
  }

  // The agent spoke first (https and http entries): is it what the entry allows?
  void head_ready(Conn* c) {
    char buf[4096];
    ssize_t n = ::recv(c->agent.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close_conn(c, "agent closed", false);  // nothing was asked of anyone: not a violation
      return;
    }
    if (n < 0) return;
    c->head.append(buf, static_cast<size_t>(n));
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
      if (hello.hello.ech) {
        refuse(c, target, key, "encrypted ClientHello (ECH): the real server name is hidden");
        return;
      }
      const auto& sni = hello.hello.server_name;
      if (!c->literal && !sni) {
        refuse(c, target, key, "no SNI in the ClientHello (https entries require it)");
        return;
      }
      if (!c->literal && *sni != c->host) {
        refuse(c, target, key, "SNI `" + *sni + "` does not match `" + c->host + "`");
        return;
      }
      c->sni = sni.value_or("");
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
      c->entry = first(Protocol::http);
      c->protocol = "http";
    }
    resolve(c);
  }

  void resolve(Conn* c) {
    c->state = State::resolving;
    c->deadline = now_ms() + limits.connect_timeout_ms;
    update_interest(c);
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

  void resolved() {
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
  std::optional<std::string> address_refusal(const ResolvedAddress& a) const {
    const auto& net = plan.operator_network();
    if (net.denies(policy::to_string(a.addr))) return "denied by the operator (egress.deny)";
    if (!a.from_hosts_map && policy::is_private_address(a.addr) && !net.private_allowed(a.addr)) {
      return "a private, loopback or link-local address (rebinding; egress.allow_private does not cover it)";
    }
    if (!a.from_hosts_map && !net.private_allowed(a.addr) &&
        std::find(host_addresses.begin(), host_addresses.end(), a.addr) != host_addresses.end()) {
      return "an address of this host (egress.allow_private does not cover it)";
    }
    return std::nullopt;
  }

  void connect_next(Conn* c) {
    std::string refused_detail, refused_addr;
    while (c->next_addr < c->addrs.size()) {
      const auto& a = c->addrs[c->next_addr++];
      if (auto why = address_refusal(a)) {
        refused_detail = *why;
        refused_addr = policy::to_string(a.addr);
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = to_sockaddr(a.addr, c->port, &ss);
      UniqueFd s(::socket(a.addr.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!s) continue;
      const int rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&ss), len);
      if (rc != 0 && errno != EINPROGRESS) continue;
      c->upstream = std::move(s);
      c->upstream_addr = a.addr;
      c->state = State::connecting;
      c->deadline = now_ms() + limits.connect_timeout_ms;
      if (rc == 0) {
        connected(c);  // loopback handshakes often complete inside connect(): no wait
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
    fail_upstream(c, "no upstream address of " + c->host + " accepted the connection");
  }

  // The destination could not be reached: not the agent's violation, but reported.
  void fail_upstream(Conn* c, const std::string& why) {
    if (cb.event) {
      Json d = base(*c);
      d["bytes_out"] = 0;
      d["bytes_in"] = 0;
      d["duration_ms"] = now_ms() - c->started;
      d["reason"] = "upstream unreachable";
      d["error"] = why;
      cb.event("egress_closed", d);
    }
    if (c->proxy && !c->proxy_answered && c->proxy_phase == 1) {
      proxy_reply(c, "502 Bad Gateway", "soyaos moon proxy: " + why + "\n");
      return;
    }
    close_conn(c, "upstream unreachable", true);
  }

  void connected(Conn* c) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(c->upstream.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == EINPROGRESS) return;
    if (err != 0) {
      unwatch(c->upstream.get());
      c->upstream.reset();
      c->ev_up = UINT32_MAX;
      connect_next(c);
      return;
    }
    for (Half* h : {&c->up, &c->down}) {
      int p[2];
      if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        fail_upstream(c, "pipe2: " + std::string(std::strerror(errno)));
        return;
      }
      h->pipe_r.reset(p[0]);
      h->pipe_w.reset(p[1]);
      (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(limits.pipe_bytes));
    }
    c->opened = true;
    c->last_activity = now_ms();
    if (cb.event) {
      Json d = base(*c);
      d["address"] = policy::to_string(c->upstream_addr);
      if (!c->sni.empty()) d["sni"] = c->sni;
      cb.event("egress_opened", d);
    }
    // A tcp tunnel is established once the upstream is; an https tunnel was answered 200
    // before (its ClientHello had to be checked before anything was connected).
    if (c->proxy && c->proxy_connect && !c->proxy_tls && !send_established(c)) {
      close_conn(c, "reset", true);
      return;
    }
    c->state = State::relaying;
    pump(c);
  }

  bool send_established(Conn* c) {
    static constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
    c->proxy_answered = true;
    return ::send(c->agent.get(), kEstablished, sizeof kEstablished - 1, MSG_DONTWAIT | MSG_NOSIGNAL) ==
           static_cast<ssize_t>(sizeof kEstablished - 1);
  }

  // ---- the Moon proxy (C7): CONNECT and plain HTTP, allowed by proxy.allow only ----
  std::string proxy_entry_key() const {
    for (const auto& e : plan.policy().egress) {
      if (e.protocol == Protocol::moon_proxy) return e.key_path;
    }
    return "capabilities.egress";
  }

  void proxy_reply(Conn* c, const char* status, const std::string& body) {
    const std::string reply = std::string("HTTP/1.1 ") + status +
                              "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)::send(c->agent.get(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    close_conn(c, status, false);
  }

  void proxy_refuse(Conn* c, const std::string& target, const std::string& detail) {
    violation(target, "connect", "EACCES", c->entry_key, "Moon proxy: " + detail);
    proxy_reply(c, "403 Forbidden", "soyaos moon proxy: " + detail + "\n");
  }

  // "host:port" or "[v6]:port" -> (host, port); false when malformed.
  static bool split_authority(std::string_view a, std::string* host, uint16_t* port) {
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

  void proxy_request(Conn* c) {
    const auto bytes = std::span(reinterpret_cast<const uint8_t*>(c->head.data()), c->head.size());
    auto parsed = network::parse_http_head(bytes);
    if (parsed.status == network::ParseStatus::need_more && c->head.size() < network::kHttpMaxHead) return;
    if (parsed.status != network::ParseStatus::complete) {
      proxy_reply(c, "400 Bad Request", "soyaos moon proxy: " + parsed.reason + "\n");
      return;
    }
    const auto& h = parsed.head;
    std::string host, path;
    uint16_t port = 0;
    if (h.target_form == network::TargetForm::authority) {
      if (!split_authority(h.target, &host, &port)) {
        proxy_reply(c, "400 Bad Request", "soyaos moon proxy: CONNECT needs HOST:PORT\n");
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
        proxy_reply(c, "400 Bad Request", "soyaos moon proxy: only http:// in absolute form (use CONNECT for https)\n");
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
          proxy_reply(c, "400 Bad Request", "soyaos moon proxy: bad request target\n");
          return;
        }
      } else if (!split_authority(authority, &host, &port)) {
        proxy_reply(c, "400 Bad Request", "soyaos moon proxy: bad request target\n");
        return;
      }
    } else {
      proxy_reply(c, "400 Bad Request", "soyaos moon proxy: not a proxy request (absolute URI or CONNECT)\n");
      return;
    }
    c->host = host;
    c->port = port;
    if (auto ip = policy::parse_ip(host)) {
      c->literal = true;
      c->literal_addr = *ip;
      c->host = policy::to_string(*ip);
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
      const std::string want = c->literal && c->literal_addr.v6 ? "[" + c->host + "]" : c->host;
      if (h.host != want || (h.port && *h.port != port) || (!h.port && port != 80)) {
        proxy_refuse(c, target, "the Host field `" + h.host + (h.port ? ":" + std::to_string(*h.port) : "") +
                                    "` does not name the request's target `" + c->host + ":" + std::to_string(port) +
                                    "`");
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
      out += "Connection: close\r\n\r\n";
      c->head = out + rest;
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

  void proxy_tunnel_hello(Conn* c) {
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
      why = "encrypted ClientHello (ECH)";
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
    c->head_sent = 0;
    c->proxy_phase = 3;
    resolve(c);  // the ClientHello (in c->head) goes upstream first
  }

  // Moves what can move without blocking, both ways; ends the connection when both
  // directions are finished or one side failed.
  void pump(Conn* c) {
    bool failed = false;
    // The agent's first bytes, read for the protocol check, go first.
    while (c->head_sent < c->head.size()) {
      ssize_t w = ::send(c->upstream.get(), c->head.data() + c->head_sent, c->head.size() - c->head_sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0) {
        if (errno != EAGAIN) failed = true;
        break;
      }
      c->head_sent += static_cast<size_t>(w);
      c->bytes_out += static_cast<uint64_t>(w);
    }
    if (!failed && c->head_sent == c->head.size()) {
      failed = !pump_half(c->up, c->agent.get(), c->upstream.get(), &c->bytes_out);
    }
    if (!failed) failed = !pump_half(c->down, c->upstream.get(), c->agent.get(), &c->bytes_in);
    if (failed) {
      close_conn(c, "reset", true);
      return;
    }
    if (c->up.shut && c->down.shut) {
      close_conn(c, "closed", false);
      return;
    }
    update_interest(c);
  }

  bool pump_half(Half& h, int from, int to, uint64_t* counter) {
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
      if (h.in_pipe == 0 && !h.eof) {
        ssize_t n = ::splice(from, nullptr, h.pipe_w.get(), nullptr, limits.pipe_bytes,
                             SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
        if (n > 0) {
          h.in_pipe += static_cast<size_t>(n);
          progress = true;
        } else if (n == 0) {
          h.eof = true;
          progress = true;
        } else if (errno != EAGAIN && errno != EINTR) {
          return false;
        }
      }
      if (h.eof && h.in_pipe == 0 && !h.shut) {
        (void)::shutdown(to, SHUT_WR);  // half-close: the other side learns "no more data"
        h.shut = true;
      }
      if (!progress) break;
    }
    return true;
  }

  void update_interest(Conn* c) {
    uint32_t a = 0, u = 0;
    switch (c->state) {
      case State::head: a = EPOLLIN; break;
      case State::resolving: break;
      case State::connecting: u = EPOLLOUT; break;
      case State::relaying:
        if (!c->up.eof && c->up.in_pipe == 0 && c->head_sent == c->head.size()) a |= EPOLLIN;
        if (c->down.in_pipe > 0) a |= EPOLLOUT;
        if (!c->down.eof && c->down.in_pipe == 0) u |= EPOLLIN;
        if (c->up.in_pipe > 0 || c->head_sent < c->head.size()) u |= EPOLLOUT;
        break;
    }
    if (c->agent) rewatch_or_remove(c->agent.get(), a, &c->w_agent, &c->ev_agent);
    if (c->upstream) rewatch_or_remove(c->upstream.get(), u, &c->w_up, &c->ev_up);
  }

  void rewatch_or_remove(int fd, uint32_t events, Watch* w, uint32_t* current) {
    if (events == 0) {
      if (*current != UINT32_MAX && *current != 0) {
        // Keep the fd registered with no events (cheaper than DEL/ADD churn).
        struct epoll_event ev {};
        ev.data.ptr = w;
        (void)::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev);
        *current = 0;
      } else if (*current == UINT32_MAX) {
        struct epoll_event ev {};
        ev.data.ptr = w;
        (void)::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev);
        *current = 0;
      }
      return;
    }
    rewatch(fd, events, w, current);
  }

  void conn_event(Conn* c, bool agent_side, uint32_t ev) {
    switch (c->state) {
      case State::head:
        if (agent_side) head_ready(c);
        return;
      case State::resolving:
        return;
      case State::connecting:
        if (!agent_side) connected(c);
        return;
      case State::relaying:
        c->last_activity = now_ms();
        (void)ev;
        pump(c);
        return;
    }
  }

  void expire() {
    const int64_t now = now_ms();
    std::vector<Conn*> late;
    for (auto& [id, c] : conns) {
      if (c->state == State::relaying) {
        if (now - c->last_activity > limits.idle_timeout_ms) late.push_back(c.get());
      } else if (now > c->deadline) {
        late.push_back(c.get());
      }
    }
    for (Conn* c : late) {
      // A slow client (slowloris) or a silent upstream is closed, not reported.
      if (c->state == State::relaying) {
        close_conn(c, "idle timeout", true);
      } else if (c->state == State::connecting || c->state == State::resolving) {
        fail_upstream(c, "timed out connecting to " + c->host);
      } else {
        close_conn(c, "no request within the time limit", true);
      }
    }
    std::vector<DnsTcp*> idle;
    for (auto& [fd, d] : dns_tcp) {
      if (now > d->deadline) idle.push_back(d.get());
    }
    for (DnsTcp* d : idle) dns_tcp_close(d);
  }

  // ---- UDP relays ----
  void relay_ready(Relay* r) {
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
          if (auto ip = policy::parse_ip(e.host)) {
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

  void relay_resolved(uint64_t index, const Result<std::vector<ResolvedAddress>>& result) {
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

  void forward(Relay* r, const sockaddr_storage& from, socklen_t len, std::string_view data) {
    std::string key(reinterpret_cast<const char*>(&from), len);
    auto it = r->flows.find(key);
    if (it == r->flows.end()) {
      if (r->flows.size() >= 64) {  // bounded: the oldest flow goes
        close_flow(r->flows.begin()->second.get(), "flow limit");
      }
      const auto& e = plan.entry(r->entry);
      sockaddr_storage dst{};
      socklen_t dlen = to_sockaddr(*r->addr, e.port, &dst);
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
        cb.event("egress_opened", Json{{"connection", f->id}, {"entry", e.key_path}, {"host", e.host},
                                      {"port", e.port}, {"protocol", "udp"},
                                      {"address", policy::to_string(*r->addr)}});
      }
      it = r->flows.emplace(key, std::move(f)).first;
    }
    Flow* f = it->second.get();
    f->last = now_ms();
    if (::send(f->up.get(), data.data(), data.size(), MSG_DONTWAIT) > 0) f->bytes_out += data.size();
  }

  void flow_ready(Flow* f) {
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

  void close_flow(Flow* f, const std::string& reason) {
    const auto& e = plan.entry(f->relay->entry);
    if (cb.event) {
      cb.event("egress_closed", Json{{"connection", f->id}, {"entry", e.key_path}, {"host", e.host},
                                    {"port", e.port}, {"protocol", "udp"},
                                    {"address", policy::to_string(*f->relay->addr)},
                                    {"bytes_out", f->bytes_out}, {"bytes_in", f->bytes_in},
                                    {"duration_ms", now_ms() - f->started}, {"reason", reason}});
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

  // ---- the Moon proxy listener ----
  void proxy_accept() {
    for (;;) {
      UniqueFd fd(::accept4(fds.proxy_tcp.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) return;
      if (conns.size() >= limits.max_connections) {
        reset_close(fd);
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

  // ---- the end of the run ----
  void finish() {
    drain_nflog();
    std::vector<Conn*> open;
    for (auto& [id, c] : conns) open.push_back(c.get());
    for (Conn* c : open) close_conn(c, "run ended", true);
    for (auto& r : relays) {
      while (!r->flows.empty()) close_flow(r->flows.begin()->second.get(), "run ended");
    }
    dns_tcp.clear();
    dead_conns.clear();
    dead_dns.clear();
    dead_flows.clear();
    std::lock_guard lock(pool->mu);
    pool->stopping = true;
    pool->cv.notify_all();
  }
};

EgressService::EgressService(EgressPlan& plan, comet::NetworkFds fds, EgressCallbacks callbacks, EgressLimits limits)
    : impl_(std::make_unique<Impl>(plan, std::move(fds), std::move(callbacks), limits)) {}

EgressService::~EgressService() {
  try {
    stop();
  } catch (...) {
    // A destructor must not throw; stop() only fails on allocation failure while emitting
    // the last events, and the run reports its events through the sink anyway.
  }
}

Status EgressService::start() {
  if (auto s = impl_->setup(); !s) return s;
  impl_->thread = std::thread([this] { impl_->run(); });
  return {};
}

void EgressService::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping.store(true);
  if (impl_->wake) {
    uint64_t one = 1;
    (void)::write(impl_->wake.get(), &one, sizeof one);
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->pool) impl_->finish();
}

}  // namespace soyaos::supervisor
