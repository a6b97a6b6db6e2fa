// Requests that ask an upstream for more than the http rules saw (review R1 F2, F5), from
// inside a real Comet through the real gateway to a real keep-alive server on the host's
// loopback (HttpKeepAliveServer: it answers every head and never reads a body, like
// Python's http.server and many framework routes). F2: a body on GET/HEAD/TRACE (not DELETE
// or OPTIONS, whose bodies real APIs use: review R2 G4) carrying a second request
// (`DELETE /admin`) that such a server would run unchecked;
// F5: a POST with X-HTTP-Method-Override naming another method. Each is a 403 the agent reads,
// a capability_violation (EACCES), exit 3, and nothing of it at the server; the allowed
// neighbours (GET with `Content-Length: 0`, POST with a body, an override equal to the
// method) still go through. The same on an entry intercepted only for a bound secret, where
// TRACE is refused too, and on a plain http entry with neither (read request by request since
// review 1 F3). ctest runs these as root and (`rootless.`) as nobody.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "egress_fixture.h"

namespace soyaos::testing {
namespace {

using namespace egress;  // NOLINT(google-build-using-namespace): the shared fixture

// One connection per argument "METHOD PATH FRAMING [Name:Value ...]"; FRAMING:
//   cl    the smuggled request as the body, by Content-Length, then `GET /` (Connection: close)
//   te    the same as one chunk of a chunked body
//   cl0   `Content-Length: 0`, then `GET /` (Connection: close)
//   json  a small JSON body by Content-Length, Connection: close
// In a field, `+` stands for a space and `$NAME` for the agent's environment variable
// (`Authorization:Bearer+$API_KEY`). Prints "RESULT <status>,<status>... denied=<x-soyaos-denied
// or ->" per connection: every response the agent read until the connection closed.
constexpr const char* kAgent = R"PY(import os, re, socket, sys

host, port = sys.argv[1], int(sys.argv[2])
auth = "%s:%d" % (host, port)
smuggled = ("DELETE /admin HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n" % auth).encode()
follow = ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % auth).encode()

def request(method, path, framing, extra):
    head = "%s %s HTTP/1.1\r\nHost: %s\r\n" % (method, path, auth)
    head += "".join(os.path.expandvars(f).replace("+", " ").replace(":", ": ", 1) + "\r\n" for f in extra)
    if framing == "cl":
        return (head + "Content-Length: %d\r\n\r\n" % len(smuggled)).encode() + smuggled + follow
    if framing == "te":
        chunk = b"%x\r\n" % len(smuggled) + smuggled + b"\r\n0\r\n\r\n"
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunk + follow
    if framing == "cl0":
        return (head + "Content-Length: 0\r\n\r\n").encode() + follow
    if framing == "json":
        return (head + "Content-Length: 8\r\nConnection: close\r\n\r\n").encode() + b'{"x": 1}'
    raise ValueError(framing)

for step in sys.argv[3:]:
    words = step.split()
    got = b""
    try:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(request(words[0], words[1], words[2], words[3:]))
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
    except OSError as e:
        got += ("(error %s)" % type(e).__name__).encode()
    # Responses follow each other's bodies directly: no line start to anchor on.
    statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", got)
    denied = re.search(rb"^x-soyaos-denied: (\S+)", got, re.M | re.I)
    print("RESULT %s denied=%s" % (",".join(s.decode() for s in statuses) or "-",
                                    denied.group(1).decode() if denied else "-"), flush=True)
)PY";

class EgressHttpSmuggleTest : public EgressTest {
 protected:
  // web.test:PORT/http with rules GET /held, GET /, POST /submit: intercepted.
  void SetUp() override {
    EgressTest::SetUp();
    if (IsSkipped()) return;
    set_moon({{"web.test", "127.0.0.1"}});
    dir_.write("smuggle/main.py", kAgent);
    write_manifest("", "      http: [{method: GET, path: /held}, {method: GET, path: /}, {method: POST, path: /submit}]\n");
  }

  void write_manifest(const std::string& secrets, const std::string& rules) {
    dir_.write("smuggle/soyapack.yaml",
               "soyapack: v0\nname: egress-probe\nversion: 0.1.0\n"
               "agent: {runtime: python3, entrypoint: main.py}\n" +
                   secrets +
                   "capabilities:\n  egress:\n    - host: web.test\n      port: " + std::to_string(web_.port()) +
                   "\n      protocol: http\n" + rules +
                   "  fs: {read: [/workdir], write: [/workdir/out]}\n"
                   "  determinism_tier: read-only\n"
                   "resources: {timeout: 30s, write_quota: 1Mi}\n");
  }

  ProbeRun steps(const std::vector<std::string>& connections) {
    std::vector<std::string> args = {"web.test", std::to_string(web_.port())};
    args.insert(args.end(), connections.begin(), connections.end());
    return run_pack(dir_.path() / "smuggle", args);
  }

  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://web.test:" + std::to_string(web_.port()) + path;
  }

  // The refused request's violation: EACCES on `write`, the entry named, `reason` in detail.
  void expect_refused(const ProbeRun& run, const std::string& method, const std::string& path,
                      const std::string& reason) const {
    const json v = run.violation(method + " " + url(path));
    ASSERT_FALSE(v.is_null()) << "no violation for " << method << " " << path << "\n" << run.context();
    EXPECT_EQ(v["surface"], "network") << v.dump();
    EXPECT_EQ(v["errno"], "EACCES") << v.dump();
    EXPECT_EQ(v["syscall"], "write") << v.dump();
    EXPECT_EQ(v["manifest_entry"], "capabilities.egress[0]") << v.dump();
    EXPECT_TRUE(contains(v.value("detail", ""), reason)) << v.dump();
  }

  // Nothing the agent sent in a refused request reached the server: no head at all when
  // every connection was refused, and never the smuggled DELETE.
  void expect_no_smuggled_head() const {
    for (const std::string& head : web_.record().heads) {
      EXPECT_FALSE(contains(head, "DELETE")) << web_.describe();
    }
  }

  HttpKeepAliveServer web_;
};

TEST_F(EgressHttpSmuggleTest, ABodyOnAMethodThatDefinesNoneIsRefusedAndNeverReachesTheServer) {
  auto run = steps({"GET /held cl", "GET /held te", "HEAD /held cl", "TRACE /held te"});
  ASSERT_EQ(run.results.size(), 4u) << run.context();
  for (const std::string& r : run.results) {
    EXPECT_EQ(r, "403 denied=capabilities.egress[0]") << run.context();  // the 403 only: no second answer
  }
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  EXPECT_TRUE(contains(run.output.err, "capability violation")) << run.output.err;
  expect_refused(run, "GET", "/held", "a body on a GET request (Content-Length ");
  expect_refused(run, "HEAD", "/held", "a body on a HEAD request (Content-Length ");
  expect_refused(run, "TRACE", "/held", "a body on a TRACE request (Transfer-Encoding)");
  size_t get_te = 0;
  for (const auto& v : run.violations()) {
    get_te += contains(v["data"].value("detail", ""), "a body on a GET request (Transfer-Encoding)") ? 1 : 0;
  }
  EXPECT_EQ(get_te, 1u) << run.context();
  EXPECT_EQ(run.violations().size(), 4u) << run.context();
  // The server saw no request at all: neither the checked one nor the smuggled DELETE.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(web_.record().heads.empty()) << web_.describe();
  expect_no_smuggled_head();
  EXPECT_TRUE(run.of_type("http_request").empty()) << run.context();
}

TEST_F(EgressHttpSmuggleTest, NoBodyOrABodyOnAMethodWithOneGoesThrough) {
  auto run = steps({"GET /held cl0", "POST /submit json", "POST /submit json X-HTTP-Method-Override:POST"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  EXPECT_EQ(run.results[0], "200,200 denied=-") << run.context();  // GET /held and the follow-up GET /
  EXPECT_EQ(run.results[1], "200 denied=-") << run.context();
  EXPECT_EQ(run.results[2], "200 denied=-") << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.violations().empty()) << run.context();
  ASSERT_TRUE(web_.wait_served(3)) << web_.describe();
  const auto heads = web_.record().heads;
  ASSERT_EQ(heads.size(), 4u) << web_.describe();
  size_t gets = 0, posts = 0, overrides = 0;
  for (const std::string& h : heads) {
    gets += h.rfind("GET /", 0) == 0 ? 1 : 0;
    posts += h.rfind("POST /submit HTTP/1.1\r\n", 0) == 0 ? 1 : 0;
    overrides += contains(h, "\r\nX-HTTP-Method-Override: POST\r\n") ? 1 : 0;
  }
  EXPECT_EQ(gets, 2u) << web_.describe();
  EXPECT_EQ(posts, 2u) << web_.describe();
  EXPECT_EQ(overrides, 1u) << web_.describe();
  expect_no_smuggled_head();
  EXPECT_EQ(run.of_type("http_request").size(), 4u) << run.context();
}

TEST_F(EgressHttpSmuggleTest, AMethodOverrideNamingAnotherMethodIsRefused) {
  auto run = steps({"POST /submit json X-HTTP-Method-Override:DELETE", "POST /submit json x-http-method:DELETE",
                    "POST /submit json X-Method-Override:PUT"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  for (const std::string& r : run.results) {
    EXPECT_EQ(r, "403 denied=capabilities.egress[0]") << run.context();
  }
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  EXPECT_TRUE(contains(run.output.err, "capability violation")) << run.output.err;
  ASSERT_EQ(run.violations().size(), 3u) << run.context();
  expect_refused(run, "POST", "/submit", "a `X-HTTP-Method-Override: DELETE` field on a POST request");
  std::vector<std::string> details;
  for (const auto& v : run.violations()) details.push_back(v["data"].value("detail", ""));
  EXPECT_TRUE(contains(details[1], "a `x-http-method: DELETE` field")) << run.context();
  EXPECT_TRUE(contains(details[2], "a `X-Method-Override: PUT` field")) << run.context();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(web_.record().heads.empty()) << web_.describe();
  EXPECT_TRUE(run.of_type("http_request").empty()) << run.context();
}

// An entry intercepted only because a secret is bound to its host (no rules: every method and
// path allowed) is read request by request as well: the smuggle and TRACE are refused there.
TEST_F(EgressHttpSmuggleTest, OnASecretBoundEntryWithoutRulesABodyOnGetAndTraceAreRefused) {
  constexpr const char* kValue = "sk-test-smuggle-5dQ2vX8pLr";
  write_manifest("secrets:\n  API_KEY:\n    hosts: [web.test]\n", "");
  const RunOutput set = run_soyaos_stdin({"secret", "set", "API_KEY"}, std::string(kValue) + "\n",
                                         {{"SOYAOS_HOME", home_.string()}});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  auto run = steps({"GET / cl Authorization:Bearer+$API_KEY", "TRACE / cl0 Authorization:Bearer+$API_KEY",
                    "GET /any/path cl0 Authorization:Bearer+$API_KEY"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  EXPECT_EQ(run.results[0], "403 denied=capabilities.egress[0]") << run.context();
  EXPECT_EQ(run.results[1], "403 denied=capabilities.egress[0]") << run.context();
  EXPECT_EQ(run.results[2], "200,200 denied=-") << run.context();  // the neighbour: no body, swapped
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  ASSERT_EQ(run.violations().size(), 2u) << run.context();
  expect_refused(run, "GET", "/", "a body on a GET request (Content-Length ");
  expect_refused(run, "TRACE", "/", "TRACE on an entry with a bound secret");
  // The server saw the allowed GET and its follow-up, with the value; nothing else.
  ASSERT_TRUE(web_.wait_served(3)) << web_.describe();
  const auto heads = web_.record().heads;
  ASSERT_EQ(heads.size(), 2u) << web_.describe();
  EXPECT_EQ(heads[0].rfind("GET /any/path HTTP/1.1\r\n", 0), 0u) << web_.describe();
  EXPECT_TRUE(contains(heads[0], std::string("Authorization: Bearer ") + kValue)) << web_.describe();
  EXPECT_EQ(heads[1].rfind("GET / HTTP/1.1\r\n", 0), 0u) << web_.describe();
  expect_no_smuggled_head();
  EXPECT_FALSE(contains(run.output.out, kValue)) << run.context();
  EXPECT_FALSE(contains(run.output.err, kValue)) << run.context();
}

// Since review 1 F3 every plain http connection is read request by request, rules or secrets
// or not: the smuggle is refused there too (as the first request and as a later one).
TEST_F(EgressHttpSmuggleTest, OnAPlainHttpEntryWithoutRulesOrSecretsABodyOnGetIsRefused) {
  write_manifest("", "");
  auto run = steps({"GET /first cl", "GET / cl0", "HEAD /x te"});
  ASSERT_EQ(run.results.size(), 3u) << run.context();
  EXPECT_EQ(run.results[0], "403 denied=capabilities.egress[0]") << run.context();
  EXPECT_EQ(run.results[1], "200,200 denied=-") << run.context();
  EXPECT_EQ(run.results[2], "403 denied=capabilities.egress[0]") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  ASSERT_EQ(run.violations().size(), 2u) << run.context();
  expect_refused(run, "GET", "/first", "a body on a GET request (Content-Length ");
  expect_refused(run, "HEAD", "/x", "a body on a HEAD request (Transfer-Encoding)");
  ASSERT_TRUE(web_.wait_served(3)) << web_.describe();
  EXPECT_EQ(web_.record().heads.size(), 2u) << web_.describe();  // GET / and its follow-up only
  expect_no_smuggled_head();
}

}  // namespace
}  // namespace soyaos::testing
