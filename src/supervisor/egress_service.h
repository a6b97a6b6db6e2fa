// The host side of a run's network (SPEC.md C6, C7): one thread, one epoll loop, serving
// the sockets the Comet's network layer created inside the agent's netns —
//   the DNS stub (UDP and TCP on 127.0.0.1:53): A answers with fake addresses for allowed
//     names only, NODATA for their AAAA, NXDOMAIN / REFUSED (and a violation) otherwise;
//   the egress gateway (127.0.0.1:15001, [::1]:15001): every redirected connection's
//     original destination -> the entries that allow it -> the protocol check (TLS SNI for
//     https, the HTTP/1.x Host for http, nothing for tcp) -> upstream resolution (dns.hosts,
//     then the resolver, refusing private answers) -> relay both ways with splice(2);
//   the UDP relays (one socket per udp entry);
//   NFLOG: every packet the netns refused becomes a violation;
//   the Moon proxy listener, handed to a ProxyHandler when the pack declares moon-proxy.
// Decisions only ever refuse: a connection the ruleset redirected is relayed or reset.
// docs/network.md describes each check and what it proves.
// One file per service around the shared loop (egress_impl.h holds their common state):
// egress_service.cc (the loop), egress_dns.cc, egress_gateway.cc, egress_conn.cc (a TCP
// connection's upstream side and relay), egress_udp.cc, egress_nflog.cc, egress_proxy.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "comet/network.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "supervisor/egress_plan.h"
#include "supervisor/observer.h"

namespace soyaos::supervisor {

struct Interception;  // interception.h

struct EgressLimits {
  size_t max_connections = 512;        // open gateway connections at once (per run)
  size_t max_dns_tcp = 32;             // open DNS-over-TCP connections at once
  int head_timeout_ms = 10'000;        // for the ClientHello / request head to arrive
  int connect_timeout_ms = 10'000;     // upstream connect
  int idle_timeout_ms = 300'000;       // a relayed connection with no traffic either way
  size_t pipe_bytes = size_t{256} * 1024;      // splice pipe per direction (bounds memory)
  size_t max_exchanges = 64;           // intercepted connections at once (a thread each, C11)
};

struct EgressCallbacks {
  std::function<void(const Violation&)> violation;                              // thread-safe
  std::function<void(const std::string& type, nlohmann::ordered_json data)> event;  // thread-safe
};

class EgressService {
 public:
  // `interception` (may be null: nothing intercepted) must outlive the service.
  EgressService(EgressPlan& plan, comet::NetworkFds fds, EgressCallbacks callbacks, EgressLimits limits = {},
                const Interception* interception = nullptr);
  ~EgressService();
  EgressService(const EgressService&) = delete;
  EgressService& operator=(const EgressService&) = delete;

  // Starts the loop thread.
  Status start();
  // After the agent is gone: reads NFLOG one last time, closes every connection (emitting
  // egress_closed), joins the thread. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace soyaos::supervisor
