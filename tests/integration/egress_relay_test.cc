// The gateway's relay across connections (issue #16's connection set-up cuts): what one
// relayed connection leaves behind must never reach the next one. The gateway reuses the
// splice pipes of finished connections; a connection that ends (a reset) with bytes still in
// its pipe must not hand them to the next connection, which may go to another destination.
// The real soyaos binary, the probe pack and a scripted server on the host's loopback.
// ctest runs every test twice: as root and (prefix `rootless.`) as nobody.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <map>
#include <mutex>

#include "egress_fixture.h"

namespace soyaos::testing::egress {
namespace {

// A loopback TCP server whose i-th accepted connection plays roles[i]:
//   flood: sends 'X' until the connection fails, reads nothing;
//   hold:  reads nothing, sends nothing, until the peer goes away;
//   echo:  sends back what it reads until EOF, and records it.
// (Connections past the script echo.)
class ScriptedServer {
 public:
  enum class Role { flood, hold, echo };

  explicit ScriptedServer(std::vector<Role> roles) : roles_(std::move(roles)) {
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
  // What each echo connection received, in accept order ("" for the other roles).
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
    while (!stop_ && std::chrono::steady_clock::now() < deadline) {
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

  std::vector<Role> roles_;
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
  auto run = probe({"netsteps", "abandon relay.test " + p + " read", "abandon relay.test " + p + " write",
                    "tcp_echo relay.test " + p + " ping", "tcp_echo relay.test " + p + " pong"});
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

}  // namespace
}  // namespace soyaos::testing::egress
