// run_http_exchange (supervisor/http_exchange.h) over real socketpairs: the test plays the
// agent on one pair and the upstream server on the other, the exchange runs on its own thread
// with FdStreams, as the gateway runs it. Keep-alive and pipelined requests, 100-continue,
// SSE timing, a websocket relay, the placeholder swap and every refusal's 403.
#include "supervisor/http_exchange.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "network/http_head.h"
#include "supervisor/http_gate.h"

namespace soyaos::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << "send: " << errno;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads into `buf` until `done(buf)` or EOF or `ms` pass; true when done.
template <typename Pred>
bool recv_until(int fd, std::string& buf, Pred done, int ms = 3000) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (!done(buf)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char tmp[8192];
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return done(buf);
    buf.append(tmp, static_cast<size_t>(n));
  }
  return true;
}

bool contains_n(const std::string& s, std::string_view what, size_t n) {
  size_t count = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++count;
  return count >= n;
}

// Reads until `what` appears `n` times.
std::string recv_count(int fd, std::string_view what, size_t n = 1, int ms = 3000) {
  std::string buf;
  recv_until(fd, buf, [&](const std::string& b) { return contains_n(b, what, n); }, ms);
  return buf;
}

// Everything until the peer's EOF (or `ms`).
std::string recv_all(int fd, int ms = 2000) {
  std::string buf;
  recv_until(fd, buf, [](const std::string&) { return false; }, ms);
  return buf;
}

// True when nothing arrives for `ms` (and the peer did not close either).
bool silent(int fd, int ms = 200) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 0;
}

bool at_eof(int fd, int ms = 3000) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return false;
  char tmp[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN;
  }
}

manifest::HttpRule rule(std::string method, std::string path, int i) {
  return {std::move(method), std::move(path), "capabilities.egress[0].http[" + std::to_string(i) + "]", {}};
}

HttpExchangePolicy api_policy() {
  HttpExchangePolicy p;
  p.host = "api.example.com";
  p.port = 443;
  p.manifest_entry = "capabilities.egress[0]";
  p.rules = {rule("GET", "/v1/models/**", 0), rule("POST", "/v1/messages", 1), rule("GET", "/ws", 2)};
  return p;
}

constexpr const char* kBound = "soyaos-placeholder-0123456789abcdef0123456789abcdef";
constexpr const char* kUnbound = "soyaos-placeholder-fedcba9876543210fedcba9876543210";

// An exchange on its own thread between two socketpairs.
class Rig {
 public:
  explicit Rig(HttpExchangePolicy policy) : policy_(std::move(policy)), stop_(::eventfd(0, EFD_CLOEXEC)) {
    std::array<int, 2> a{-1, -1}, u{-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a.data()), 0);
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u.data()), 0);
    agent = UniqueFd(a[0]);
    server = UniqueFd(u[0]);
    set_nonblocking(a[1]);
    set_nonblocking(u[1]);
    UniqueFd agent_end(a[1]), upstream_end(u[1]);
    thread_ = std::thread([this, ae = std::move(agent_end), ue = std::move(upstream_end)]() mutable {
      FdStream as(std::move(ae));
      FdStream us(std::move(ue));
      HttpExchangeCallbacks cb;
      cb.on_request = [this](const HttpRequestRecord& r) {
        const std::lock_guard lock(mu_);
        records_.push_back(r);
      };
      cb.on_refusal = [this](const HttpRefusal& r) {
        const std::lock_guard lock(mu_);
        refusals_.push_back(r);
      };
      cb.on_secret_echo = [this](const HttpRefusal& r) {
        const std::lock_guard lock(mu_);
        echoes_.push_back(r);
      };
      run_http_exchange(as, us, policy_, cb, stop_.get());
      done_ = true;
    });
  }
  ~Rig() {
    agent.reset();
    server.reset();
    const uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    thread_.join();
  }
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  bool wait_done(int ms = 3000) const {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (!done_ && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done_;
  }
  std::vector<HttpRequestRecord> records() {
    const std::lock_guard lock(mu_);
    return records_;
  }
  std::vector<HttpRefusal> refusals() {
    const std::lock_guard lock(mu_);
    return refusals_;
  }
  std::vector<HttpRefusal> echoes() {
    const std::lock_guard lock(mu_);
    return echoes_;
  }
  void stop() const {
    const uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
  }

  UniqueFd agent, server;  // the test's ends: it is the agent on one, the upstream on the other

 private:
  static void set_nonblocking(int fd) {
    const int fl = ::fcntl(fd, F_GETFL);
    ASSERT_EQ(::fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
  }
  HttpExchangePolicy policy_;
  UniqueFd stop_;
  std::mutex mu_;
  std::vector<HttpRequestRecord> records_;
  std::vector<HttpRefusal> refusals_;
  std::vector<HttpRefusal> echoes_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

constexpr const char* kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

TEST(HttpExchange, AllowedRequestGoesUpNormalisedAndIsRecorded) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "GET /v1//models/%61?limit=2&key=x HTTP/1.1\r\nHost: api.example.com\r\nAccept:  */* \r\n\r\n");
  const std::string head = recv_count(rig.server.get(), "\r\n\r\n");
  EXPECT_EQ(head, "GET /v1/models/a?limit=2&key=x HTTP/1.1\r\nHost: api.example.com\r\nAccept: */*\r\n\r\n");
  send_all(rig.server.get(), kOk);
  EXPECT_EQ(recv_count(rig.agent.get(), "ok"), kOk);
  rig.agent.reset();  // the agent is done: the exchange ends
  ASSERT_TRUE(rig.wait_done());
  const auto records = rig.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].method, "GET");
  EXPECT_EQ(records[0].path, "/v1/models/a");  // normalised, never the query
  EXPECT_EQ(records[0].status, 200);
  EXPECT_GT(records[0].bytes_up, 50u);
  EXPECT_EQ(records[0].bytes_down, std::string(kOk).size());
  EXPECT_TRUE(rig.refusals().empty());
}

void expect_denied(const std::string& answer, std::string_view rule) {
  EXPECT_EQ(answer.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("x-soyaos-denied: " + std::string(rule) + "\r\n"), std::string::npos) << answer;
  EXPECT_NE(answer.find("content-type: application/json\r\n"), std::string::npos) << answer;
  EXPECT_NE(answer.find("connection: close\r\n"), std::string::npos) << answer;
  EXPECT_NE(answer.find("{\"error\":\"soyaos_denied\",\"rule\":\"" + std::string(rule) + "\",\"reason\":"), std::string::npos)
      << answer;
}

TEST(HttpExchange, KeepAliveSecondRequestIsCheckedAndRefused) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), kOk);
  EXPECT_EQ(recv_count(rig.agent.get(), "ok"), kOk);
  // Same connection, a request no rule allows: answered by the gateway, never sent up.
  send_all(rig.agent.get(), "DELETE /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  expect_denied(recv_all(rig.agent.get()), "capabilities.egress[0].http[0]");
  EXPECT_TRUE(silent(rig.server.get()));
  rig.agent.reset();
  ASSERT_TRUE(rig.wait_done());
  const auto refusals = rig.refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0].method, "DELETE");
  EXPECT_EQ(refusals[0].path, "/v1/models/x");
  EXPECT_EQ(refusals[0].rule, "capabilities.egress[0].http[0]");
  EXPECT_EQ(rig.records().size(), 1u);
}

TEST(HttpExchange, PipelinedRequestsAreEachCheckedAndAnsweredInOrder) {
  Rig rig(api_policy());
  send_all(rig.agent.get(),
           "GET /v1/models/a HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
           "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 4\r\n\r\nbody"
           "GET /v1/../admin HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  const std::string up = recv_count(rig.server.get(), "body");
  EXPECT_EQ(up,
            "GET /v1/models/a HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
            "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 4\r\n\r\nbody");
  EXPECT_TRUE(silent(rig.server.get()));  // the third never goes up
  send_all(rig.server.get(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nA");
  send_all(rig.server.get(), "HTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nB");
  const std::string answer = recv_all(rig.agent.get());
  rig.agent.reset();
  const size_t a = answer.find("\r\n\r\nA"), b = answer.find("\r\n\r\nB"), denied = answer.find("403 Forbidden");
  ASSERT_NE(a, std::string::npos) << answer;
  ASSERT_NE(b, std::string::npos) << answer;
  ASSERT_NE(denied, std::string::npos) << answer;
  EXPECT_LT(a, b);
  EXPECT_LT(b, denied);  // the 403 waits for the answers the upstream owed
  EXPECT_TRUE(rig.wait_done());
  ASSERT_EQ(rig.records().size(), 2u);
  EXPECT_EQ(rig.records()[1].status, 201);
  ASSERT_EQ(rig.refusals().size(), 1u);
  EXPECT_EQ(rig.refusals()[0].path, "/admin");
}

TEST(HttpExchange, ExpectContinueWaitsForTheUpstreamsHundred) {
  Rig rig(api_policy());
  send_all(rig.agent.get(),
           "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(recv_count(rig.agent.get(), "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  send_all(rig.agent.get(), "hello");
  EXPECT_EQ(recv_count(rig.server.get(), "hello"), "hello");
  send_all(rig.server.get(), kOk);
  EXPECT_EQ(recv_count(rig.agent.get(), "ok"), kOk);
  rig.agent.reset();
  ASSERT_TRUE(rig.wait_done());
  ASSERT_EQ(rig.records().size(), 1u);
  EXPECT_EQ(rig.records()[0].status, 200);
}

TEST(HttpExchange, ServerSentEventsArriveAsTheyAreSent) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_NE(recv_count(rig.server.get(), "{}"), "");
  // The server streams three events 200 ms apart without waiting for anyone.
  std::thread server([fd = rig.server.get()] {
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const std::string event = "data: " + std::to_string(i) + "\n\n";
      std::array<char, 16> size{};
      std::snprintf(size.data(), size.size(), "%zx\r\n", event.size());
      send_all(fd, std::string(size.data()) + event + "\r\n");
    }
    send_all(fd, "0\r\n\r\n");
  });
  std::vector<Clock::time_point> arrivals;
  std::string seen;
  for (int i = 0; i < 3; ++i) {
    const std::string event = "data: " + std::to_string(i) + "\n\n";
    EXPECT_TRUE(recv_until(rig.agent.get(), seen, [&](const std::string& b) { return b.find(event) != std::string::npos; }));
    arrivals.push_back(Clock::now());
  }
  EXPECT_TRUE(recv_until(rig.agent.get(), seen, [](const std::string& b) { return b.find("\r\n0\r\n\r\n") != std::string::npos; }));
  server.join();
  ASSERT_EQ(arrivals.size(), 3u);
  // Held back anywhere, the events would arrive together; forwarded at once, they keep their spacing.
  EXPECT_GE(arrivals[1] - arrivals[0], std::chrono::milliseconds(100));
  EXPECT_GE(arrivals[2] - arrivals[1], std::chrono::milliseconds(100));
  rig.agent.reset();
  ASSERT_TRUE(rig.wait_done());
  ASSERT_EQ(rig.records().size(), 1u);
  EXPECT_GE(rig.records()[0].duration_ms, 300u);
}

TEST(HttpExchange, WebsocketUpgradeBecomesARawRelayWithHalfClose) {
  Rig rig(api_policy());
  send_all(rig.agent.get(),
           "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x02hi");
  EXPECT_NE(recv_count(rig.agent.get(), "\x81\x02hi"), "");
  // Frames are not HTTP: they pass as they are, both ways (this one would be a refused request).
  send_all(rig.agent.get(), "DELETE /admin HTTP/1.1\r\n\r\n");
  EXPECT_EQ(recv_count(rig.server.get(), "\r\n\r\n"), "DELETE /admin HTTP/1.1\r\n\r\n");
  ASSERT_EQ(::shutdown(rig.agent.get(), SHUT_WR), 0);
  EXPECT_TRUE(at_eof(rig.server.get()));
  send_all(rig.server.get(), "bye");  // the other direction still flows
  EXPECT_EQ(recv_count(rig.agent.get(), "bye"), "bye");
  rig.server.reset();
  EXPECT_TRUE(rig.wait_done());
  ASSERT_EQ(rig.records().size(), 1u);
  EXPECT_EQ(rig.records()[0].status, 101);
  EXPECT_TRUE(rig.refusals().empty());
}

TEST(HttpExchange, UpgradeRefusedByTheServerStaysHttp) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                            "GET /admin HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  const std::string answer = recv_all(rig.agent.get());
  rig.agent.reset();
  EXPECT_NE(answer.find("400 Bad Request"), std::string::npos);
  EXPECT_NE(answer.find("403 Forbidden"), std::string::npos) << answer;  // the held request was still checked
  EXPECT_TRUE(rig.wait_done());
}

TEST(HttpExchange, PlaceholderIsSwappedOnlyUpstreamAndOnlyWhereBound) {
  HttpExchangePolicy p = api_policy();
  p.secrets = {{kBound, "sk-real-value", true}, {kUnbound, "other-value", false}};
  Rig rig(p);
  const std::string body = std::string("{\"echo\":\"") + kBound + "\"}";
  send_all(rig.agent.get(), "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer " +
                                std::string(kBound) + "\r\nX-Api-Key: " + kBound + "," + kBound +
                                "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string up = recv_count(rig.server.get(), "}");
  EXPECT_NE(up.find("Authorization: Bearer sk-real-value\r\n"), std::string::npos) << up;
  EXPECT_NE(up.find("X-Api-Key: sk-real-value,sk-real-value\r\n"), std::string::npos) << up;
  EXPECT_NE(up.find(body), std::string::npos) << "bodies are not rewritten: " << up;
  send_all(rig.server.get(), kOk);
  EXPECT_EQ(recv_count(rig.agent.get(), "ok"), kOk);
  rig.agent.reset();
  ASSERT_TRUE(rig.wait_done());
  for (const auto& r : rig.records()) EXPECT_EQ(r.path.find("sk-real"), std::string::npos);
}

TEST(HttpExchange, PlaceholderOfASecretBoundElsewhereIsRefused) {
  HttpExchangePolicy p = api_policy();
  p.secrets = {{kBound, "sk-real-value", true}, {kUnbound, "other-value", false}};
  for (const std::string& header : {std::string("x-api-key: ") + kUnbound, std::string("Cookie: a=b; t=") + kUnbound}) {
    Rig rig(p);
    send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n" + header + "\r\n\r\n");
    const std::string answer = recv_all(rig.agent.get());
    rig.agent.reset();
    expect_denied(answer, "capabilities.egress[0]");
    EXPECT_EQ(answer.find("other-value"), std::string::npos);
    ASSERT_TRUE(rig.wait_done());
    EXPECT_EQ(recv_all(rig.server.get()), "");  // the upstream saw nothing, then the end
    ASSERT_EQ(rig.refusals().size(), 1u);
    EXPECT_NE(rig.refusals()[0].reason.find("not bound"), std::string::npos);
  }
  Rig rig(p);  // in the query too
  send_all(rig.agent.get(), "GET /v1/models/x?k=" + std::string(kUnbound) + " HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  expect_denied(recv_all(rig.agent.get()), "capabilities.egress[0]");
}

TEST(HttpExchange, HostAndProxyShapesAreRefused) {
  const char* heads[] = {
      "GET /v1/models/x HTTP/1.1\r\nHost: evil.example.com\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n",
      "GET http://evil.example.com/v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-Host: evil.example.com\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nForwarded: for=1.2.3.4;host=evil.example.com\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n Folded: x\r\n\r\n",
      "GET /v1/models/%2e%2e/%2e%2e/admin HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
      "GET /v1/models/a%2Fb HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
      "GET /v1/models/..;/..;/admin HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
  };
  for (const char* head : heads) {
    Rig rig(api_policy());
    send_all(rig.agent.get(), head);
    const std::string answer = recv_all(rig.agent.get());
    rig.agent.reset();
    EXPECT_EQ(answer.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << head << "\n" << answer;
    ASSERT_TRUE(rig.wait_done()) << head;
    EXPECT_EQ(recv_all(rig.server.get()), "") << head;
    EXPECT_EQ(rig.refusals().size(), 1u) << head;
  }
}

TEST(HttpExchange, ChunkedRequestBodyStreamsUp) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "POST /v1/messages HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "abc\r\n"), "");  // before the body ended
  send_all(rig.agent.get(), "0\r\nX-T: 1\r\n\r\nGET /v1/models/z HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "/v1/models/z"), "");
  send_all(rig.server.get(), std::string(kOk) + kOk);
  EXPECT_NE(recv_count(rig.agent.get(), "ok", 2), "");
  rig.agent.reset();
  ASSERT_TRUE(rig.wait_done());
  EXPECT_EQ(rig.records().size(), 2u);
}

TEST(HttpExchange, ResponseUntilCloseEndsTheConnection) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.0\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), "HTTP/1.0 200 OK\r\n\r\nstream of bytes");
  rig.server.reset();
  EXPECT_EQ(recv_all(rig.agent.get()), "HTTP/1.0 200 OK\r\n\r\nstream of bytes");
  ASSERT_TRUE(rig.wait_done());
  ASSERT_EQ(rig.records().size(), 1u);
  EXPECT_EQ(rig.records()[0].status, 200);
}

TEST(HttpExchange, HeadTimeoutEndsAStalledRequest) {
  HttpExchangePolicy p = api_policy();
  p.head_timeout_ms = 200;
  Rig rig(p);
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.exa");
  const auto start = Clock::now();
  ASSERT_TRUE(rig.wait_done(3000));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_EQ(recv_all(rig.server.get()), "");  // nothing of the unfinished head went up
}

TEST(HttpExchange, IdleTimeoutEndsAQuietConnection) {
  HttpExchangePolicy p = api_policy();
  p.idle_timeout_ms = 200;
  Rig rig(p);
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), kOk);
  EXPECT_EQ(recv_count(rig.agent.get(), "ok"), kOk);
  const auto start = Clock::now();
  ASSERT_TRUE(rig.wait_done(3000));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500));
}

TEST(HttpExchange, StopFdEndsItAtOnce) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  rig.stop();
  EXPECT_TRUE(rig.wait_done(1000));
}

// review R2 G2: a value goes only into a credential field. A bound placeholder in the path,
// the query or an ordinary field (the places servers quote back, truncated or encoded where
// no guard sees it) is refused before anything goes upstream; credential fields by name
// (Authorization, x-api-key, Private-Token, X-Auth-Token, ...) are substituted.
TEST(HttpGate, ABoundPlaceholderOutsideACredentialFieldIsRefused) {
  HttpExchangePolicy p = api_policy();
  p.secrets = {{kBound, "sk-real-value", true, "API_KEY"}};
  const std::string ph(kBound);
  for (const std::string& head :
       {"GET /v1/models/" + ph + " HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
        "GET /v1/models/x?key=" + ph + " HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
        "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nOrigin: " + ph + "\r\n\r\n",
        "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nX-Request-Id: " + ph + "\r\n\r\n",
        "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nCookie: s=" + ph + "\r\n\r\n",
        "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nX-" + ph + ": 1\r\n\r\n"}) {
    const network::HttpHeadParse parse = network::parse_http_head(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()), head.size()));
    const GateDecision d = gate_request(parse, p);
    EXPECT_FALSE(d.allowed) << head;
    EXPECT_NE(d.reason.find("goes only into a credential header field"), std::string::npos) << d.reason;
    EXPECT_EQ(d.upstream_head.find("sk-real-value"), std::string::npos) << head;
  }
  for (const std::string field : {"Authorization: Bearer ", "x-api-key: ", "Api-Key: ", "x-goog-api-key: ",
                                  "Private-Token: ", "X-Auth-Token: ", "X-Client-Secret: "}) {
    const std::string head = "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n" + field + ph + "\r\n\r\n";
    const GateDecision d = gate_request(network::parse_http_head(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()), head.size())), p);
    EXPECT_TRUE(d.allowed) << head << d.reason;
    EXPECT_NE(d.upstream_head.find(field + "sk-real-value\r\n"), std::string::npos) << d.upstream_head;
  }
}

TEST(HttpExchange, InvalidResponseFramingEndsTheConnection) {
  Rig rig(api_policy());
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
  EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
  send_all(rig.server.get(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
  EXPECT_TRUE(rig.wait_done());
}

TEST(HttpGate, DeniedResponseIsSelfContained) {
  const std::string r = denied_response("capabilities.egress[0]", "Host `\"x\r\n` does not match");
  EXPECT_EQ(r.find("\r\n\r\n"), r.find("connection: close\r\n") + 17);
  const std::string body = r.substr(r.find("\r\n\r\n") + 4);
  EXPECT_NE(r.find("content-length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  EXPECT_EQ(body.find('\r'), std::string::npos);  // escaped in JSON
}

// review1 F1: the host reflects the substituted value (a header echo, a body quoting the
// path): the agent gets it masked, same length, and one echo is reported per connection.
// The upstream was asked for identity, whatever the agent accepts.
TEST(HttpExchange, AnEchoedValueIsMaskedAndReportedOnce) {
  HttpExchangePolicy p = api_policy();
  p.secrets = {{kBound, "sk-real-value", true, "API_KEY"}};
  Rig rig(p);
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer " +
                                std::string(kBound) + "\r\nAccept-Encoding: gzip, br\r\n\r\n");
  const std::string up = recv_count(rig.server.get(), "\r\n\r\n");
  EXPECT_NE(up.find("Authorization: Bearer sk-real-value\r\n"), std::string::npos) << up;
  EXPECT_NE(up.find("accept-encoding: identity\r\n"), std::string::npos) << up;
  EXPECT_EQ(up.find("gzip"), std::string::npos) << up;
  const std::string body = "The model 'sk-real-value' does not exist; again: sk-real-value";
  send_all(rig.server.get(), "HTTP/1.1 404 Not Found\r\nx-request-id: sk-real-value\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string answer = recv_count(rig.agent.get(), "again: *************");
  EXPECT_EQ(answer, "HTTP/1.1 404 Not Found\r\nx-request-id: *************\r\nContent-Length: " +
                        std::to_string(body.size()) +
                        "\r\n\r\nThe model '*************' does not exist; again: *************");
  rig.agent.reset();
  ASSERT_TRUE(rig.wait_done());
  ASSERT_EQ(rig.echoes().size(), 1U);
  EXPECT_EQ(rig.echoes()[0].rule, "secrets.API_KEY");
  EXPECT_EQ(rig.echoes()[0].reason, "the response carried the value of secret API_KEY; masked");
  EXPECT_EQ(rig.echoes()[0].method, "GET");
  EXPECT_TRUE(rig.refusals().empty());
}

// A coded body from a host a secret is bound to cannot be checked: 502, the body never
// reaches the agent, an http_request with 502, no violation.
TEST(HttpExchange, ACodedResponseFromASecretsHostIsAnswered502) {
  HttpExchangePolicy p = api_policy();
  p.secrets = {{kBound, "sk-real-value", true, "API_KEY"}};
  for (const std::string coding : {"Content-Encoding: gzip\r\nContent-Length: 13\r\n\r\nsk-real-value",
                                   "Transfer-Encoding: gzip, chunked\r\n\r\nd\r\nsk-real-value\r\n0\r\n\r\n"}) {
    Rig rig(p);
    send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer " +
                                  std::string(kBound) + "\r\n\r\n");
    EXPECT_NE(recv_count(rig.server.get(), "\r\n\r\n"), "");
    send_all(rig.server.get(), "HTTP/1.1 200 OK\r\n" + coding);
    const std::string answer = recv_all(rig.agent.get());
    EXPECT_EQ(answer.rfind("HTTP/1.1 502 Bad Gateway\r\nx-soyaos-denied: capabilities.egress[0]\r\n", 0), 0U)
        << coding << ": " << answer;
    EXPECT_EQ(answer.find("sk-real-value"), std::string::npos) << answer;
    rig.agent.reset();
    ASSERT_TRUE(rig.wait_done());
    ASSERT_EQ(rig.records().size(), 1U);
    EXPECT_EQ(rig.records()[0].status, 502);
    EXPECT_TRUE(rig.echoes().empty());
    EXPECT_TRUE(rig.refusals().empty());
  }
}

// Where no secret is bound, the agent's Accept-Encoding goes upstream as it is (and a coded
// answer passes: that host never received a value to reflect).
TEST(HttpExchange, AcceptEncodingIsKeptWhereNoSecretIsBound) {
  HttpExchangePolicy p = api_policy();
  p.secrets = {{kUnbound, "other-value", false, "OTHER"}};
  Rig rig(p);
  send_all(rig.agent.get(), "GET /v1/models/x HTTP/1.1\r\nHost: api.example.com\r\nAccept-Encoding: gzip\r\n\r\n");
  const std::string up = recv_count(rig.server.get(), "\r\n\r\n");
  EXPECT_NE(up.find("Accept-Encoding: gzip\r\n"), std::string::npos) << up;
  EXPECT_EQ(up.find("identity"), std::string::npos) << up;
  const std::string coded = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok";
  send_all(rig.server.get(), coded);
  EXPECT_EQ(recv_count(rig.agent.get(), "ok"), coded);
}

}  // namespace
}  // namespace soyaos::supervisor
