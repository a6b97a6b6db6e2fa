// The gateway's relay across connections (issue #16's connection set-up cuts): what one
// relayed connection leaves behind must never reach the next one. The gateway reuses the
// splice pipes of finished connections; a connection that ends (a reset) with bytes still in
// its pipe must not hand them to the next connection, which may go to another destination.
// And how a relayed connection ends in a reset: an upstream's bytes sent before its reset all
// reach the agent first (EgressUpstreamReset). The real soyaos binary, the probe pack and a
// scripted server on the host's loopback.
// ctest runs every test twice: as root and (prefix `rootless.`) as nobody.
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <atomic>
#include <charconv>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include "egress_fixture.h"

namespace soyaos::testing::egress {
namespace {

// A loopback TCP server whose i-th accepted connection plays roles[i]:
//   flood: sends 'X' until the connection fails, reads nothing;
//   hold:  reads nothing, sends nothing, until the peer goes away;
//   echo:  sends back what it reads until EOF, and records it;
//   burst_reset: sends `burst` bytes, waits until the peer's kernel acknowledged every one
//          (SIOCOUTQ 0: the gateway holds them all), then resets (SO_LINGER 0) and records
//          "sent=N unacked=M" (M: SIOCOUTQ when it gave up waiting, 0 normally);
//   burst_fin_reset: the same with its FIN after the bytes (shutdown SHUT_WR), acknowledged
//          before the reset too; records "sent=N unacked=M fin";
//   burst_fin_stall_reset: the same, its reset once what it receives (and never reads) has
//          not grown for 3 s (the peer filled the path and stopped).
// (Connections past the script echo.)
class ScriptedServer {
 public:
  enum class Role { flood, hold, echo, burst_reset, burst_fin_reset, burst_fin_stall_reset };

  explicit ScriptedServer(std::vector<Role> roles, size_t burst = 0) : roles_(std::move(roles)), burst_(burst) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "scripted server: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& t : conns_) t.join();
    if (fd_ >= 0) ::close(fd_);
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  [[nodiscard]] uint16_t port() const { return port_; }
  // What each echo connection received, in accept order ("" for the other roles; a
  // burst_reset connection's record).
  [[nodiscard]] std::vector<std::string> received() const {
    std::lock_guard lock(mu_);
    return received_;
  }
  [[nodiscard]] uint64_t flooded() const { return flooded_.load(); }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      size_t index = 0;
      {
        std::lock_guard lock(mu_);
        index = received_.size();
        received_.emplace_back();
      }
      const Role role = index < roles_.size() ? roles_[index] : Role::echo;
      conns_.emplace_back([this, c, index, role] { serve(c, index, role); });
    }
  }

  // Every role ends when the peer goes away or the server stops (at most ~10 s).
  void serve(int c, size_t index, Role role) {
    const timeval tv{0, 100'000};
    (void)::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    (void)::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string got;
    char buf[65536];
    const bool bursts =
        role == Role::burst_reset || role == Role::burst_fin_reset || role == Role::burst_fin_stall_reset;
    if (bursts) got = burst_then_reset(c, deadline, role != Role::burst_reset, role == Role::burst_fin_stall_reset);
    while (!bursts && !stop_ && std::chrono::steady_clock::now() < deadline) {
      if (role == Role::flood) {
        std::memset(buf, 'X', sizeof buf);
        const ssize_t n = ::send(c, buf, sizeof buf, MSG_NOSIGNAL);
        if (n > 0) flooded_ += static_cast<uint64_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) break;
      } else if (role == Role::hold) {
        pollfd p{c, POLLRDHUP, 0};
        if (::poll(&p, 1, 50) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) break;
      } else {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n == 0) break;
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          break;
        }
        got.append(buf, static_cast<size_t>(n));
        if (::send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      }
    }
    {
      std::lock_guard lock(mu_);
      received_[index] = got;
    }
    ::close(c);
  }

  std::string burst_then_reset(int c, std::chrono::steady_clock::time_point deadline, bool fin, bool stall) const {
    const std::string data(burst_, 'X');
    size_t sent = 0;
    while (sent < data.size() && !stop_ && std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::send(c, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
    }
    if (fin) (void)::shutdown(c, SHUT_WR);  // SIOCOUTQ counts the FIN until it is acknowledged
    int unacked = -1;
    while (!stop_ && std::chrono::steady_clock::now() < deadline) {
      if (::ioctl(c, SIOCOUTQ, &unacked) != 0 || unacked == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the ACKs' window updates settle
    int queued = 0;
    auto since = std::chrono::steady_clock::now();
    while (stall && !stop_ && std::chrono::steady_clock::now() < deadline) {
      int now = 0;
      if (::ioctl(c, SIOCINQ, &now) != 0) break;
      if (now != queued) {
        queued = now;
        since = std::chrono::steady_clock::now();
      } else if (queued > 0 && std::chrono::steady_clock::now() - since >= std::chrono::seconds(3)) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const linger reset{1, 0};
    (void)::setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);  // close() resets
    return "sent=" + std::to_string(sent) + " unacked=" + std::to_string(unacked) + (fin ? " fin" : "");
  }

  std::vector<Role> roles_;
  size_t burst_ = 0;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> flooded_{0};
  std::thread thread_;
  std::vector<std::thread> conns_;  // only the accept thread adds, the destructor joins after it
  mutable std::mutex mu_;
  std::vector<std::string> received_;
};

using Role = ScriptedServer::Role;

// Connection 1 ends (the agent resets it) while the pipe towards the agent holds the
// server's bytes; connection 2 ends while the pipe towards the server holds the agent's.
// Connections 3 and 4 get pipes the gateway reused: each sees exactly its own bytes, both
// ways. (A pipe handed on with bytes in it would put them in front of "ping": the agent or
// the server would see X or Y first.)
TEST_F(EgressTest, AConnectionsLeftoverBytesNeverReachTheNextConnection) {
  ScriptedServer server({Role::flood, Role::hold, Role::echo, Role::echo});
  set_moon({{"relay.test", "127.0.0.1"}});
  set_egress({{"relay.test", server.port(), "tcp"}});
  const std::string p = std::to_string(server.port());
  const auto start = std::chrono::steady_clock::now();
  auto run = probe({"netsteps", "abandon relay.test " + p + " read", "abandon relay.test " + p + " write",
                    "tcp_echo relay.test " + p + " ping", "tcp_echo relay.test " + p + " pong"});
  // The resets behind full pipes were seen at once: not at the 300 s idle timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_EQ(run.results.size(), 4u) << run.context();
  EXPECT_EQ(run.results[0], "ok 1") << run.context();
  EXPECT_EQ(run.results[1].rfind("ok ", 0), 0u) << run.context();
  EXPECT_NE(run.results[1], "ok 0") << run.context();
  EXPECT_EQ(run.results[2], "ok ping") << run.context();
  EXPECT_EQ(run.results[3], "ok pong") << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  // The server's side: exactly the agent's bytes on the two later connections.
  const auto got = server.received();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[2], "ping");
  EXPECT_EQ(got[3], "pong");
  // Connection 1 really ended with bytes in flight towards the agent: far more was sent
  // than reached it.
  auto closed = run.of_type("egress_closed");
  ASSERT_EQ(closed.size(), 4u) << run.context();
  EXPECT_EQ(closed[0]["data"]["reason"], "reset") << closed[0].dump();
  EXPECT_LT(closed[0]["data"].value("bytes_in", uint64_t{0}) + 65536, server.flooded()) << closed[0].dump();
  EXPECT_EQ(closed[1]["data"]["reason"], "reset") << closed[1].dump();
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(closed[i]["data"]["reason"], "closed") << closed[i].dump();
    EXPECT_EQ(closed[i]["data"]["bytes_out"], 4) << closed[i].dump();
    EXPECT_EQ(closed[i]["data"]["bytes_in"], 4) << closed[i].dump();
  }
}

// egress_opened is emitted after the connection's first relay step (so the agent's first
// bytes leave before it is built and written): still exactly once per connection that was
// connected upstream, and before that connection's egress_closed, also when that first step
// already ended the connection (the agent reset it right after its first byte).
TEST_F(EgressTest, EachConnectionsEgressOpenedComesOnceBeforeItsEgressClosed) {
  ScriptedServer server({});  // every connection echoes
  set_moon({{"relay.test", "127.0.0.1"}});
  set_egress({{"relay.test", server.port(), "tcp"}});
  const std::string p = std::to_string(server.port());
  auto run = probe({"netsteps", "reset_burst relay.test " + p + " 100", "tcp_echo relay.test " + p + " after"});
  ASSERT_EQ(run.results.size(), 2u) << run.context();
  EXPECT_EQ(run.results[0], "ok 100") << run.context();
  EXPECT_EQ(run.results[1], "ok after") << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  std::map<uint64_t, size_t> opened_at, closed_at;
  for (size_t i = 0; i < run.events.size(); ++i) {
    const std::string type = run.events[i].value("type", "");
    if (type != "egress_opened" && type != "egress_closed") continue;
    const uint64_t id = run.events[i]["data"].value("connection", uint64_t{0});
    auto& at = type == "egress_opened" ? opened_at : closed_at;
    EXPECT_EQ(at.count(id), 0u) << type << " twice for connection " << id << "\n" << run.context();
    at[id] = i;
  }
  // Every connection the gateway connected upstream was opened, then closed.
  EXPECT_GE(opened_at.size(), 2u) << run.context();
  EXPECT_EQ(opened_at.size(), closed_at.size()) << run.context();
  for (const auto& [id, i] : closed_at) {
    ASSERT_EQ(opened_at.count(id), 1u) << "egress_closed without egress_opened, connection " << id;
    EXPECT_LT(opened_at[id], i) << "connection " << id;
  }
}

// The count in a probe result "<prefix>N<suffix>" (e.g. "ok held=4096 fin=acked"): N in
// decimal, nothing else between prefix and suffix; nullopt when the result is not of that form.
std::optional<uint64_t> parse_count(std::string_view result, std::string_view prefix, std::string_view suffix) {
  if (result.size() <= prefix.size() + suffix.size() || !result.starts_with(prefix) || !result.ends_with(suffix)) {
    return std::nullopt;
  }
  const std::string_view digits = result.substr(prefix.size(), result.size() - prefix.size() - suffix.size());
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

// A server sends `bytes`, sees every one acknowledged (the gateway holds them: its pipe, its
// socket's receive queue), then resets. Three connections: the agent reads at once; it waits
// 2 s with the pipe towards it full before its first read; it reads slowly (5 ms between
// reads, so that the reset of a larger burst finds the pipe full too). Each time it receives
// every byte, then ECONNRESET, as over a direct connection (Linux keeps a reset socket's
// received bytes readable). Before, an upstream's reset behind a full pipe reset the agent at
// once: 4,368 of 262,144 bytes. egress_closed counts what was delivered, reason "reset". The
// gateway waits without spinning (EPOLLHUP is reported forever on a reset socket): the
// supervisor's CPU time over the whole run stays far below the 2 s the pipe waited.
class EgressUpstreamReset : public EgressTest {
 protected:
  // The closing checks of a run whose `connections` connections each got `burst` bytes from a
  // server that reset once the gateway had acknowledged them all (its FIN too when `fin`): the
  // run exited 0 with no violation, the server recorded nothing left unacknowledged, and each
  // connection's egress_closed says "reset" with every byte delivered (bytes_in). bytes_out is
  // the caller's: what the agent sent differs by test. Call it under ASSERT_NO_FATAL_FAILURE.
  static void expect_all_bytes_in_then_reset(const ProbeRun& run, const ScriptedServer& server, size_t connections,
                                             size_t burst, bool fin) {
    EXPECT_EQ(run.output.exit_code, 0) << run.context();
    EXPECT_TRUE(run.violations().empty()) << run.context();
    // The server's reset came after the gateway had acknowledged every byte: all of them were
    // the gateway's to deliver.
    const auto got = server.received();
    ASSERT_EQ(got.size(), connections);
    const std::string record = "sent=" + std::to_string(burst) + " unacked=0" + (fin ? " fin" : "");
    for (const auto& g : got) EXPECT_EQ(g, record);
    const auto closed = run.of_type("egress_closed");
    ASSERT_EQ(closed.size(), connections) << run.context();
    for (const auto& c : closed) {
      EXPECT_EQ(c["data"]["reason"], "reset") << c.dump();
      EXPECT_EQ(c["data"].value("bytes_in", uint64_t{0}), burst) << c.dump();
    }
  }

  void expect_all_bytes_then_reset(size_t bytes) {
    ScriptedServer server({Role::burst_reset, Role::burst_reset, Role::burst_reset}, bytes);
    set_moon({{"relay.test", "127.0.0.1"}});
    set_egress({{"relay.test", server.port(), "tcp"}});
    const std::string p = std::to_string(server.port());
    const auto start = std::chrono::steady_clock::now();
    auto run = probe({"netsteps", "read_reset relay.test " + p + " 0", "read_reset relay.test " + p + " 2",
                      "read_reset relay.test " + p + " 0 0.005"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // idle timeout: 300 s
    const std::string n = std::to_string(bytes);
    ASSERT_EQ(run.results.size(), 3u) << run.context();
    for (const auto& r : run.results) EXPECT_EQ(r, "ok " + n + " reset") << run.context();
    ASSERT_NO_FATAL_FAILURE(expect_all_bytes_in_then_reset(run, server, 3, bytes, /*fin=*/false));
    for (const auto& c : run.of_type("egress_closed")) {
      EXPECT_EQ(c["data"].value("bytes_out", uint64_t{1}), 0u) << c.dump();
    }
    long cpu_ms = -1;
    for (const auto& e : run.events) {
      if (e.value("type", "") == "run_finished") cpu_ms = e["data"].value("supervisor_cpu_ms", -1L);
    }
    EXPECT_GE(cpu_ms, 0) << run.context();
    EXPECT_LT(cpu_ms, 1000) << "supervisor CPU over a run with a 2 s wait: " << cpu_ms << " ms";
    RecordProperty("supervisor_cpu_ms", std::to_string(cpu_ms));
  }
};

TEST_F(EgressUpstreamReset, TheAgentGetsAll4KiBThenTheReset) { expect_all_bytes_then_reset(4096); }
// More than the agent's socket and the pipe take while the agent waits: the reset finds the
// pipe full and the rest in the gateway's receive queue.
TEST_F(EgressUpstreamReset, TheAgentGetsAll256KiBThenTheReset) { expect_all_bytes_then_reset(256 * 1024); }
TEST_F(EgressUpstreamReset, TheAgentGetsAll2MiBThenTheReset) { expect_all_bytes_then_reset(2 * 1024 * 1024); }

// A drained connection whose agent hangs up and then resets (review 2). The server sends 8 KiB,
// more than the agent's small receive buffer takes, and its FIN: every byte is in the gateway's
// socket towards the agent, part of it unacknowledged (the agent does not read), and that
// socket's write side is shut. The server resets; the gateway waits for the agent to take the
// rest (reset_after_drain). The agent shuts its write side — the gateway's socket has both
// directions shut (EPOLLHUP) and leaves the epoll set — then closes with the bytes unread (a
// reset) and stays 3 s. The agent's reset produces no event, and its socket's unacknowledged
// count stays > 0 forever: the gateway must see from its state (TCP_CLOSE) at the next tick
// that nothing is left to wait for. Before, the connection waited for the idle timeout (300 s)
// and ended with the run ("run ended").
TEST_F(EgressUpstreamReset, ADrainedConnectionWhoseAgentHungUpThenResetIsResetNotLeftToTheIdleTimeout) {
  constexpr size_t kBurst = 8192;
  ScriptedServer server({Role::burst_fin_reset}, kBurst);
  set_moon({{"relay.test", "127.0.0.1"}});
  set_egress({{"relay.test", server.port(), "tcp"}});
  const std::string p = std::to_string(server.port());
  const auto start = std::chrono::steady_clock::now();
  // 2 s: the server's reset (sent as soon as its FIN is acknowledged) reaches the gateway
  // before the agent's FIN, which would otherwise end the connection "closed".
  auto run = probe({"netsteps", "hangup_then_reset relay.test " + p + " 2"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));  // idle timeout: 300 s
  ASSERT_EQ(run.results.size(), 1u) << run.context();
  // The agent held part of the server's bytes (the gateway's socket the rest, unacknowledged)
  // and its FIN reached the gateway.
  const auto held = parse_count(run.results[0], "ok held=", " fin=acked");
  ASSERT_TRUE(held.has_value()) << run.context();
  EXPECT_GT(*held, 0u) << run.context();
  EXPECT_LT(*held, kBurst) << run.context();
  RecordProperty("agent_held_bytes", std::to_string(*held));
  ASSERT_NO_FATAL_FAILURE(expect_all_bytes_in_then_reset(run, server, 1, kBurst, /*fin=*/true));
  const auto closed = run.of_type("egress_closed");  // exactly one, checked above
  EXPECT_EQ(closed[0]["data"].value("bytes_out", uint64_t{1}), 0u) << closed[0].dump();
}

// The same in the review's order: the agent hangs up before the upstream resets. The agent
// fills the path towards the server (which reads nothing) until the gateway's socket stops
// taking more, then shuts its write side: its FIN reaches the gateway (both directions of the
// gateway's socket towards it shut: EPOLLHUP, out of the epoll set), which cannot end the
// connection "closed" (the agent's bytes still wait for the server). The server resets once
// nothing more reaches it; then the agent resets, with the server's bytes unread. Before,
// "run ended" (measured with 84f28be's egress_conn.cc).
TEST_F(EgressUpstreamReset, ADrainedConnectionWhoseAgentHungUpBeforeTheUpstreamResetIsResetWhenTheAgentResets) {
  constexpr size_t kBurst = 8192;
  ScriptedServer server({Role::burst_fin_stall_reset}, kBurst);
  set_moon({{"relay.test", "127.0.0.1"}});
  set_egress({{"relay.test", server.port(), "tcp"}});
  const std::string p = std::to_string(server.port());
  const auto start = std::chrono::steady_clock::now();
  auto run = probe({"netsteps", "fill_then_hangup relay.test " + p});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));  // idle timeout: 300 s
  ASSERT_EQ(run.results.size(), 1u) << run.context();
  const auto wrote = parse_count(run.results[0], "ok wrote=", " fin=acked");
  ASSERT_TRUE(wrote.has_value()) << run.context();
  RecordProperty("agent_wrote_bytes", std::to_string(*wrote));
  ASSERT_NO_FATAL_FAILURE(expect_all_bytes_in_then_reset(run, server, 1, kBurst, /*fin=*/true));
  const auto closed = run.of_type("egress_closed");  // exactly one, checked above
  // Part of what the agent wrote is still on its way (the gateway's pipe and sockets).
  EXPECT_LT(closed[0]["data"].value("bytes_out", *wrote), *wrote) << closed[0].dump();
}

}  // namespace
}  // namespace soyaos::testing::egress
