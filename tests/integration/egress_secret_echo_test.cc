// A secret's value never reaches the agent through its own host's answers (review1 F1, SPEC
// C11, docs/secrets.md): the gateway puts the value into the request line and headers for the
// secret's host, and servers reflect those — a 404 quoting the path, the query, a CORS `Origin`
// echo, `X-Request-Id`, a value stored by one request and read back by a later one, a value
// split across two chunks. Each reaches the agent masked with '*' (same length: the framing
// stays valid), the run has a capability_violation naming `secrets.API_KEY` and exits 3, and
// the value is in nothing the agent printed or the run wrote. A coded (gzip) response on such a
// connection is answered 502 (the gateway asks for identity). An ordinary authenticated
// request and an SSE stream are untouched. Real Comets, a real HTTP server on the host's
// loopback (plain `http` entry, mapped by dns.hosts); root and (`rootless.`) nobody.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "egress_fixture.h"

namespace soyaos::testing {
namespace {

using namespace egress;  // NOLINT(google-build-using-namespace): the shared fixture
namespace fs = std::filesystem;

// A value no output could contain by accident (29 bytes).
constexpr std::string_view kValue = "sk-live-ECHO7Q2w9ZxT4mN8bYc1d";

std::string hex(size_t n) {
  std::array<char, 32> buf{};
  const int len = std::snprintf(buf.data(), buf.size(), "%zx", n);
  return {buf.data(), static_cast<size_t>(len)};
}

uint32_t crc32(std::string_view data) {
  uint32_t c = 0xffffffffU;
  for (const char ch : data) {
    c ^= static_cast<uint8_t>(ch);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320U & (0U - (c & 1U)));
  }
  return c ^ 0xffffffffU;
}

// A real gzip member holding `data` in one stored (uncompressed) deflate block: the value is
// in it verbatim, so a gateway that forwarded it would leak it.
std::string gzip_stored(std::string_view data) {
  std::string out("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  const auto n = static_cast<uint16_t>(data.size());
  out += '\x01';
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>(n >> 8);
  out += static_cast<char>(~n & 0xff);
  out += static_cast<char>((~n >> 8) & 0xff);
  out += data;
  auto le32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  le32(crc32(data));
  le32(static_cast<uint32_t>(data.size()));
  return out;
}

std::string field(const std::string& head, const std::string& name) {
  std::string lower_head = head;
  for (auto& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t at = lower_head.find("\r\n" + name + ":");
  if (at == std::string::npos) return "";
  size_t v = at + 2 + name.size() + 1;
  while (v < head.size() && head[v] == ' ') ++v;
  return head.substr(v, head.find("\r\n", v) - v);
}

// An API that reflects what it was sent, the way real ones do. One request per connection
// (the agent sends `Connection: close`); it records each head and keeps what /store got.
class ReflectingApi {
 public:
  ReflectingApi() {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_, 16) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "listen: " << errno;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~ReflectingApi() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
  }
  ReflectingApi(const ReflectingApi&) = delete;
  ReflectingApi& operator=(const ReflectingApi&) = delete;
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] std::vector<std::string> heads() const {
    std::lock_guard lock(mu_);
    return heads_;
  }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      const int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      serve(fd);
      ::close(fd);
    }
  }
  static void send_all(int fd, std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      s.remove_prefix(static_cast<size_t>(n));
    }
  }
  static std::string reply(const std::string& status, const std::string& fields, const std::string& body) {
    return "HTTP/1.1 " + status + "\r\n" + fields + "content-length: " + std::to_string(body.size()) +
           "\r\nconnection: close\r\n\r\n" + body;
  }
  void serve(int fd) {
    std::string got;
    std::array<char, 4096> buf{};
    while (got.find("\r\n\r\n") == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 3000) <= 0) return;
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) return;
      got.append(buf.data(), static_cast<size_t>(n));
    }
    const std::string head = got.substr(0, got.find("\r\n\r\n") + 2);
    {
      std::lock_guard lock(mu_);
      heads_.push_back(head);
    }
    const std::string target = head.substr(head.find(' ') + 1, head.find(' ', head.find(' ') + 1) - head.find(' ') - 1);
    std::string auth = field(head, "authorization");
    if (auth.rfind("Bearer ", 0) == 0) auth = auth.substr(7);
    if (target.rfind("/v1/models/", 0) == 0) {
      send_all(fd, reply("404 Not Found", "content-type: application/json\r\n",
                         "{\"error\": {\"message\": \"The model '" + target.substr(11) + "' does not exist\"}}"));
    } else if (target.rfind("/search?", 0) == 0) {
      send_all(fd, reply("200 OK", "", "you searched for " + target.substr(8) + "\n"));
    } else if (target == "/headers") {
      std::string fields;
      if (const std::string o = field(head, "origin"); !o.empty()) fields += "access-control-allow-origin: " + o + "\r\n";
      if (const std::string id = field(head, "x-request-id"); !id.empty()) fields += "x-request-id: " + id + "\r\n";
      send_all(fd, reply("200 OK", fields, "ok\n"));
    } else if (target == "/whoami") {
      // An httpbin-style echo of the credential itself, in a header and in the body.
      send_all(fd, reply("200 OK", "x-you-sent: " + auth + "\r\n", "you are " + auth + "\n"));
    } else if (target == "/chunked") {
      // The value split across two chunks, each written (and flushed) on its own, the second
      // within the guard's hold (SecretEchoGuard::kHoldMs, 50 ms): a server that paused longer
      // mid-value would have the first part delivered (docs/secrets.md).
      const std::string a = "key=" + auth.substr(0, auth.size() / 2);
      const std::string b = auth.substr(auth.size() / 2) + "\n";
      send_all(fd, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n" + hex(a.size()) +
                       "\r\n" + a + "\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      send_all(fd, hex(b.size()) + "\r\n" + b + "\r\n0\r\n\r\n");
    } else if (target == "/store") {
      {
        std::lock_guard lock(mu_);
        stored_ = field(head, "x-secret-note");
      }
      send_all(fd, reply("201 Created", "", "stored\n"));
    } else if (target == "/load") {
      std::string note;
      {
        std::lock_guard lock(mu_);
        note = stored_;
      }
      send_all(fd, reply("200 OK", "", "note: " + note + "\n"));
    } else if (target == "/gzip") {
      send_all(fd, reply("200 OK", "content-encoding: gzip\r\n", gzip_stored("token=" + auth + "\n")));
    } else if (target == "/ok") {
      send_all(fd, reply("200 OK", "", auth == kValue ? "authorized\n" : "unauthorized\n"));
    } else if (target == "/sse") {
      send_all(fd, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                   "connection: close\r\n\r\n");
      const std::string e1 = "data: {\"n\": 1}\n\n", e2 = "data: {\"n\": 2}\n\n";
      send_all(fd, hex(e1.size()) + "\r\n" + e1 + "\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      send_all(fd, hex(e2.size()) + "\r\n" + e2 + "\r\n0\r\n\r\n");
    } else {
      send_all(fd, reply("404 Not Found", "", "no such thing\n"));
    }
  }

  int listen_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> heads_;
  std::string stored_;
};

// The agent: one raw HTTP/1.1 request per action (its own connection), the whole answer
// printed as a Python bytes literal on a RESULT line.
const std::string kAgent = R"(import os, socket, sys, time
ph = os.environ["API_KEY"]
host, port = sys.argv[1], int(sys.argv[2])
def req(method, path, headers=(), body=b""):
    s = socket.create_connection((host, port), timeout=10)
    h = "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nAccept-Encoding: gzip, br\r\n" % (method, path, host, port)
    for k, v in headers:
        h += "%s: %s\r\n" % (k, v)
    h += "Content-Length: %d\r\n\r\n" % len(body)
    t0 = time.monotonic()
    s.sendall(h.encode() + body)
    out, first = b"", None
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
        if first is None and b"data: " in out:
            first = time.monotonic() - t0
    return out, first
bearer = [("Authorization", "Bearer " + ph)]
probes = {
    "path": ("GET", "/v1/models/" + ph, ()),
    "query": ("GET", "/search?k=" + ph, ()),
    "origin": ("GET", "/headers", [("Origin", ph)]),
    "request_id": ("GET", "/headers", [("X-Request-Id", ph)]),
    "chunked": ("GET", "/chunked", bearer),
    "store": ("POST", "/store", [("X-Secret-Note", ph)]),
    "whoami": ("GET", "/whoami", bearer),
    "load": ("GET", "/load", ()),
    "gzip": ("GET", "/gzip", bearer),
    "ok": ("GET", "/ok", bearer),
    "sse": ("GET", "/sse", bearer),
}
for name in sys.argv[3:]:
    method, path, headers = probes[name]
    out, first = req(method, path, headers)
    print("RESULT %s first_event_ms=%d %r" % (name, -1 if first is None else int(first * 1000), out), flush=True)
)";

class EgressSecretEchoTest : public EgressTest {
 protected:
  void SetUp() override {
    EgressTest::SetUp();
    if (::testing::Test::IsSkipped()) return;
    set_moon({{"api.test", "127.0.0.1"}});
    dir_.write("echo/main.py", kAgent);
    dir_.write("echo/soyapack.yaml", "soyapack: v0\nname: egress-probe\nversion: 0.1.0\n"
                                     "agent: {runtime: python3, entrypoint: main.py}\n"
                                     "secrets:\n  API_KEY:\n    hosts: [api.test]\n"
                                     "capabilities:\n  egress:\n    - {host: api.test, port: " +
                                         std::to_string(api_.port()) +
                                         ", protocol: http}\n"
                                         "  fs: {read: [/workdir], write: [/workdir/out]}\n"
                                         "  determinism_tier: read-only\n"
                                         "resources: {timeout: 30s, write_quota: 1Mi}\n");
  }

  ProbeRun run_probes(const std::vector<std::string>& names) {
    std::vector<std::string> action = {"api.test", std::to_string(api_.port())};
    action.insert(action.end(), names.begin(), names.end());
    return run_pack(dir_.path() / "echo", action, {{"ECHO_TEST_KEY", std::string(kValue)}},
                    {"--secret", "API_KEY=env:ECHO_TEST_KEY"});
  }

  // The value is in nothing the agent printed and nothing the run wrote (events, stderr,
  // $SOYAOS_HOME, --out).
  void expect_value_nowhere(const ProbeRun& run) {
    EXPECT_FALSE(contains(run.output.out, std::string(kValue))) << run.context();
    EXPECT_FALSE(contains(run.output.err, std::string(kValue))) << run.context();
    for (const fs::path& dir : {home_, dir_.path() / "out"}) {
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
        EXPECT_FALSE(contains(read_file(it->path()), std::string(kValue))) << it->path();
      }
    }
    EXPECT_FALSE(contains(read_file(dir_.path() / "events.jsonl"), std::string(kValue)));
  }

  ReflectingApi api_;
};

struct EchoCase {
  std::string name;
  std::vector<std::string> probes;  // the last one reads the echo
  std::string masked;               // what the agent gets (as printed by Python's repr)
};

// gtest names the case by its name, not its bytes.
void PrintTo(const EchoCase& c, std::ostream* os) { *os << c.name; }

const std::string kStars(kValue.size(), '*');
const size_t kHalf = kValue.size() / 2;

class EgressSecretEchoCaseTest : public EgressSecretEchoTest, public ::testing::WithParamInterface<EchoCase> {};

TEST_P(EgressSecretEchoCaseTest, TheValueArrivesMaskedAndTheRunIsAViolation) {
  const EchoCase& c = GetParam();
  const ProbeRun run = run_probes(c.probes);
  ASSERT_EQ(run.results.size(), c.probes.size()) << run.context();
  // The host did get the value (the gateway substituted it) ...
  std::string all_heads;
  for (const auto& h : api_.heads()) all_heads += h;
  EXPECT_TRUE(contains(all_heads, std::string(kValue))) << all_heads;
  // ... and the agent got it back masked, in place, with the framing intact.
  const std::string& echoed = run.results.back();
  EXPECT_TRUE(contains(echoed, c.masked)) << echoed;
  expect_value_nowhere(run);
  // One violation per connection that echoed: this one names the secret and the request.
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  const auto violations = run.violations();
  ASSERT_EQ(violations.size(), 1U) << run.context();
  const json v = violations[0]["data"];
  EXPECT_EQ(v["surface"], "network") << v.dump();
  EXPECT_EQ(v["errno"], "EACCES") << v.dump();
  EXPECT_EQ(v["syscall"], "read") << v.dump();
  EXPECT_EQ(v["manifest_entry"], "secrets.API_KEY") << v.dump();
  EXPECT_EQ(v.value("detail", ""), "the response carried the value of secret API_KEY; masked") << v.dump();
  EXPECT_EQ(v.value("resource", "").rfind("GET http://api.test:" + std::to_string(api_.port()) + "/", 0), 0U)
      << v.dump();
  EXPECT_TRUE(contains(run.output.err, "capability violation")) << run.output.err;
}

INSTANTIATE_TEST_SUITE_P(
    EgressSecretEcho, EgressSecretEchoCaseTest,
    ::testing::Values(EchoCase{"whoami", {"whoami"}, "x-you-sent: " + kStars + "\\r\\n"},  // a credential echo
                      // the value split across two chunks: the mask spans the chunk boundary, sizes intact
                      EchoCase{"chunked",
                               {"chunked"},
                               "key=" + std::string(kHalf, '*') + "\\r\\n" + hex(kValue.size() - kHalf + 1) +
                                   "\\r\\n" + std::string(kValue.size() - kHalf, '*') + "\\n"},
                      EchoCase{"stored", {"store", "load"}, "note: " + kStars + "\\n"}),  // (f) read back later
    [](const ::testing::TestParamInfo<EchoCase>& info) { return info.param.name; });

// Review R1 F1 / R2 G2: the places servers quote back — the path (a 404 naming the model), the
// query, `Origin`, `X-Request-Id` — never get the value: the gateway refuses a placeholder there
// before anything goes upstream (403, a violation, exit 3), so neither a verbatim echo nor a
// truncated or encoded one can return it.
class EgressSecretPlacementTest : public EgressSecretEchoTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(EgressSecretPlacementTest, APlaceholderWhereAServerWouldQuoteItIsRefused) {
  const ProbeRun run = run_probes({GetParam()});
  ASSERT_EQ(run.results.size(), 1U) << run.context();
  EXPECT_TRUE(contains(run.results[0], "403 Forbidden")) << run.results[0];
  EXPECT_TRUE(contains(run.results[0], "x-soyaos-denied: capabilities.egress[0]")) << run.results[0];
  std::string all_heads;
  for (const auto& h : api_.heads()) all_heads += h;
  EXPECT_FALSE(contains(all_heads, std::string(kValue))) << all_heads;
  expect_value_nowhere(run);
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  const auto violations = run.violations();
  ASSERT_EQ(violations.size(), 1U) << run.context();
  const json v = violations[0]["data"];
  EXPECT_EQ(v["errno"], "EACCES") << v.dump();
  EXPECT_EQ(v["syscall"], "write") << v.dump();
  EXPECT_TRUE(contains(v.value("detail", ""), "goes only into a credential header field")) << v.dump();
}

INSTANTIATE_TEST_SUITE_P(EgressSecretEcho, EgressSecretPlacementTest,
                         ::testing::Values("path", "query", "origin", "request_id"));

// (e) in detail: each chunk's half of the value is masked, the chunk sizes still frame it.
TEST_F(EgressSecretEchoTest, AValueSplitAcrossChunksIsMaskedInBothChunks) {
  const ProbeRun run = run_probes({"chunked"});
  ASSERT_EQ(run.results.size(), 1U) << run.context();
  const size_t half = kValue.size() / 2;
  const std::string a = "key=" + std::string(half, '*'), b = std::string(kValue.size() - half, '*') + "\\n";
  EXPECT_TRUE(contains(run.results[0], hex(a.size()) + "\\r\\n" + a + "\\r\\n" + hex(b.size() - 1) + "\\r\\n" + b +
                                           "\\r\\n0\\r\\n\\r\\n"))
      << run.results[0];
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
}

// (g) A coded body cannot be checked: the gateway asked for identity, the server sent gzip
// anyway; the agent gets 502 from the gateway, never the body. The server's doing, not the
// agent's: no violation, an http_request event with 502.
TEST_F(EgressSecretEchoTest, ACodedResponseIsAnswered502) {
  const ProbeRun run = run_probes({"gzip"});
  ASSERT_EQ(run.results.size(), 1U) << run.context();
  EXPECT_EQ(run.results[0].find("HTTP/1.1 502 Bad Gateway\\r\\nx-soyaos-denied: capabilities.egress[0]\\r\\n"),
            run.results[0].find("HTTP/1.1")) << run.results[0];
  EXPECT_TRUE(contains(run.results[0], "the response is coded (`gzip`)")) << run.results[0];
  EXPECT_FALSE(contains(run.results[0], "\\x1f\\x8b")) << run.results[0];
  expect_value_nowhere(run);
  const auto heads = api_.heads();
  ASSERT_EQ(heads.size(), 1U);
  EXPECT_EQ(field(heads[0], "accept-encoding"), "identity") << heads[0];  // not the agent's "gzip, br"
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  const auto requests = run.of_type("http_request");
  ASSERT_EQ(requests.size(), 1U) << run.context();
  EXPECT_EQ(requests[0]["data"]["status"], 502) << requests[0].dump();
}

// Allowed: the credential goes where it belongs and the answer does not echo it; an SSE
// stream's first event arrives while the server is still holding the second.
TEST_F(EgressSecretEchoTest, AnAuthenticatedRequestAndAStreamPassUntouched) {
  const ProbeRun run = run_probes({"ok", "sse"});
  ASSERT_EQ(run.results.size(), 2U) << run.context();
  EXPECT_TRUE(contains(run.results[0], "\\r\\n\\r\\nauthorized\\n")) << run.results[0];
  EXPECT_TRUE(contains(run.results[1], "data: {\"n\": 1}\\n\\n") && contains(run.results[1], "data: {\"n\": 2}\\n\\n"))
      << run.results[1];
  int first_ms = -1;
  ASSERT_EQ(std::sscanf(run.results[1].c_str(), "sse first_event_ms=%d", &first_ms), 1) << run.results[1];
  EXPECT_GE(first_ms, 0) << run.results[1];
  EXPECT_LT(first_ms, 1000) << "the first event waited for the second: " << run.results[1];
  expect_value_nowhere(run);
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  EXPECT_EQ(run.of_type("http_request").size(), 2U) << run.context();
}

}  // namespace
}  // namespace soyaos::testing
