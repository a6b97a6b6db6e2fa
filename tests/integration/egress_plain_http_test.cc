// Plain `http` entries without `http` rules and without a bound secret (review 1, F3; SPEC C6
// "http entries require an HTTP/1.x request whose Host matches", C11 "a placeholder sent to
// any other host that the gateway reads (an intercepted or plain http entry) is refused"):
// the gateway reads every request on such a connection, not only the first — a kept-alive or
// pipelined request naming another Host, a proxy-style target or a placeholder of a secret
// bound to another host gets a 403 the agent reads, a capability_violation and exit 3, and
// never reaches the server; kept-alive requests with the right Host all work. The Moon
// proxy's plain HTTP refuses a placeholder in the request it reads as well, and reads a
// request pipelined after the one it forwarded (a 403 for its absolute form). Real Comets, a
// real keep-alive HTTP server on the host's loopback; ctest runs these as root and
// (`rootless.`) as nobody.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "egress_fixture.h"

namespace soyaos::testing {
namespace {

using namespace egress;  // NOLINT(google-build-using-namespace): the shared fixture

// A value no output could hold by accident.
constexpr const char* kValue = "sk-test-F3plainHttpV4lue-9bQ2xLm7Rt";

// The agent: raw HTTP/1.1 on one connection, so the test says exactly what is sent and when.
//   seq HOST PORT H1 [H2 ...]  one kept-alive request per Host value (`-` = HOST:PORT), each
//                              sent after the previous answer; `ph:` before a Host adds
//                              `Authorization: Bearer $API_KEY`; `abs:` sends the request
//                              in absolute form (http://HOST:PORT/n)
//   pipe HOST PORT H1 H2       both requests in one write, then reads the answers
//   proxy URL                  through $HTTP_PROXY, with `Authorization: Bearer $API_KEY`
//   proxypipe URL1 URL2 ...    through $HTTP_PROXY, every request in one write
// Prints one `RESULT` line: each answer's status (`403:RULE` with x-soyaos-denied when set)
// or `eof`, space-separated.
const std::string kAgent = R"PY(import os, socket, sys

def read_response(s, buf):
    while b"\r\n\r\n" not in buf[0]:
        chunk = s.recv(65536)
        if not chunk:
            return "eof"
        buf[0] += chunk
    head, _, rest = buf[0].partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        fields[k.strip().lower()] = v.strip()
    n = int(fields.get("content-length", "0"))
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    buf[0] = rest[n:]
    status = lines[0].split()[1]
    if "x-soyaos-denied" in fields:
        status += ":" + fields["x-soyaos-denied"]
    return status

def request(i, host, port, spec):
    target = "/r%d" % i
    extra = ""
    if spec.startswith("ph:"):
        extra = "Authorization: Bearer " + os.environ["API_KEY"] + "\r\n"
        spec = spec[3:]
    if spec.startswith("abs:"):
        target = "http://%s:%s/r%d" % (host, port, i)
        spec = spec[4:]
    h = "%s:%s" % (host, port) if spec == "-" else spec
    return ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (target, h, extra)).encode()

def main():
    mode = sys.argv[1]
    out = []
    if mode in ("proxy", "proxypipe"):
        proxy = os.environ["HTTP_PROXY"].split("//", 1)[1].rstrip("/")
        phost, _, pport = proxy.rpartition(":")
        s = socket.create_connection((phost, int(pport)), timeout=10)
        extra = "Authorization: Bearer %s\r\n" % os.environ["API_KEY"] if mode == "proxy" else ""
        reqs = b""
        for url in sys.argv[2:]:
            authority = url.split("//", 1)[1].split("/", 1)[0]
            reqs += ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (url, authority, extra)).encode()
        s.sendall(reqs)
        buf = [b""]
        for _ in sys.argv[2:]:
            out.append(read_response(s, buf))
    else:
        host, port, specs = sys.argv[2], sys.argv[3], sys.argv[4:]
        s = socket.create_connection((host, int(port)), timeout=10)
        buf = [b""]
        if mode == "pipe":
            s.sendall(b"".join(request(i, host, port, sp) for i, sp in enumerate(specs)))
            for _ in specs:
                out.append(read_response(s, buf))
        else:
            for i, sp in enumerate(specs):
                try:
                    s.sendall(request(i, host, port, sp))
                    out.append(read_response(s, buf))
                except OSError as e:
                    out.append("errno=%d" % e.errno)
                if out[-1] in ("eof",) or out[-1].startswith("errno"):
                    break
    print("RESULT " + " ".join(out), flush=True)

main()
)PY";

class EgressPlainHttpTest : public EgressTest {
 protected:
  // web.test:PORT/http, no rules; API_KEY bound to api.test only (its own entry, same server);
  // the value in the Moon's secret store; `proxy_allow`: the Moon proxy's plain HTTP too.
  void plain_pack(uint16_t port, bool with_proxy = false) {
    const std::string p = std::to_string(port);
    std::string egress = "    - {host: web.test, port: " + p + ", protocol: http}\n" +
                         "    - {host: api.test, port: " + p + ", protocol: http}\n";
    if (with_proxy) egress += "    - {host: moon, port: 3128, protocol: moon-proxy}\n";
    dir_.write("plain/soyapack.yaml", "soyapack: v0\nname: egress-probe\nversion: 0.1.0\n"
                                      "agent: {runtime: python3, entrypoint: main.py}\n"
                                      "secrets:\n  API_KEY:\n    hosts: [api.test]\n"
                                      "capabilities:\n  egress:\n" +
                                          egress +
                                          "  fs: {read: [/workdir], write: [/workdir/out]}\n"
                                          "  determinism_tier: read-only\n"
                                          "resources: {timeout: 20s, write_quota: 1Mi}\n");
    dir_.write("plain/main.py", kAgent);
    std::string moon = moon_yaml({{"web.test", "127.0.0.1"}, {"api.test", "127.0.0.1"}, {"third.test", "127.0.0.1"}},
                                 {});
    if (with_proxy) moon += "proxy:\n  allow:\n    - {host: third.test, port: " + p + ", protocol: http}\n";
    dir_.write("home/moon.yaml", moon);
    auto set = run_soyaos_stdin({"secret", "set", "API_KEY"}, kValue, {{"SOYAOS_HOME", home_.string()}});
    ASSERT_EQ(set.exit_code, 0) << set.err;
  }

  ProbeRun agent(const std::vector<std::string>& args) { return run_pack(dir_.path() / "plain", args); }

  // A request refused by the exchange: the violation names it (`METHOD http://HOST:PORT/PATH`),
  // EACCES on write, the entry, `detail_part` in its words; exit 3; the value never shown.
  static void expect_refused_request(const ProbeRun& run, const std::string& resource, const std::string& detail_part) {
    EXPECT_EQ(run.output.exit_code, 3) << run.context();
    const json v = run.violation(resource);
    ASSERT_FALSE(v.is_null()) << "no violation for " << resource << "\n" << run.context();
    EXPECT_EQ(v["surface"], "network") << v.dump();
    EXPECT_EQ(v["errno"], "EACCES") << v.dump();
    EXPECT_EQ(v["syscall"], "write") << v.dump();
    EXPECT_EQ(v["manifest_entry"], "capabilities.egress[0]") << v.dump();
    EXPECT_TRUE(contains(v.value("detail", ""), detail_part)) << v.dump();
    EXPECT_EQ(run.violations().size(), 1u) << run.context();
    EXPECT_FALSE(contains(run.output.out + run.output.err, kValue)) << run.context();
  }

  // The server saw exactly these request lines (paths), in order.
  static void expect_server_saw(const NetServer& web, const std::vector<std::string>& paths) {
    web.wait_served(1, 2000);
    const auto heads = web.record().heads;
    ASSERT_EQ(heads.size(), paths.size()) << web.describe();
    for (size_t i = 0; i < paths.size(); ++i) {
      EXPECT_EQ(heads[i].rfind("GET " + paths[i] + " HTTP/1.1\r\n", 0), 0u) << heads[i];
    }
    EXPECT_FALSE(contains(web.describe(), "soyaos-placeholder-")) << web.describe();
  }
};

TEST_F(EgressPlainHttpTest, AKeptAliveRequestNamingAnotherHostIsRefused) {
  HttpKeepAliveServer web;
  plain_pack(web.port());
  const std::string p = std::to_string(web.port());
  auto run = agent({"seq", "web.test", p, "-", "api.test:" + p});
  EXPECT_EQ(run.result, "200 403:capabilities.egress[0]") << run.context();
  expect_refused_request(run, "GET http://web.test:" + p + "/r1", "Host `api.test:" + p + "` does not match");
  expect_server_saw(web, {"/r0"});
  // The allowed request was read, as on an intercepted entry: an http_request event.
  const auto requests = run.of_type("http_request");
  ASSERT_EQ(requests.size(), 1u) << run.context();
  EXPECT_EQ(requests[0]["data"]["path"], "/r0");
  EXPECT_EQ(requests[0]["data"]["status"], 200);
}

TEST_F(EgressPlainHttpTest, APipelinedRequestNamingAnotherHostIsRefused) {
  HttpKeepAliveServer web;
  plain_pack(web.port());
  const std::string p = std::to_string(web.port());
  auto run = agent({"pipe", "web.test", p, "-", "api.test:" + p});
  EXPECT_EQ(run.result, "200 403:capabilities.egress[0]") << run.context();
  expect_refused_request(run, "GET http://web.test:" + p + "/r1", "does not match");
  expect_server_saw(web, {"/r0"});
}

TEST_F(EgressPlainHttpTest, AKeptAliveProxyStyleRequestIsRefused) {
  HttpKeepAliveServer web;
  plain_pack(web.port());
  const std::string p = std::to_string(web.port());
  // The absolute target names the entry's own host: still refused (a front end may route on it).
  // The resource is the target as sent (not glued to the entry's URL).
  auto run = agent({"seq", "web.test", p, "-", "abs:-"});
  EXPECT_EQ(run.result, "200 403:capabilities.egress[0]") << run.context();
  expect_refused_request(run, "GET http://web.test:" + p + "/r1",
                         "a proxy-style request (absolute target)");
  expect_server_saw(web, {"/r0"});
}

TEST_F(EgressPlainHttpTest, APlaceholderOfASecretBoundElsewhereIsRefused) {
  HttpKeepAliveServer web;
  plain_pack(web.port());
  const std::string p = std::to_string(web.port());
  // First request and a later kept-alive one: refused the same way, nothing of it upstream.
  auto first = agent({"seq", "web.test", p, "ph:-"});
  EXPECT_EQ(first.result, "403:capabilities.egress[0]") << first.context();
  expect_refused_request(first, "GET http://web.test:" + p + "/r0", "not bound to web.test");
  expect_server_saw(web, {});

  auto later = agent({"seq", "web.test", p, "-", "ph:-"});
  EXPECT_EQ(later.result, "200 403:capabilities.egress[0]") << later.context();
  expect_refused_request(later, "GET http://web.test:" + p + "/r1", "not bound to web.test");
  expect_server_saw(web, {"/r0"});
}

TEST_F(EgressPlainHttpTest, KeptAliveRequestsWithTheRightHostAllWork) {
  HttpKeepAliveServer web;
  plain_pack(web.port());
  const std::string p = std::to_string(web.port());
  auto run = agent({"seq", "web.test", p, "-", "-", "-", "-"});
  expect_allowed(run, "200 200 200 200");
  EXPECT_EQ(run.result, "200 200 200 200") << run.context();
  expect_server_saw(web, {"/r0", "/r1", "/r2", "/r3"});
  EXPECT_EQ(run.of_type("http_request").size(), 4u) << run.context();
  // Read, not intercepted (no rules, no secret bound to web.test): the events say so.
  const auto opened = run.of_type("egress_opened");
  ASSERT_EQ(opened.size(), 1u) << run.context();
  EXPECT_FALSE(opened[0]["data"].contains("intercepted")) << opened[0].dump();
  EXPECT_EQ(opened[0]["data"]["protocol"], "http") << opened[0].dump();
  // Pipelined the same way.
  auto piped = agent({"pipe", "web.test", p, "-", "-", "-"});
  expect_allowed(piped, "200 200 200");
  EXPECT_EQ(piped.result, "200 200 200") << piped.context();
}

TEST_F(EgressPlainHttpTest, TheMoonProxyRefusesAPlaceholderInAPlainRequest) {
  HttpKeepAliveServer web;
  plain_pack(web.port(), true);
  const std::string p = std::to_string(web.port());
  auto run = agent({"proxy", "http://third.test:" + p + "/collect"});
  EXPECT_EQ(run.result, "403") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  const json v = run.violation("third.test:" + p + "/http");
  ASSERT_FALSE(v.is_null()) << run.context();
  EXPECT_EQ(v["surface"], "network") << v.dump();
  EXPECT_EQ(v["errno"], "EACCES") << v.dump();
  EXPECT_TRUE(contains(v.value("detail", ""), "Moon proxy: a secret's placeholder")) << v.dump();
  EXPECT_FALSE(contains(run.output.out + run.output.err, kValue)) << run.context();
  expect_untouched(web);
}

TEST_F(EgressPlainHttpTest, TheMoonProxyRefusesARequestPipelinedAfterTheOneItForwarded) {
  HttpKeepAliveServer web;
  plain_pack(web.port(), true);
  const std::string p = std::to_string(web.port());
  // The second request names api.test (not in proxy.allow): it would have been relayed unread
  // to third.test's upstream; the exchange reads it and refuses it.
  auto run = agent({"proxypipe", "http://third.test:" + p + "/one", "http://api.test:" + p + "/two"});
  EXPECT_EQ(run.result, "200 403:proxy.allow[0]") << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  // The violation names the URL the refused request named: api.test, not the entry's third.test.
  const json v = run.violation("GET http://api.test:" + p + "/two");
  ASSERT_FALSE(v.is_null()) << run.context();
  EXPECT_EQ(v["errno"], "EACCES") << v.dump();
  EXPECT_EQ(v["manifest_entry"], "proxy.allow[0]") << v.dump();
  EXPECT_TRUE(contains(v.value("detail", ""), "proxy-style request")) << v.dump();
  expect_server_saw(web, {"/one"});
  EXPECT_TRUE(contains(web.record().heads.at(0), "Host: third.test:" + p)) << web.describe();
}

}  // namespace
}  // namespace soyaos::testing
