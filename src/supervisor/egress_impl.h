// The state of EgressService (egress_service.h) and the services that share its loop, one
// file each (STYLE.md): every service is a set of members of this one struct, because they
// share the epoll set, the connection table and the deferred frees of an epoll batch.
// Private to src/supervisor: include it only from the egress_*.cc files.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "network/tls_handshake.h"
#include "supervisor/egress_service.h"
#include "supervisor/interception.h"
#include "supervisor/resolver.h"

namespace soyaos::supervisor {

struct EgressService::Impl {
  using Json = nlohmann::ordered_json;
  using Protocol = manifest::Protocol;

  // What an epoll event is about: the loop's data.ptr points at a Watch.
  enum class Kind : uint8_t {
    wake, timer, nflog, dns_udp, dns_tcp_listen, dns_tcp, gateway_listen, conn_agent, conn_upstream,
    relay, relay_flow, proxy_listen
  };
  struct Watch {
    Kind kind;
    void* obj = nullptr;
  };

  static int64_t now_ms();
  // Closes with a TCP reset (SO_LINGER 0): the agent's next call fails with ECONNRESET.
  static void reset_close(UniqueFd& fd);
  static policy::IpAddress from_sockaddr(const sockaddr_storage& ss, uint16_t* port);
  static socklen_t to_sockaddr(const policy::IpAddress& a, uint16_t port, sockaddr_storage* ss);
  static uint32_t v4_host_order(const policy::IpAddress& a);

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
  static constexpr uint64_t kRelayBit = uint64_t{1} << 63;
  static void resolver_worker(std::shared_ptr<ResolverPool> pool);

  // ---- gateway connections ----
  struct Half {  // one direction: from -> pipe -> to
    UniqueFd pipe_r, pipe_w;
    size_t in_pipe = 0;
    bool eof = false;   // `from` has no more data
    bool shut = false;  // `to`'s write side was shut down after the last byte
    // `from` failed (errno, a reset): what it sent before is still delivered, then `to` is
    // reset instead of shut down.
    int from_error = 0;
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
    // https (gateway entry or proxy tunnel): the handshake after the first ClientHello is
    // followed until nothing more can be checked (a HelloRetryRequest's second hello must keep
    // the SNI, issue #18); meanwhile both directions go through user space (egress_tls.cc).
    std::optional<network::TlsHandshakeWatch> tls_watch;
    std::string tls_pending;    // agent bytes read but not yet let through by tls_watch
    bool tls_agent_eof = false;  // the agent half-closed while bytes were still held
    std::vector<ResolvedAddress> addrs;
    size_t next_addr = 0;
    policy::IpAddress upstream_addr;
    uint16_t upstream_port = 0;  // `port`, or the egress.connect_to target's
    bool connect_to = false;     // egress.connect_to chose the upstream
    std::string connect_error;   // why the last upstream address failed, for egress_closed
    Half up, down;  // up: agent -> upstream; down: upstream -> agent
    uint64_t bytes_out = 0, bytes_in = 0;
    int64_t deadline = 0, last_activity = 0, started = 0;
    bool opened = false;
    bool open_event_pending = false;  // connected; egress_opened not emitted yet (emit_opened)
    bool closed = false;  // closed during this epoll batch; freed after it
    // The Moon proxy (C7): phase 1 waits for the request head, phase 2 (after CONNECT to an
    // https entry) for the tunnel's ClientHello. entry_key names the proxy.allow entry.
    bool proxy = false;
    int proxy_phase = 0;
    bool proxy_connect = false;
    bool proxy_tls = false;
    bool proxy_answered = false;  // a 200 went to the agent: from then on, only resets
    // The gateway reads this connection request by request: an intercepted one (C11: the
    // entry has `http` rules or a secret is bound to the host) or any plain `http` one (C6:
    // every request's Host). Once connected it goes to an exchange thread (egress_intercept.cc).
    bool intercept = false;
    // `pack learn`: no entry allows the destination; the first bytes are read and
    // classified (egress_learn.cc), then the connection is closed. Nothing goes upstream.
    bool learn = false;
    std::string entry_key;
    uint32_t ev_agent = 0, ev_up = 0;
    bool agent_hup = false, up_hup = false;  // EPOLLHUP seen: no longer kept in the set idle
    // The upstream failed (errno, a reset) while relaying: nothing more goes to it, and what it
    // sent before (the pipe, its receive queue) still reaches the agent, which is reset once
    // its socket has sent all of it (reset_after_drain).
    int up_error = 0;
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
    uint16_t port = 0;        // where datagrams go: the entry's port, or egress.connect_to's
    bool connect_to = false;  // egress.connect_to chose addr and port
    std::deque<std::pair<std::pair<sockaddr_storage, socklen_t>, std::string>> pending;
    std::map<std::string, std::unique_ptr<Flow>> flows;
    Watch w{Kind::relay, nullptr};
  };

  // ---- descriptors (issue #18): the caps below are computed from RLIMIT_NOFILE at setup so
  // that every accepted connection can get all the descriptors it will need; accept() never
  // meets EMFILE in normal operation, and if another part of the process exhausts the table
  // anyway, the spare descriptor drains the listener instead of letting it spin.
  struct FdBudget {
    size_t limit = 0;        // RLIMIT_NOFILE (soft) after setup raised it towards the hard limit
    size_t in_use = 0;       // descriptors open when the service started
    size_t conn_cap = 0;     // gateway + Moon proxy connections at once
    size_t dns_tcp_cap = 0;  // DNS-over-TCP connections at once
  };
  // Each relayed connection: the agent's socket, the upstream socket, two pipes (2 fds each).
  static constexpr size_t kFdsPerConn = 6;
  // Empty splice pipes kept for the next connections (issue #16): a connection takes its two
  // from here instead of 2 pipe2 + 2 F_SETPIPE_SZ, and gives them back instead of 4 close.
  // Only a pipe that is empty goes back (pipe_return): a connection's leftover bytes must
  // never become the next connection's first bytes. The budget needs no room of its own:
  // a pipe is only created while the pool is empty, so the pipes that exist never outnumber
  // two per relayed connection open at that moment (within kFdsPerConn); a pool of at most
  // budget.conn_cap pipes beside intercepted connections (3 descriptors each) stays within
  // it too.
  static constexpr size_t kPipePool = 16;
  // Left for the rest of the supervisor (observer, event files, the Moon's store, resolver
  // sockets): they share the process's descriptor table.
  static constexpr size_t kFdReserve = 64;
  static constexpr size_t kFlowsPerRelay = 64;
  // Below this many gateway connections the run refuses to start (C1) rather than serve a
  // network that fails at once.
  static constexpr size_t kMinConnections = 8;
  FdBudget budget;
  struct Pipe {
    UniqueFd r, w;
  };
  std::vector<Pipe> pipe_pool;
  // A pipe for `h` (from the pool, else a new one of limits.pipe_bytes); false with errno set.
  bool pipe_take(Half& h);
  // `h`'s pipe back into the pool when it is provably empty, else closed.
  void pipe_return(Half& h);
  UniqueFd spare;  // closed to accept (and reset) one connection at EMFILE/ENFILE, reopened
  uint64_t refused_conns = 0, refused_dns_tcp = 0;  // refused at the caps (limit_exceeded)
  uint64_t refused_exchanges = 0;  // intercepted connections refused at max_exchanges
  // Gateway and Moon proxy connections that hold descriptors now: those of the loop (closed
  // ones of this epoll batch included) and the intercepted ones that exchange threads hold.
  // An intercepted connection holds fewer than kFdsPerConn (the agent's socket, the upstream
  // socket, and for a moment a file OpenSSL opens to look up a CA), so counting it as one
  // relayed connection keeps the whole under budget.conn_cap's descriptors.
  size_t open_connections();
  bool accept_paused = false;  // listeners out of the epoll set until the next timer tick
  Status plan_descriptors();
  // One accept4() on `listener`: a connection, or an invalid fd and *more = false when the
  // caller should stop (EAGAIN, or the listeners were paused). At EMFILE/ENFILE the pending
  // connection is drained through the spare descriptor: reset, and counted in *refused.
  UniqueFd accept_one(int listener, uint64_t* refused, bool* more);
  void set_listeners(uint32_t events);
  void report_limits();
  // ---- intercepted connections (egress_intercept.cc): one thread each ----
  // The implicit moves of its members (strings, vectors, ordered_json, UniqueFd) do not
  // throw; clang-tidy cannot see through ordered_json.
  struct ExchangeJob {  // NOLINT(bugprone-exception-escape)
    uint64_t id = 0;
    UniqueFd agent, upstream;
    std::string head;  // the agent's bytes the gateway read (ClientHello or request head)
    bool tls = true;
    std::string host;
    uint16_t port = 0;
    std::string entry_key, address;
    std::vector<manifest::HttpRule> rules;
    // C11's interception (rules or a bound secret): events say `intercepted: true`. A plain
    // http entry without either is read only for each request's Host and for placeholders.
    bool intercepted = true;
    bool operator_entry = false;  // a proxy.allow entry: no secret is ever substituted there
    Json base;  // egress_opened's data, for egress_closed
    int64_t started = 0;
  };
  struct Exchanges {
    std::mutex mu;
    std::map<uint64_t, std::thread> threads;
    std::vector<uint64_t> done;  // finished, to be joined
    size_t active = 0;           // under mu
    UniqueFd stop;               // eventfd: the run ends, every exchange returns
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

  const Interception* icpt = nullptr;  // null: nothing is intercepted, pure passthrough
  Exchanges exchanges;

  Impl(EgressPlan& p, comet::NetworkFds f, EgressCallbacks c, EgressLimits l, const Interception* i)
      : plan(p), fds(std::move(f)), cb(std::move(c)), limits(l), icpt(i) {}

  // egress_service.cc: the loop, epoll plumbing, the resolver pool, events and violations
  Json base(const Conn& c) const;
  void violation(const std::string& resource, const std::string& syscall, const std::string& err,
                 const std::string& closest, const std::string& detail);
  Status watch(int fd, uint32_t events, Watch* w);
  void rewatch(int fd, uint32_t events, Watch* w, uint32_t* current);
  void unwatch(int fd);
  Status setup();
  void submit(uint64_t id, const std::string& name);
  void run();
  void dispatch(Watch* w, uint32_t ev);
  void expire();
  void finish();

  // egress_nflog.cc: packets the netns refused
  void drain_nflog();
  bool own_late_reply(const comet::RefusedPacket& p) const;

  // egress_dns.cc: the DNS stub
  std::vector<uint8_t> dns_reply(std::span<const uint8_t> msg, bool tcp);
  void dns_udp_ready();
  void dns_tcp_accept();
  void dns_tcp_close(DnsTcp* c);
  void dns_tcp_ready(DnsTcp* c);

  // egress_gateway.cc: the gateway's listeners and its protocol check
  void gateway_accept(const UniqueFd& listener);
  void head_ready(Conn* c);

  // egress_learn.cc: `pack learn` (C13) — what an undeclared connection would have been
  static constexpr int kLearnHeadMs = 1000;  // silent this long: a server-first protocol, "tcp"
  void learn_start(Conn* c);
  void learn_head(Conn* c);
  // Reports the connection as learned (host:port/protocol, what was seen) and closes it.
  void learn_done(Conn* c, const std::string& protocol, const std::string& detail);

  // egress_conn.cc: a TCP connection's life, shared by the gateway and the Moon proxy: upstream
  // resolution and connect, relaying with splice(2), close
  Conn* new_conn(UniqueFd agent);
  void refuse(Conn* c, const std::string& resource, const std::string& closest, const std::string& detail);
  // `error`: why, when the gateway or the upstream (not the agent) ended it (egress_closed).
  void close_conn(Conn* c, const std::string& reason, bool reset, const std::string& error = "");
  void resolve(Conn* c);
  void resolved();
  std::optional<std::string> address_refusal(const ResolvedAddress& a) const;
  bool on_this_host(const policy::IpAddress& addr) const;
  void connect_next(Conn* c);
  static std::string connect_failure(const policy::IpAddress& addr, uint16_t port, int err);
  void fail_upstream(Conn* c, const std::string& why);
  // known_ok: connect() itself returned 0 (no SO_ERROR to read).
  void connected(Conn* c, bool known_ok);
  // egress_opened, once, if connected() left it pending.
  void emit_opened(Conn* c);
  // ready: which sides reported input (kAgentReady, kUpstreamReady); only those are read,
  // and a side whose direction had bytes waiting in its pipe. Both by default.
  static constexpr uint32_t kAgentReady = 1, kUpstreamReady = 2;
  void pump(Conn* c, uint32_t ready = kAgentReady | kUpstreamReady);
  // A read shorter than this found the socket drained: pump_half does not try it again.
  static constexpr size_t kShortRead = 16384;
  // read: also move new bytes from `from` (false: only flush the pipe and the half-close).
  bool pump_half(Half& h, int from, int to, uint64_t* counter, bool read = true);
  // One step of an https connection whose handshake is still followed (egress_tls.cc);
  // false when it closed the connection (a refusal, reported, or an I/O failure).
  bool tls_watch_step(Conn* c);
  // What the watch may hold of the agent's bytes: a whole second ClientHello (64 KiB in at
  // most 16 records) plus one more record behind it.
  static constexpr size_t kTlsPendingMax = network::kTlsMaxHello + 16 * network::kTlsRecordHeader + 18432 + 5;
  void update_interest(Conn* c);
  // No events: `keep` registers the fd with none (for EPOLLERR); `hup` takes it out of the set.
  void rewatch_or_remove(int fd, uint32_t events, Watch* w, uint32_t* current, bool keep, bool hup);
  void conn_event(Conn* c, bool agent_side, uint32_t ev);
  void hung_up(Conn* c, bool agent_side, uint32_t ev);
  // The upstream failed: the direction towards it ends, the other drains (Conn::up_error).
  void upstream_failed(Conn* c, int err);
  // up_error's connection has delivered everything towards the agent: reset once the agent's
  // socket has nothing left to send (SIOCOUTQ 0; a reset drops what it still holds). true: closed.
  bool reset_after_drain(Conn* c);

  // egress_intercept.cc: intercepted connections (C11)
  Status setup_exchanges();
  // At max_exchanges: counts, resets and closes `c`, true.
  bool exchange_cap_reached(Conn* c);
  void intercept_handoff(Conn* c);
  void exchange_main(ExchangeJob job);
  void reap_exchanges(bool all);

  // egress_udp.cc: the UDP relays
  void relay_ready(Relay* r);
  void relay_resolved(uint64_t index, const Result<std::vector<ResolvedAddress>>& result);
  void forward(Relay* r, const sockaddr_storage& from, socklen_t len, std::string_view data);
  void flow_ready(Flow* f);
  void close_flow(Flow* f, const std::string& reason);
  static std::string relay_target(const Relay& r);

  // egress_proxy.cc: the Moon proxy (C7)
  void proxy_accept();
  bool send_established(Conn* c);
  std::string proxy_entry_key() const;
  void proxy_reply(Conn* c, const char* status, const std::string& body);
  void proxy_refuse(Conn* c, const std::string& target, const std::string& detail);
  void proxy_bad_request(Conn* c, const std::string& why);
  static std::string proxy_request_resource(const Conn& c);
  static bool split_authority(std::string_view a, std::string* host, uint16_t* port);
  void proxy_request(Conn* c);
  void proxy_tunnel_hello(Conn* c);
};

}  // namespace soyaos::supervisor
