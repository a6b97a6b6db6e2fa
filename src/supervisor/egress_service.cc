// EgressService (egress_service.h): the loop every egress service runs on — epoll, the timer,
// the resolver pool, events and violations — and the service's start and stop.
#include "supervisor/egress_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/clone_gate.h"
#include "supervisor/egress_impl.h"

namespace soyaos::supervisor {

int64_t EgressService::Impl::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void EgressService::Impl::reset_close(UniqueFd& fd) {
  if (!fd) return;
  struct linger lg {1, 0};
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  fd.reset();
}

policy::IpAddress EgressService::Impl::from_sockaddr(const sockaddr_storage& ss, uint16_t* port) {
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

socklen_t EgressService::Impl::to_sockaddr(const policy::IpAddress& a, uint16_t port, sockaddr_storage* ss) {
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

uint32_t EgressService::Impl::v4_host_order(const policy::IpAddress& a) {
  uint32_t be = 0;
  std::memcpy(&be, a.bytes.data(), 4);
  return ntohl(be);
}

void EgressService::Impl::resolver_worker(std::shared_ptr<ResolverPool> pool) {
  for (;;) {
    ResolveJob job;
    {
      std::unique_lock lock(pool->mu);
      pool->cv.wait(lock, [&] { return pool->stopping || !pool->jobs.empty(); });
      if (pool->stopping) return;
      job = std::move(pool->jobs.front());
      pool->jobs.pop_front();
    }
    // Detached, a worker can outlive its run while a lookup finishes, and `pack test` or
    // `pack learn` then launch the next run's Comet in this process: every step that may
    // allocate holds the clone gate shared (common/clone_gate.h), so that clone3 never
    // copies this thread mid-malloc. The lookup is bounded by the resolver's deadline.
    std::shared_lock gate(clone_gate());
    auto result = resolve_host(pool->network, job.name);
    std::lock_guard lock(pool->mu);
    if (pool->stopping) return;
    pool->done.push_back({job.id, std::move(result)});
    uint64_t one = 1;
    (void)::write(pool->wake.get(), &one, sizeof one);
  }
}

auto EgressService::Impl::base(const Conn& c) const -> Json {
  Json d{{"connection", c.id},
         {"entry", !c.entry_key.empty() ? c.entry_key
                   : c.entry            ? plan.entry(*c.entry).key_path
                                        : std::string("capabilities.egress")},
         {"host", c.host},
         {"port", c.port},
         {"protocol", c.protocol}};
  // Allowed by the Moon proxy's proxy.allow: through the proxy variables, or (an entry()
  // from proxy.allow) by a client that ignored them and came through the gateway.
  if (c.proxy || (c.entry && plan.from_proxy_allow(*c.entry))) d["via"] = "moon-proxy";
  if (c.connect_to && !c.addrs.empty()) {  // egress.connect_to chose where to connect
    const auto& a = c.addrs.front().addr;
    d["connect_to"] = (a.v6 ? "[" + policy::to_string(a) + "]" : policy::to_string(a)) + ":" +
                      std::to_string(c.upstream_port);
  }
  if (!c.sni.empty()) d["sni"] = c.sni;  // https: the SNI that was checked (also on egress_closed)
  return d;
}

void EgressService::Impl::violation(const std::string& resource, const std::string& syscall, const std::string& err,
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

Status EgressService::Impl::watch(int fd, uint32_t events, Watch* w) {
  struct epoll_event ev {};
  ev.events = events;
  ev.data.ptr = w;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return errno_error("epoll_ctl add");
  return {};
}

void EgressService::Impl::rewatch(int fd, uint32_t events, Watch* w, uint32_t* current) {
  if (events == *current) return;
  struct epoll_event ev {};
  ev.events = events;
  ev.data.ptr = w;
  (void)::epoll_ctl(epoll.get(), *current == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
  *current = events;
}

void EgressService::Impl::unwatch(int fd) {
  (void)::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
}

Status EgressService::Impl::setup() {
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
  if (auto s = setup_exchanges(); !s) return s;

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
  // TCP_NODELAY on the listeners: every accepted connection inherits it, at no syscall per
  // connection (why the relay wants it: egress_conn.cc, connect_next).
  for (const UniqueFd* l : {&fds.gateway_tcp, &fds.gateway_tcp6, &fds.proxy_tcp}) {
    const int one = 1;
    if (*l && ::setsockopt(l->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
      return errno_error("setsockopt TCP_NODELAY (egress gateway listener)");
    }
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
  return plan_descriptors();
}

// The descriptor budget (docs/network.md "Limits"): at the usual soft limit of 1024, 512
// connections of 6 descriptors each never fitted, accept() failed with EMFILE first and the
// level-triggered listener spun the loop at 100 % CPU (issue #18). The soft limit is raised
// towards the hard one as far as the full caps need (the agent's own limit is set apart, in
// the Comet, C9); what still does not fit lowers the caps, so that every accepted connection
// has its descriptors.
Status EgressService::Impl::plan_descriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return errno_error("opendir /proc/self/fd (the egress gateway's descriptor budget)");
  size_t open_now = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++open_now;
  }
  ::closedir(dir);
  open_now = open_now > 0 ? open_now - 1 : 0;  // the directory's own descriptor
  spare.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!spare) return errno_error("open /dev/null (the egress gateway's spare descriptor)");
  budget.in_use = open_now + 1;
  const size_t flows = relays.size() * kFlowsPerRelay;
  const size_t fixed = budget.in_use + kFdReserve + flows;
  const size_t want = fixed + limits.max_dns_tcp + kFdsPerConn * limits.max_connections;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return errno_error("getrlimit RLIMIT_NOFILE");
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min<rlim_t>(rl.rlim_max, want);
    if (raised.rlim_cur > rl.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  budget.limit = rl.rlim_cur == RLIM_INFINITY ? want : static_cast<size_t>(rl.rlim_cur);
  const size_t avail = budget.limit > fixed ? budget.limit - fixed : 0;
  budget.dns_tcp_cap = std::min(limits.max_dns_tcp, avail / 16);
  budget.conn_cap = std::min(limits.max_connections, (avail - budget.dns_tcp_cap) / kFdsPerConn);
  if (budget.conn_cap < kMinConnections) {
    return make_error("the open-files limit (RLIMIT_NOFILE " + std::to_string(budget.limit) + ", " +
                      std::to_string(budget.in_use) + " already open) leaves room for " +
                      std::to_string(budget.conn_cap) + " egress connections, fewer than " +
                      std::to_string(kMinConnections) + "; raise it (ulimit -n " + std::to_string(want) + ")");
  }
  return {};
}

UniqueFd EgressService::Impl::accept_one(int listener, uint64_t* refused, bool* more) {
  *more = true;
  UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (fd) return fd;
  const int err = errno;
  if (err == EINTR || err == ECONNABORTED) return {};
  if (err == EAGAIN || err == EWOULDBLOCK) {
    *more = false;
    return {};
  }
  if ((err == EMFILE || err == ENFILE) && spare) {
    // The table is full although the caps should have kept room (another part of the
    // process took it): one descriptor freed is enough to take the pending connection off
    // the backlog and reset it, so the listener stops being readable.
    spare.reset();
    UniqueFd drained(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (drained) {
      reset_close(drained);
      ++*refused;
    }
    spare.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (drained && spare) return {};
  }
  // Nothing to drain with, or ENOBUFS/ENOMEM: the listeners leave the epoll set until the
  // next timer tick (250 ms) rather than wake the loop again at once.
  set_listeners(0);
  accept_paused = true;
  *more = false;
  return {};
}

void EgressService::Impl::set_listeners(uint32_t events) {
  std::pair<int, Watch*> listeners[] = {{fds.gateway_tcp.get(), &w_gw4},
                                        {fds.gateway_tcp6.get(), &w_gw6},
                                        {fds.proxy_tcp.get(), &w_proxy},
                                        {fds.dns_tcp.get(), &w_dns_tcp}};
  for (auto [fd, w] : listeners) {
    if (fd < 0) continue;
    struct epoll_event ev {};
    ev.events = events;
    ev.data.ptr = w;
    (void)::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev);
  }
}

// After the run: connections refused at the caps, as limit_exceeded (not violations: a
// bound of the sandbox's resources, like pids, docs/events.md).
void EgressService::Impl::report_limits() {
  if (!cb.event) return;
  auto one = [&](const char* limit, size_t cap, uint64_t refused) {
    if (refused == 0) return;
    cb.event("limit_exceeded", Json{{"limit", limit},
                                    {"mechanism", "egress gateway"},
                                    {"limit_connections", cap},
                                    {"open_files", budget.limit},
                                    {"action", "refused"},
                                    {"refused", refused}});
  };
  one("connections", budget.conn_cap, refused_conns);
  one("dns_tcp_connections", budget.dns_tcp_cap, refused_dns_tcp);
  one("intercepted_connections", std::min(limits.max_exchanges, budget.conn_cap), refused_exchanges);
}

size_t EgressService::Impl::open_connections() {
  std::lock_guard lock(exchanges.mu);
  return conns.size() + dead_conns.size() + exchanges.active;
}

void EgressService::Impl::submit(uint64_t id, const std::string& name) {
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

void EgressService::Impl::run() {
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

void EgressService::Impl::dispatch(Watch* w, uint32_t ev) {
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

void EgressService::Impl::expire() {
  reap_exchanges(false);
  const int64_t now = now_ms();
  if (accept_paused) {
    accept_paused = false;
    set_listeners(EPOLLIN);
  }
  // Upstream resets whose bytes have all gone into the agent's socket: reset the agent once
  // that socket has sent them all (no event says so: the agent's side wants none meanwhile).
  std::vector<Conn*> drained;
  for (auto& [id, c] : conns) {
    if (c->state == State::relaying && c->up_error != 0 && c->down.eof && c->down.in_pipe == 0) {
      drained.push_back(c.get());
    }
  }
  for (Conn* c : drained) (void)reset_after_drain(c);
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
    } else if (c->state == State::connecting) {
      const std::string a = policy::to_string(c->upstream_addr);
      fail_upstream(c, "connect " + (c->upstream_addr.v6 ? "[" + a + "]" : a) + ":" +
                           std::to_string(c->upstream_port) + ": timed out after " +
                           std::to_string(limits.connect_timeout_ms / 1000) + " s");
    } else if (c->state == State::resolving) {
      fail_upstream(c, "resolve " + c->host + ": timed out after " + std::to_string(limits.connect_timeout_ms / 1000) +
                           " s");
    } else if (c->learn) {
      learn_done(c, "tcp", c->head.empty() ? "learn: the agent sent nothing within 1 s (a protocol where the server speaks first?)"
                                           : "learn: neither a TLS ClientHello nor an HTTP request");
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

void EgressService::Impl::finish() {
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
  report_limits();
  std::lock_guard lock(pool->mu);
  pool->stopping = true;
  pool->cv.notify_all();
}

EgressService::EgressService(EgressPlan& plan, comet::NetworkFds fds, EgressCallbacks callbacks, EgressLimits limits,
                             const Interception* interception)
    : impl_(std::make_unique<Impl>(plan, std::move(fds), std::move(callbacks), limits, interception)) {}

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
  impl_->reap_exchanges(true);  // intercepted connections end (each emits egress_closed)
  if (impl_->pool) impl_->finish();
}

}  // namespace soyaos::supervisor
