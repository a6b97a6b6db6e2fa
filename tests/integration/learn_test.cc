// `soyaos pack learn` (SPEC.md C13, issue #13): real Comets, real servers on the host's
// loopback (net_servers.h), packs whose needs are known. The suite is named Egress* so that
// ctest runs it as root and (rootless.) as nobody; and (daemon.) through a Moon daemon, so
// that learn's events, and the absence of flags and cache entries, are checked there too.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "egress_fixture.h"

namespace soyaos::testing::egress {
namespace {

// Tries each need in turn, whatever the previous one gave, and says how each went.
constexpr const char* kAgent = R"PY(import os, socket, ssl, subprocess, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
def attempt(name, fn):
    try:
        fn()
        print(name, "ok", flush=True)
    except Exception as e:
        print(name, "failed", type(e).__name__, flush=True)
def connect(host, port):
    return socket.create_connection((host, int(port)), timeout=5)
def tls():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with ctx.wrap_socket(connect("tls.learn.test", args["tls"]), server_hostname="tls.learn.test") as s:
        s.sendall(b"ping")
        if s.recv(4) != b"ping": raise EOFError()
def http():
    with connect("web.learn.test", args["http"]) as s:
        s.sendall(("GET / HTTP/1.1\r\nHost: web.learn.test:%s\r\nConnection: close\r\n\r\n" % args["http"]).encode())
        if not s.recv(100).startswith(b"HTTP/1.1 200"): raise EOFError()
def tcp():
    with connect("echo.learn.test", args["tcp"]) as s:
        s.sendall(b"hello\n")
        if s.recv(6) != b"hello\n": raise EOFError()
def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        s.sendto(b"x", (socket.gethostbyname("dgram.learn.test"), int(args["udp"])))
        s.recv(10)
def read():
    open("/srv/learn/data.txt").read()
def write_out():
    with open("/workdir/out/result.txt", "w") as f: f.write("done")
def scratch():
    with open("/var/cache/learn/state", "w") as f: f.write("x")
def flood():
    # The quick ones first, so that a loaded machine's timeout still sees every kind.
    for i in range(int(args["paths"])):
        try: open("/srv/flood/d%d/f" % i).read()
        except OSError: pass
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x08bad\x01name\x04test\x00" + b"\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        s.sendto(q, ("127.0.0.1", 53))
        try: s.recv(512)
        except OSError: pass
    for i in range(int(args["names"])):
        try:
            with connect("n%d.flood.test" % i, 80) as s: s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        except OSError: pass
for step in args["steps"].split(","):
    attempt(step, {"tls": tls, "http": http, "tcp": tcp, "udp": udp, "read": read, "write_out": write_out,
                   "scratch": scratch, "exec": lambda: subprocess.run(["/usr/bin/true"]), "flood": flood,
                   "sleep": lambda: time.sleep(60)}[step])
)PY";

class EgressLearnTest : public EgressTest {
 protected:
  // A pack in dir_/learn: the agent above, the manifest `yaml`.
  std::filesystem::path make_pack(const std::string& yaml) {
    dir_.write("learn/main.py", kAgent);
    dir_.write("learn/soyapack.yaml", yaml);
    // --write replaces the file through a temporary one beside it: as nobody (rootless.) too.
    std::filesystem::permissions(dir_.path() / "learn", std::filesystem::perms::all);
    return dir_.path() / "learn";
  }

  RunOutput learn(const std::filesystem::path& pack, const std::vector<std::string>& flags,
                  const std::vector<std::string>& agent_args = {}) {
    std::vector<std::string> args = {"pack", "learn", pack.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    if (!agent_args.empty()) {
      args.emplace_back("--");
      args.insert(args.end(), agent_args.begin(), agent_args.end());
    }
    return run_soyaos(args, {{"SOYAOS_HOME", home_.string()}}, dir_.path());
  }

  static json parse(const RunOutput& out) {
    auto lines = out.out;
    auto doc = json::parse(lines, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << out.out << "\n" << out.err;
    return doc;
  }

  std::vector<json> stored(const std::string& type) {
    auto out = run_soyaos({"scope", "query", "--type", type, "--format", "json"}, {{"SOYAOS_HOME", home_.string()}});
    std::vector<json> events;
    std::istringstream lines(out.out);
    for (std::string line; std::getline(lines, line);) {
      auto e = json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.is_object()) events.push_back(e);
    }
    return events;
  }
};

std::string base_manifest(const std::string& caps, const std::string& extra = "") {
  return "# the pack's own comment, kept by --write\nsoyapack: v0\nname: learn-probe\nversion: 0.1.0\n"
         "agent: {runtime: python3, entrypoint: main.py}\n" +
         extra + "capabilities:\n" + caps + "  determinism_tier: read-only\nresources: {timeout: 20s}\n";
}

std::set<std::string> egress_of(const json& proposal) {
  std::set<std::string> out;
  for (const auto& e : proposal["egress"]) {
    out.insert(e["host"].get<std::string>() + ":" + std::to_string(e["port"].get<int>()) + "/" +
               e["protocol"].get<std::string>());
  }
  return out;
}

std::set<std::string> paths_of(const json& list) {
  std::set<std::string> out;
  for (const auto& p : list) out.insert(p["path"].get<std::string>());
  return out;
}

TEST_F(EgressLearnTest, ProposesExactlyWhatThePackTriedAndNothingReachesTheHost) {
  TlsEchoServer tls;
  HttpServer http;
  TcpEchoServer echo;
  UdpEchoServer udp;
  set_moon({{"tls.learn.test", "127.0.0.1"}, {"web.learn.test", "127.0.0.1"}, {"echo.learn.test", "127.0.0.1"},
            {"dgram.learn.test", "127.0.0.1"}});
  auto pack = make_pack(base_manifest("  egress: []\n  fs: {read: [/workdir]}\n"));
  auto out = learn(pack, {"--format", "json"},
                   {"steps=read,write_out,scratch,tls,http,tcp,udp,exec", "tls=" + std::to_string(tls.port()),
                    "http=" + std::to_string(http.port()), "tcp=" + std::to_string(echo.port()),
                    "udp=" + std::to_string(udp.port())});
  auto doc = parse(out);
  ASSERT_TRUE(doc.is_object()) << out.err;
  // Exec cannot be granted: exit 1, and it is said.
  EXPECT_EQ(out.exit_code, 1) << out.out << out.err;
  const auto& p = doc["proposal"];
  const std::set<std::string> want_egress = {
      "tls.learn.test:" + std::to_string(tls.port()) + "/https", "web.learn.test:" + std::to_string(http.port()) + "/http",
      "echo.learn.test:" + std::to_string(echo.port()) + "/tcp", "dgram.learn.test:" + std::to_string(udp.port()) + "/udp"};
  EXPECT_EQ(egress_of(p), want_egress) << p.dump(1);
  EXPECT_EQ(paths_of(p["fs"]["read"]), std::set<std::string>{"/srv/learn/data.txt"}) << p.dump(1);
  EXPECT_EQ(paths_of(p["fs"]["write"]), (std::set<std::string>{"/workdir/out", "/var/cache/learn"})) << p.dump(1);
  ASSERT_FALSE(p["not_grantable"].empty()) << p.dump(1);
  for (const auto& n : p["not_grantable"]) EXPECT_EQ(n.get<std::string>().rfind("exec ", 0), 0U) << p.dump(1);
  EXPECT_TRUE(p["names_only"].empty()) << p.dump(1);
  // Round 2 runs with the fs entries (the writes then work) and learns nothing new.
  EXPECT_LE(doc["rounds"].size(), 3U) << doc.dump(1);
  EXPECT_EQ(doc["stopped"], "nothing new") << doc.dump(1);
  // Each added line says what used it; nothing is written without --write.
  const std::string diff = doc["diff"];
  EXPECT_TRUE(contains(diff, "+    - {host: tls.learn.test, port: " + std::to_string(tls.port()) +
                                 ", protocol: https}  # learned from the run: TLS ClientHello, SNI tls.learn.test"))
      << diff;
  EXPECT_TRUE(contains(diff, "+      - /srv/learn/data.txt  # learned from the run: read /srv/learn/data.txt")) << diff;
  EXPECT_FALSE(doc["written"].get<bool>());
  EXPECT_EQ(read_file(pack / "soyapack.yaml"), base_manifest("  egress: []\n  fs: {read: [/workdir]}\n"));
  // Nothing undeclared reached the host without --allow-network.
  expect_untouched(tls);
  expect_untouched(http);
  expect_untouched(echo);
  expect_untouched(udp);
  // A learn run is a run like any other, recorded with learn_observed events, nothing flagged.
  EXPECT_FALSE(stored("learn_observed").empty());
  EXPECT_TRUE(stored("capability_violation").empty());
  EXPECT_TRUE(stored("pack_flagged").empty());
  bool learn_run = false;
  for (const auto& e : stored("run_started")) learn_run = learn_run || e["data"].contains("learn");
  EXPECT_TRUE(learn_run);
}

TEST_F(EgressLearnTest, AllowNetworkRelaysLearnedEntriesAndTheResultPassesPackTestAndStrictLint) {
  TlsEchoServer tls;
  HttpServer http;
  set_moon({{"tls.learn.test", "127.0.0.1"}, {"web.learn.test", "127.0.0.1"}});
  const std::string tp = std::to_string(tls.port()), hp = std::to_string(http.port());
  const std::string tools = "tools:\n  secure: {kind: builtin.http_get, url: \"https://tls.learn.test:" + tp +
                            "/\"}\n  plain: {kind: builtin.http_get, url: \"http://web.learn.test:" + hp + "/\"}\n";
  const std::string examples = "examples:\n  - name: both\n    args: [\"steps=tls,http,write_out\", \"tls=" + tp + "\", \"http=" +
                               hp + "\"]\n    tools: [secure, plain]\n    expect: {exit_code: 0, stdout_contains: \"http ok\", outputs: [result.txt]}\n";
  const std::string original = base_manifest("  egress: []  # to be learned\n  fs:\n    read: [/workdir]\n", tools) + examples;
  auto pack = make_pack(original);
  auto out = learn(pack, {"--allow-network", "--write"});
  EXPECT_EQ(out.exit_code, 0) << out.out << out.err;
  EXPECT_TRUE(contains(out.err, "round 2:")) << out.err;
  EXPECT_TRUE(contains(out.out, "+++ b/soyapack.yaml")) << out.out;
  // Round 2 relayed the learned entries for real.
  EXPECT_GE(tls.accepted(), 1) << out.err;
  EXPECT_GE(http.accepted(), 1) << out.err;
  // Its rounds exited 0 in a read-only pack, yet nothing was cached (C13): a learn run is
  // never replayed as a result.
  auto cache = run_soyaos({"cache", "ls", "--format", "json"}, {{"SOYAOS_HOME", home_.string()}});
  EXPECT_EQ(cache.exit_code, 0) << cache.err;
  EXPECT_TRUE(cache.out.empty()) << cache.out;
  EXPECT_TRUE(stored("pack_flagged").empty());
  const std::string written = read_file(pack / "soyapack.yaml");
  EXPECT_EQ(written.rfind("# the pack's own comment, kept by --write\nsoyapack: v0\n", 0), 0U) << written;
  EXPECT_TRUE(contains(written, "  egress:  # to be learned\n    - {host: tls.learn.test, port: " + tp)) << written;
  EXPECT_TRUE(contains(written, "    write:\n      - /workdir/out  # learned from example both: write /workdir/out/result.txt")) << written;
  auto test = run_soyaos({"pack", "test", pack.string(), "--strict"}, {{"SOYAOS_HOME", home_.string()}}, dir_.path());
  EXPECT_EQ(test.exit_code, 0) << test.out << test.err;
  auto lint = run_soyaos({"pack", "lint", pack.string(), "--strict"}, {{"SOYAOS_HOME", home_.string()}}, dir_.path());
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  // Learning again adds nothing.
  auto again = learn(pack, {"--allow-network"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_TRUE(again.out.empty()) << again.out;
  EXPECT_TRUE(contains(again.err, "nothing to add")) << again.err;
}

// The tier (issue #13: "proposed from the tools and what was learned (lint's rules decide)"):
// a side-effect pack whose tools and learned writes have no side effect gets read-only
// proposed on its tier line, with the rule that decided; the result is strictly clean.
TEST_F(EgressLearnTest, ProposesANarrowerTierAndTheResultPassesStrictLintAndPackTest) {
  HttpServer http;
  set_moon({{"web.learn.test", "127.0.0.1"}});
  const std::string hp = std::to_string(http.port());
  const std::string original =
      "soyapack: v0\nname: learn-tier\nversion: 0.1.0\nagent: {runtime: python3, entrypoint: main.py}\n"
      "tools:\n  plain: {kind: builtin.http_get, url: \"http://web.learn.test:" + hp + "/\"}\n"
      "capabilities:\n  egress: []\n  fs:\n    read: [/workdir]\n"
      "  # we thought it posted somewhere\n  determinism_tier: side-effect   # the author's guess\n"
      "resources: {timeout: 20s}\n"
      "examples:\n  - name: fetch\n    args: [\"steps=http,write_out,scratch\", \"http=" + hp + "\"]\n"
      "    tools: [plain]\n    expect: {exit_code: 0, stdout_contains: \"http ok\", outputs: [result.txt]}\n";
  auto pack = make_pack(original);
  // Before: --strict warns that the tier is looser than needed (SP114).
  auto before = run_soyaos({"pack", "lint", pack.string(), "--strict"}, {{"SOYAOS_HOME", home_.string()}}, dir_.path());
  EXPECT_TRUE(contains(before.out, "SP114") || contains(before.out, "read-only is enough")) << before.out;

  auto out = learn(pack, {"--allow-network", "--write", "--format", "json"});
  EXPECT_EQ(out.exit_code, 0) << out.out << out.err;
  auto doc = parse(out);
  ASSERT_TRUE(doc.is_object()) << out.err;
  const auto& tier = doc["proposal"]["tier"];
  ASSERT_TRUE(tier.is_object()) << doc.dump(1);
  EXPECT_EQ(tier["from"], "side-effect");
  EXPECT_EQ(tier["to"], "read-only");
  EXPECT_EQ(tier["rule"], "SP114");
  // The diff shows the tier line changed, with the rule that decided; the rest is additions.
  const std::string diff = doc["diff"];
  EXPECT_TRUE(contains(diff, "\n-  determinism_tier: side-effect   # the author's guess\n"
                             "+  determinism_tier: read-only  # learned (was side-effect): SP114 "
                             "tier-looser-than-needed: no tool has a side effect and every fs.write path is "
                             "/workdir/out or private scratch\n"))
      << diff;
  EXPECT_TRUE(doc["written"].get<bool>());
  const std::string written = read_file(pack / "soyapack.yaml");
  EXPECT_TRUE(contains(written, "  # we thought it posted somewhere\n  determinism_tier: read-only  # learned")) << written;
  EXPECT_TRUE(contains(written, "      - /var/cache/learn  # learned from example fetch")) << written;

  auto lint = run_soyaos({"pack", "lint", pack.string(), "--strict"}, {{"SOYAOS_HOME", home_.string()}}, dir_.path());
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  EXPECT_EQ(lint.out, "0 errors · 0 warnings\n") << lint.out;
  auto test = run_soyaos({"pack", "test", pack.string(), "--strict"}, {{"SOYAOS_HOME", home_.string()}}, dir_.path());
  EXPECT_EQ(test.exit_code, 0) << test.out << test.err;
  // Learning again proposes nothing, the tier included.
  auto again = learn(pack, {"--allow-network", "--format", "json"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  auto again_doc = parse(again);
  ASSERT_TRUE(again_doc.is_object()) << again.err;
  EXPECT_TRUE(again_doc["proposal"]["tier"].is_null()) << again_doc.dump(1);
  EXPECT_EQ(again_doc["diff"], "");
}

// --unused: the declared grants no run used (issue #13, "Shrinking"), learned in stripped
// rounds: the fs entries the runs needed come back round by round, egress entries, http
// rules and secrets are judged by what went upstream.
TEST_F(EgressLearnTest, UnusedListsTheDeclaredGrantsNoRunUsed) {
  HttpServer http;
  TlsEchoServer tls;
  set_moon({{"web.learn.test", "127.0.0.1"}, {"tls.learn.test", "127.0.0.1"}});
  const std::string hp = std::to_string(http.port()), tp = std::to_string(tls.port());
  auto pack = make_pack(
      "soyapack: v0\nname: learn-unused\nversion: 0.1.0\nagent: {runtime: python3, entrypoint: main.py}\n"
      "secrets:\n  WEB_TOKEN: {hosts: [web.learn.test]}\n  SPARE_TOKEN: {hosts: [tls.learn.test]}\n"
      "capabilities:\n  egress:\n"
      "    - {host: web.learn.test, port: " + hp + ", protocol: http, http: [{method: GET, path: /}, {method: POST, path: /upload}]}\n"
      "    - {host: tls.learn.test, port: " + tp + ", protocol: https}\n"
      "  fs:\n    read: [/workdir, /srv/learn, /srv/extra]\n"
      "    write: [/workdir/out, /var/cache/learn, /workdir/out/reports, /var/spool/never, /tmp]\n"
      "  determinism_tier: read-only\nresources: {timeout: 20s}\n"
      "examples:\n  - name: most\n    args: [\"steps=read,write_out,scratch,http\", \"http=" + hp + "\"]\n");
  const std::vector<std::string> secrets = {"--secret", "WEB_TOKEN=env:LEARN_T1", "--secret", "SPARE_TOKEN=env:LEARN_T2"};
  std::vector<std::string> args = {"pack", "learn", pack.string(), "--unused", "--format", "json"};
  args.insert(args.end(), secrets.begin(), secrets.end());
  const std::map<std::string, std::string> env = {
      {"SOYAOS_HOME", home_.string()}, {"LEARN_T1", "value-one"}, {"LEARN_T2", "value-two"}};
  auto out = run_soyaos(args, env, dir_.path());
  EXPECT_EQ(out.exit_code, 1) << out.out << out.err;  // some grants are unused
  auto doc = parse(out);
  ASSERT_TRUE(doc.is_object()) << out.err;
  const auto& u = doc["unused"];
  EXPECT_EQ(paths_of(u["fs"]["read"]), std::set<std::string>{"/srv/extra"}) << u.dump(1);
  // Private scratch (/var/spool/never, /tmp: a tmpfs directory of the Comet's own) is never
  // listed, as in pack test and lint (SP113).
  EXPECT_EQ(paths_of(u["fs"]["write"]), std::set<std::string>{"/workdir/out/reports"}) << u.dump(1);
  EXPECT_EQ(egress_of(u), std::set<std::string>{"tls.learn.test:" + tp + "/https"}) << u.dump(1);
  ASSERT_EQ(u["http"].size(), 1U) << u.dump(1);
  EXPECT_EQ(u["http"][0]["key_path"], "capabilities.egress[0].http[1]");
  ASSERT_EQ(u["secrets"].size(), 1U) << u.dump(1);
  EXPECT_EQ(u["secrets"][0]["name"], "SPARE_TOKEN");
  // Round 1 ran without the fs entries, round 2 with the three it needed, and added nothing.
  EXPECT_EQ(doc["rounds"].size(), 2U) << doc.dump(1);
  EXPECT_GE(http.accepted(), 1);   // a declared entry is relayed for real
  expect_untouched(tls);
  // Learn runs: observed, never flagged.
  EXPECT_FALSE(stored("learn_observed").empty());
  EXPECT_TRUE(stored("capability_violation").empty());
  EXPECT_TRUE(stored("pack_flagged").empty());

  // The same as text: one line per unused grant, exit 1.
  args = {"pack", "learn", pack.string(), "--unused"};
  args.insert(args.end(), secrets.begin(), secrets.end());
  auto text = run_soyaos(args, env, dir_.path());
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_TRUE(contains(text.out, "declared but used by no run (1 run):\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "  capabilities.fs.read[2]: /srv/extra\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "  capabilities.egress[0].http[1]: {method: POST, path: /upload}\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "  secrets.SPARE_TOKEN: no request went to its hosts (tls.learn.test)\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "  capabilities.fs.write[2]: /workdir/out/reports\n")) << text.out;
  EXPECT_FALSE(contains(text.out, "/tmp")) << text.out;
  // --unused reports only.
  auto both = learn(pack, {"--unused", "--write"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

TEST_F(EgressLearnTest, AHostileAgentGetsABoundedReadableProposal) {
  set_moon({});
  auto pack = make_pack("soyapack: v0\nname: learn-flood\nversion: 0.1.0\n"
                        "agent: {runtime: python3, entrypoint: main.py}\n"
                        "capabilities:\n  egress: []\n  fs: {read: [/workdir]}\n  determinism_tier: read-only\n"
                        "resources: {timeout: 8s, grace: 1s}\n");
  auto out = learn(pack, {"--format", "json", "--max-rounds", "1"}, {"steps=flood,sleep", "names=300", "paths=600"});
  auto doc = parse(out);
  ASSERT_TRUE(doc.is_object()) << out.err;
  const auto& p = doc["proposal"];
  EXPECT_EQ(p["egress"].size(), 32U) << p.dump(1);
  EXPECT_GT(p["omitted"]["egress"].get<int>(), 0) << p.dump(1);
  // 600 paths in 600 directories: past the bound the rule set climbs to their common
  // directory (never `/`), one entry that says how many reads it covers.
  EXPECT_EQ(paths_of(p["fs"]["read"]), std::set<std::string>{"/srv/flood"}) << p.dump(1);
  EXPECT_TRUE(contains(p["fs"]["read"][0]["why"].get<std::string>(), "/srv/flood/*: ")) << p.dump(1);
  for (const auto& e : p["egress"]) {
    EXPECT_EQ(e["port"], 80);
    EXPECT_EQ(e["protocol"], "http");
  }
  // The name with a control character is refused and shown escaped, never raw.
  bool bad_name = false;
  for (const auto& n : p["notes"]) bad_name = bad_name || contains(n.get<std::string>(), "bad\\001name.test refused");
  EXPECT_TRUE(bad_name) << p.dump(1);
  EXPECT_EQ(out.out.find('\x01'), std::string::npos);
  // The round that timed out still gave its proposal, and says so.
  ASSERT_FALSE(doc["run_notes"].empty()) << doc.dump(1);
  EXPECT_TRUE(contains(doc["run_notes"][0].get<std::string>(), "timed out")) << doc.dump(1);
  EXPECT_LT(out.out.size(), 64U * 1024) << "proposal too large: " << out.out.size();
}

}  // namespace
}  // namespace soyaos::testing::egress
