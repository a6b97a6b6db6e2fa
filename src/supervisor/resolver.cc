// Upstream name resolution for the egress gateway (SPEC.md C6, C6a). See resolver.h.
//
// With a configured dns.upstream server, the A and AAAA queries go out together on one
// connected UDP socket (the kernel then only delivers datagrams from that server), each
// with a fresh random id; replies that do not answer one of our questions are ignored
// (late or spoofed datagrams), a reply that is ours but unreadable fails with EIO. A
// truncated reply is asked again over TCP. Each round waits 2 s; a question still
// unanswered is sent once more, then the resolution fails with ETIMEDOUT unless the
// other question produced addresses.
#include "supervisor/resolver.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "common/unique_fd.h"
#include "network/dns_answer.h"
#include "network/dns_message.h"

namespace soyaos::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using network::DnsResponse;
using network::DnsResponseStatus;

constexpr auto kAttemptTimeout = std::chrono::milliseconds(2000);
constexpr int kAttempts = 2;  // the first try and one retry

// Milliseconds left until `deadline` (0 when past), for poll().
int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 60'000));
}

Result<uint16_t> random_id() {
  uint16_t id = 0;
  // 2 bytes from the urandom pool never block and are never short once it is ready.
  if (::getrandom(&id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) return errno_error("getrandom");
  return id;
}

struct Server {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;  // "192.0.2.53:53", "[2001:db8::53]:53"
};

Server server_of(const policy::DnsUpstream& up) {
  Server s;
  if (up.server.v6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&s.addr);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(up.port);
    std::memcpy(&sa->sin6_addr, up.server.bytes.data(), 16);
    s.len = sizeof(sockaddr_in6);
    s.text = "[" + policy::to_string(up.server) + "]:" + std::to_string(up.port);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&s.addr);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(up.port);
    std::memcpy(&sa->sin_addr, up.server.bytes.data(), 4);
    s.len = sizeof(sockaddr_in);
    s.text = policy::to_string(up.server) + ":" + std::to_string(up.port);
  }
  return s;
}

// Waits for `events` on `fd` until `deadline`: true when ready, false on timeout.
Result<bool> wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return errno_error("poll");
  }
}

// One query over TCP (after a truncated UDP reply): connect, send the framed query, read
// one framed reply, all before `deadline`.
Result<DnsResponse> ask_tcp(const Server& server, const std::string& name, std::span<const uint8_t> qname_wire,
                            uint16_t qtype, Clock::time_point deadline) {
  auto id = random_id();
  if (!id) return id.error();
  auto query = network::dns_build_query(*id, name, qtype);
  if (!query) return query.error();
  auto framed = network::dns_tcp_frame(*query);
  if (!framed) return framed.error();

  UniqueFd fd{::socket(server.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (!fd) return errno_error("socket for DNS over TCP to " + server.text);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&server.addr), server.len) != 0 && errno != EINPROGRESS) {
    return errno_error("connect to DNS server " + server.text + " over TCP");
  }
  auto timed_out = [&] { return make_error("DNS server " + server.text + " over TCP: no reply for " + name, ETIMEDOUT); };
  size_t sent = 0;
  while (sent < framed->size()) {
    auto ready = wait_for(fd.get(), POLLOUT, deadline);
    if (!ready) return ready.error();
    if (!*ready) return timed_out();
    const ssize_t n = ::send(fd.get(), framed->data() + sent, framed->size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_error("send to DNS server " + server.text + " over TCP");
    }
    sent += static_cast<size_t>(n);
  }
  std::vector<uint8_t> buf;
  buf.reserve(4096);
  for (;;) {
    const network::DnsTcpFrame frame = network::parse_dns_tcp_frame(buf);
    if (frame.status == network::ParseStatus::complete) {
      DnsResponse r = network::parse_dns_response(frame.message, *id, qname_wire, qtype);
      if (r.status != DnsResponseStatus::ok) {
        // Our own connection: an answer to anything else is as broken as garbage.
        return make_error("DNS server " + server.text + " over TCP, answering " + name + ": " + r.error, EIO);
      }
      return r;
    }
    if (frame.status == network::ParseStatus::invalid) {
      return make_error("DNS server " + server.text + " over TCP sent an invalid frame for " + name, EIO);
    }
    auto ready = wait_for(fd.get(), POLLIN, deadline);
    if (!ready) return ready.error();
    if (!*ready) return timed_out();
    uint8_t chunk[4096];
    const ssize_t n = ::recv(fd.get(), chunk, sizeof chunk, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_error("receive from DNS server " + server.text + " over TCP");
    }
    if (n == 0) return make_error("DNS server " + server.text + " closed the TCP connection before answering " + name, EIO);
    buf.insert(buf.end(), chunk, chunk + n);
  }
}

struct Question {
  uint16_t qtype = 0;
  uint16_t id = 0;
  std::optional<DnsResponse> answer;
};

std::string rcode_text(uint8_t rcode) {
  if (rcode <= 5) return std::string(network::to_string(static_cast<network::Rcode>(rcode)));
  return "RCODE " + std::to_string(rcode);
}

Result<std::vector<policy::IpAddress>> ask_upstream(const policy::DnsUpstream& upstream, const std::string& name) {
  const Server server = server_of(upstream);
  auto qname = network::dns_name_wire(name);
  if (!qname) return make_error("resolve " + name + ": " + qname.error().message, EINVAL);

  UniqueFd fd{::socket(server.addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (!fd) return errno_error("socket for DNS to " + server.text);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&server.addr), server.len) != 0) {
    return errno_error("connect to DNS server " + server.text);
  }

  std::vector<Question> questions{{network::qtype::a}, {network::qtype::aaaa}};
  std::vector<uint8_t> buf(network::kDnsMaxMessage);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    for (Question& q : questions) {
      if (q.answer) continue;
      auto id = random_id();
      if (!id) return id.error();
      q.id = *id;
      auto query = network::dns_build_query(q.id, name, q.qtype);
      if (!query) return query.error();
      if (::send(fd.get(), query->data(), query->size(), 0) < 0) {
        return errno_error("send a query for " + name + " to DNS server " + server.text);
      }
    }
    const Clock::time_point deadline = Clock::now() + kAttemptTimeout;
    while (std::any_of(questions.begin(), questions.end(), [](const Question& q) { return !q.answer; })) {
      auto ready = wait_for(fd.get(), POLLIN, deadline);
      if (!ready) return ready.error();
      if (!*ready) break;
      const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        // ECONNREFUSED: an ICMP port unreachable came back, nothing listens there.
        return errno_error("receive from DNS server " + server.text + " for " + name);
      }
      const std::span<const uint8_t> message(buf.data(), static_cast<size_t>(n));
      for (Question& q : questions) {
        if (q.answer) continue;
        DnsResponse r = network::parse_dns_response(message, q.id, *qname, q.qtype);
        if (r.status == DnsResponseStatus::not_ours) continue;
        if (r.status == DnsResponseStatus::malformed) {
          return make_error("DNS server " + server.text + " sent a malformed answer for " + name + ": " + r.error, EIO);
        }
        if (r.truncated) {
          auto full = ask_tcp(server, name, *qname, q.qtype, Clock::now() + kAttemptTimeout);
          if (!full) return full.error();
          r = std::move(*full);
        }
        q.answer = std::move(r);
        break;
      }
    }
  }

  std::vector<policy::IpAddress> out;
  bool nxdomain = false;
  std::string failure;
  for (const Question& q : questions) {
    if (!q.answer) continue;
    const DnsResponse& r = *q.answer;
    if (r.rcode == 3) {
      nxdomain = true;
    } else if (r.rcode != 0) {
      failure = rcode_text(r.rcode);
    } else {
      for (const auto& a : r.a) {
        policy::IpAddress ip;
        std::copy(a.begin(), a.end(), ip.bytes.begin());
        out.push_back(ip);
      }
      for (const auto& a : r.aaaa) {
        policy::IpAddress ip;
        ip.v6 = true;
        ip.bytes = a;
        out.push_back(ip);
      }
    }
  }
  // NXDOMAIN for one type and addresses for the other happens with broken servers: the
  // name does not exist as far as we are concerned.
  if (nxdomain) return make_error("resolve " + name + ": no such name (NXDOMAIN from " + server.text + ")", ENOENT);
  if (!out.empty()) return out;
  const bool unanswered = std::any_of(questions.begin(), questions.end(), [](const Question& q) { return !q.answer; });
  if (!failure.empty()) {
    return make_error("resolve " + name + ": DNS server " + server.text + " answered " + failure, EIO);
  }
  if (unanswered) {
    return make_error("resolve " + name + ": DNS server " + server.text + " did not answer", ETIMEDOUT);
  }
  return make_error("resolve " + name + ": no address (A or AAAA) from " + server.text, ENOENT);
}

Result<std::vector<policy::IpAddress>> ask_system(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    const int saved = errno;
    const std::string what = "resolve " + name + ": " + ::gai_strerror(rc);
    switch (rc) {
      case EAI_NONAME:
#ifdef EAI_NODATA
      case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
      case EAI_ADDRFAMILY:
#endif
        return make_error(what, ENOENT);
      case EAI_AGAIN: return make_error(what, ETIMEDOUT);
      case EAI_MEMORY: return make_error(what, ENOMEM);
      case EAI_SYSTEM: return make_error(what, saved != 0 ? saved : EIO);
      default: return make_error(what, EIO);
    }
  }
  std::vector<policy::IpAddress> out;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    policy::IpAddress ip;
    if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(sockaddr_in)) {
      const auto* sa = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      std::memcpy(ip.bytes.data(), &sa->sin_addr, 4);
    } else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof(sockaddr_in6)) {
      const auto* sa = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      std::memcpy(ip.bytes.data(), &sa->sin6_addr, 16);
      ip.v6 = true;
    } else {
      continue;
    }
    out.push_back(ip);
  }
  ::freeaddrinfo(res);
  if (out.empty()) return make_error("resolve " + name + ": no address", ENOENT);
  return out;
}

// IPv4 first, duplicates dropped, the resolver's order otherwise.
std::vector<ResolvedAddress> order(const std::vector<policy::IpAddress>& addrs, bool from_hosts_map) {
  std::vector<ResolvedAddress> out;
  for (const bool v6 : {false, true}) {
    for (const policy::IpAddress& a : addrs) {
      if (a.v6 != v6) continue;
      if (std::any_of(out.begin(), out.end(), [&](const ResolvedAddress& r) { return r.addr == a; })) continue;
      out.push_back(ResolvedAddress{a, from_hosts_map});
    }
  }
  return out;
}

}  // namespace

Result<std::vector<ResolvedAddress>> resolve_host(const policy::OperatorNetwork& network, const std::string& name) {
  if (const auto it = network.dns_hosts.find(name); it != network.dns_hosts.end()) {
    // Final, like /etc/hosts: the operator said where this name is.
    if (it->second.empty()) return make_error("resolve " + name + ": dns.hosts lists no address", ENOENT);
    return order(it->second, true);
  }
  auto addrs = network.dns_upstream ? ask_upstream(*network.dns_upstream, name) : ask_system(name);
  if (!addrs) return addrs.error();
  return order(*addrs, false);
}

}  // namespace soyaos::supervisor
