// `soyaos pack test`: every example run in a real Comet, its `expect` checked, the
// declared fs capabilities no example exercised reported (T4).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>

#include "harness.h"
#include "net_servers.h"

namespace soyaos::testing {
namespace {

// An agent whose behaviour is chosen by its first argument.
constexpr const char* kAgent = R"(import os, sys
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "ok":
    with open("/workdir/out/result.txt", "w") as f:
        f.write("done\n")
    print("hello summary")
elif mode == "escape":
    print("about to write outside fs.write", file=sys.stderr)
    try:
        open("/workdir/x", "w").write("x")
    except OSError as e:
        print("write failed: %s" % e, file=sys.stderr)
elif mode == "inputs":
    print("inputs: " + ",".join(sorted(os.listdir("/workdir/inputs"))))
    print("read: " + open(sys.argv[2]).read().strip())
elif mode == "exit":
    print("exiting with " + sys.argv[2], file=sys.stderr)
    sys.exit(int(sys.argv[2]))
elif mode == "noisy":
    sys.stderr.write("\x1b[2J\rPASS  forged  (1 ms)\x07\n\x1b]0;title\x07tab\there\n")
    sys.exit(1)
elif mode == "slow":
    import time
    time.sleep(float(sys.argv[2]))
    print("slow summary")
)";

class PackTestTest : public ::testing::Test {
 protected:
  void SetUp() override { home_ = (dir_.path() / "home").string(); }
  RunOutput soyaos(const std::vector<std::string>& args) {
    return run_soyaos(args, {{"SOYAOS_HOME", home_}}, dir_.path());
  }
  // A read-only pack named `name` with the given extra fs.write paths, tools and examples.
  std::string write_pack(const std::string& name, const std::string& extra_write, const std::string& tools,
                         const std::string& examples) {
    dir_.write(name + "/main.py", kAgent);
    dir_.write(name + "/soyapack.yaml",
               "soyapack: v0\nname: " + name +
                   "\nversion: 0.1.0\nagent:\n  runtime: python3\n  entrypoint: main.py\n" + tools +
                   "capabilities:\n  egress: []\n  fs:\n    read: [/workdir]\n    write: [/workdir/out" +
                   extra_write + "]\n  determinism_tier: read-only\nresources:\n  timeout: 20s\nexamples:\n" +
                   examples);
    return (dir_.path() / name).string();
  }
  std::string cases_pack() {
    return write_pack("pt-cases", "", "",
                      "  - name: passes\n    args: [ok]\n"
                      "    expect: {stdout_contains: summary, outputs: [result.txt]}\n"
                      "  - name: wrong-stdout\n    args: [ok]\n    expect: {stdout_contains: goodbye}\n"
                      "  - name: missing-output\n    args: [ok]\n    expect: {outputs: [report.md]}\n"
                      "  - name: violation\n    args: [escape]\n"
                      "  - name: expected-violation\n    args: [escape]\n    expect: {exit_code: 3}\n"
                      "  - name: wrong-exit\n    args: [exit, '1']\n");
  }
  TempDir dir_;
  std::string home_;
};

TEST_F(PackTestTest, HelloReportPasses) {
  auto pack = dir_.copy_from_source("examples/hello-report", "hello");
  auto r = soyaos({"pack", "test", pack.string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("PASS  basic  (", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n1 passed, 0 failed\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not exercised"), std::string::npos) << r.out;
  // Nothing is left behind in the working directory: outputs went to a removed temp dir.
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "soyaos-out"));
}

TEST_F(PackTestTest, EachFailureNamesItsReasonAndShowsStderr) {
  auto r = soyaos({"pack", "test", cases_pack()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string& o = r.out;
  EXPECT_NE(o.find("PASS  passes  ("), std::string::npos) << o;
  EXPECT_NE(o.find("ms)  stdout lacks \"goodbye\"\n"), std::string::npos) << o;
  EXPECT_NE(o.find("FAIL  wrong-stdout  ("), std::string::npos) << o;
  EXPECT_NE(o.find("FAIL  missing-output  ("), std::string::npos) << o;
  EXPECT_NE(o.find("ms)  missing output report.md\n"), std::string::npos) << o;
  EXPECT_NE(o.find("FAIL  violation  ("), std::string::npos) << o;
  EXPECT_NE(o.find("ms)  capability violation: fs write /workdir/x\n"), std::string::npos) << o;
  EXPECT_NE(o.find("    about to write outside fs.write\n"), std::string::npos) << o;  // stderr, indented
  EXPECT_NE(o.find("PASS  expected-violation  ("), std::string::npos) << o;
  EXPECT_NE(o.find("FAIL  wrong-exit  ("), std::string::npos) << o;
  EXPECT_NE(o.find("ms)  exit 1, expected 0\n    exiting with 1\n"), std::string::npos) << o;
  EXPECT_NE(o.find("\n2 passed, 4 failed\n"), std::string::npos) << o;
  // Manifest order.
  EXPECT_LT(o.find("passes"), o.find("wrong-stdout"));
  EXPECT_LT(o.find("wrong-stdout"), o.find("wrong-exit"));
}

// The agent's stderr tail shown under a failing example is the agent's text inside our
// report: escaped (E7) and indented in the text report, and on stderr with --format json, so
// that it can neither drive the terminal (clear it, set its title) nor pass for a report line.
TEST_F(PackTestTest, AFailingExamplesStderrTailIsEscapedAndIndented) {
  auto pack = write_pack("pt-noisy", "", "", "  - name: noisy\n    args: [noisy]\n");
  auto text = soyaos({"pack", "test", pack});
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  auto json = soyaos({"pack", "test", "--format", "json", pack});
  EXPECT_EQ(json.exit_code, 1) << json.out << json.err;
  for (const auto* r : {&text, &json}) {
    const std::string all = r->out + r->err;
    for (const char c : {'\x1b', '\a', '\r'}) {
      EXPECT_EQ(all.find(c), std::string::npos) << int(c) << ": " << all;
    }
    EXPECT_EQ(all.find("\nPASS  forged"), std::string::npos) << all;
    EXPECT_NE(all.find("\n    \\x1B[2J\\rPASS  forged  (1 ms)\\x07\n"), std::string::npos) << all;
    EXPECT_NE(all.find("\n    \\x1B]0;title\\x07tab\\there\n"), std::string::npos) << all;
  }
  EXPECT_NE(text.out.find("FAIL  noisy  ("), std::string::npos) << text.out;
}

// What a hostile pack's expectations quote (stdout_contains, an output's name, a declared
// path no example exercised) reaches the reviewer's terminal escaped (E7), once.
TEST_F(PackTestTest, AHostilePacksExpectationsAreEscapedInTheReport) {
  auto pack = write_pack("pt-hostile", ", \"/workdir/out/w\\e[2J\"", "",
                         "  - name: hostile\n    args: [ok]\n"
                         "    expect: {stdout_contains: \"\\e[2Jall good\\n\", outputs: [\"r\\e[31m.txt\"]}\n");
  auto r = soyaos({"pack", "test", pack});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ((r.out + r.err).find('\x1b'), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("stdout lacks \"\\x1B[2Jall good\\n\"; missing output r\\x1B[31m.txt\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("capabilities.fs.write[1] /workdir/out/w\\x1B[2J"), std::string::npos) << r.out;
}

TEST_F(PackTestTest, JsonShapeAndStoredEvents) {
  auto r = soyaos({"pack", "test", cases_pack(), "--format", "json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["examples"].size(), 6u) << r.out;
  EXPECT_EQ(doc["passed"], 2);
  EXPECT_EQ(doc["failed"], 4);
  EXPECT_TRUE(doc["not_exercised"].is_array());
  EXPECT_TRUE(doc["not_exercised"].empty()) << r.out;
  const auto& first = doc["examples"][0];
  EXPECT_EQ(first["name"], "passes");
  EXPECT_EQ(first["passed"], true);
  EXPECT_TRUE(first["ms"].is_number_integer());
  EXPECT_EQ(first["exit_code"], 0);
  EXPECT_EQ(first["reason"], "");
  EXPECT_EQ(first["run_id"].get<std::string>().size(), 26u);
  const auto& violation = doc["examples"][3];
  EXPECT_EQ(violation["name"], "violation");
  EXPECT_EQ(violation["passed"], false);
  EXPECT_EQ(violation["exit_code"], 3);
  EXPECT_EQ(violation["reason"], "capability violation: fs write /workdir/x");
  // The runs' events are stored in the Moon like those of `soyaos run`.
  auto q = soyaos({"scope", "query", "--format", "json", "--limit", "0", "--run",
                   violation["run_id"].get<std::string>(), "--type", "capability_violation"});
  EXPECT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("/workdir/x"), std::string::npos) << q.out;
}

TEST_F(PackTestTest, RunsNameAtVersionFromTheRegistry) {
  auto pack = dir_.copy_from_source("examples/hello-report", "hello");
  auto push = soyaos({"pack", "push", pack.string()});
  ASSERT_EQ(push.exit_code, 0) << push.out << push.err;
  std::filesystem::remove_all(pack);  // only the registry has it now
  auto r = soyaos({"pack", "test", "hello-report@1.0.0"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS  basic"), std::string::npos) << r.out;
  EXPECT_EQ(soyaos({"pack", "test", "hello-report@9.9.9"}).exit_code, 1);
}

TEST_F(PackTestTest, StrictFailsOnADeclaredPathNoExampleExercised) {
  auto pack = write_pack("pt-strict", ", /workdir/out/logs", "",
                         "  - name: only\n    args: [ok]\n    expect: {outputs: [result.txt]}\n");
  auto loose = soyaos({"pack", "test", pack});
  EXPECT_EQ(loose.exit_code, 0) << loose.out << loose.err;
  EXPECT_NE(loose.out.find("warning: capabilities not exercised by any example: "
                           "capabilities.fs.write[1] /workdir/out/logs\n"),
            std::string::npos)
      << loose.out;
  auto strict = soyaos({"pack", "test", pack, "--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.out;
  EXPECT_NE(strict.out.find("error: capabilities not exercised by any example: "
                            "capabilities.fs.write[1] /workdir/out/logs\n"),
            std::string::npos)
      << strict.out;
  // A tool the example lists that targets the path exercises it.
  auto covered = write_pack("pt-strict2", ", /workdir/out/logs",
                            "tools:\n  log:\n    kind: builtin.fs_write\n    path: /workdir/out/logs/run.log\n",
                            "  - name: only\n    args: [ok]\n    tools: [log]\n");
  auto ok = soyaos({"pack", "test", covered, "--strict", "--format", "json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_TRUE(nlohmann::json::parse(ok.out)["not_exercised"].empty()) << ok.out;
}

// The egress twin of the fs check: an entry is exercised when the gateway relayed a
// connection for it (egress_opened), here against a real TCP echo server on loopback
// mapped by the operator's dns.hosts.
TEST_F(PackTestTest, StrictFailsOnADeclaredEgressEntryNoExampleReached) {
  TcpEchoServer echo;
  dir_.write("home/moon.yaml", "dns:\n  hosts:\n    echo.test: 127.0.0.1\n");
  const std::string port = std::to_string(echo.port());
  dir_.write("pt-net/main.py", R"(import socket, sys
if sys.argv[1] == "connect":
    s = socket.create_connection(("echo.test", int(sys.argv[2])), timeout=5)
    s.sendall(b"hi")
    print("echo " + s.recv(16).decode())
else:
    print("offline")
)");
  auto manifest = [&](const std::string& args) {
    return "soyapack: v0\nname: pt-net\nversion: 0.1.0\nagent: {runtime: python3, entrypoint: main.py}\n"
           "capabilities:\n  egress:\n    - {host: echo.test, port: " + port + ", protocol: tcp}\n"
           "  fs: {read: [/workdir]}\n  determinism_tier: read-only\nresources: {timeout: 20s}\n"
           "examples:\n  - name: net\n    args: " + args + "\n";
  };
  dir_.write("pt-net/soyapack.yaml", manifest("[offline]"));
  auto strict = soyaos({"pack", "test", (dir_.path() / "pt-net").string(), "--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.out << strict.err;
  EXPECT_NE(strict.out.find("capabilities.egress[0] echo.test:" + port + "/tcp"), std::string::npos) << strict.out;

  dir_.write("pt-net/soyapack.yaml", manifest("[connect, '" + port + "']"));
  auto ok = soyaos({"pack", "test", (dir_.path() / "pt-net").string(), "--strict"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_EQ(echo.accepted(), 1);
}

TEST_F(PackTestTest, AnExampleFileInputKeepsItsNameAndADirectoryIsTheInputs) {
  // SPEC M1 example block: a file input appears as /workdir/inputs/<its name> (T6).
  auto pack = write_pack("pt-inputs", "", "",
                         "  - name: file\n    input: examples/basic.json\n"
                         "    args: [inputs, /workdir/inputs/basic.json]\n"
                         "    expect: {stdout_contains: \"inputs: basic.json\\nread: {\\\"n\\\": 1}\"}\n"
                         "  - name: dir\n    input: examples/tree\n"
                         "    args: [inputs, /workdir/inputs/one.txt]\n"
                         "    expect: {stdout_contains: \"inputs: one.txt\\nread: one\"}\n");
  dir_.write("pt-inputs/examples/basic.json", "{\"n\": 1}\n");
  dir_.write("pt-inputs/examples/tree/one.txt", "one\n");
  auto r = soyaos({"pack", "test", pack});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS  file  ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS  dir  ("), std::string::npos) << r.out;
  // The pack declares /workdir/inputs/basic.json under fs.read: exercised by the file example.
  auto strict_pack = write_pack("pt-inputs-strict", "", "",
                                "  - name: file\n    input: examples/basic.json\n"
                                "    args: [inputs, /workdir/inputs/basic.json]\n");
  dir_.write("pt-inputs-strict/examples/basic.json", "{\"n\": 1}\n");
  std::string m = read_file(dir_.path() / "pt-inputs-strict" / "soyapack.yaml");
  m.replace(m.find("read: [/workdir]"), 16, "read: [/workdir, /workdir/inputs/basic.json]");
  dir_.write("pt-inputs-strict/soyapack.yaml", m);
  auto strict = soyaos({"pack", "test", "--strict", strict_pack});
  EXPECT_NE(strict.out.find("PASS  file"), std::string::npos) << strict.out << strict.err;
  EXPECT_EQ(strict.out.find("/workdir/inputs/basic.json"), std::string::npos) << strict.out;
  EXPECT_NE(strict.out.find("capabilities.fs.write[0] /workdir/out"), std::string::npos) << strict.out;
}

TEST_F(PackTestTest, NoExamplesAndUsageErrors) {
  auto probe = dir_.copy_from_source("tests/fixtures/probe", "probe");
  auto none = soyaos({"pack", "test", probe.string()});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no examples: nothing was tested"), std::string::npos) << none.err;
  EXPECT_EQ(soyaos({"pack", "test", probe.string(), "--format", "xml"}).exit_code, 2);
  EXPECT_EQ(soyaos({"pack", "test", (dir_.path() / "absent").string()}).exit_code, 1);
  EXPECT_EQ(soyaos({"pack", "test", probe.string(), "--jobs", "0"}).exit_code, 2);
}

// Independent examples run at once (--jobs, default the CPUs), each in its own Comet;
// the output keeps example order and the exit status is that of a serial run.
TEST_F(PackTestTest, ExamplesRunInParallelOutputInExampleOrder) {
  const std::string pack = write_pack("pt-parallel", "", "",
                                      "  - name: a-slow\n    args: [slow, '1.5']\n    expect: {stdout_contains: slow}\n"
                                      "  - name: b-fails\n    args: [exit, '1']\n"
                                      "  - name: c-ok\n    args: [ok]\n    expect: {outputs: [result.txt]}\n"
                                      "  - name: d-violation\n    args: [escape]\n");
  // When each example's run started and finished, from the Moon (RFC 3339, UTC, same width).
  auto times = [&](const std::string& run_id) {
    auto q = soyaos({"scope", "query", "--format", "json", "--limit", "0", "--run", run_id});
    std::map<std::string, std::string> t;
    std::istringstream lines(q.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      auto e = nlohmann::json::parse(line);
      t[e["type"].get<std::string>()] = e["time"].get<std::string>();
    }
    return t;
  };
  auto r = soyaos({"pack", "test", pack, "--jobs", "4"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string& o = r.out;
  const size_t a = o.find("PASS  a-slow  ("), b = o.find("FAIL  b-fails  ("), c = o.find("PASS  c-ok  ("),
               d = o.find("FAIL  d-violation  (");
  ASSERT_NE(a, std::string::npos) << o;
  ASSERT_NE(b, std::string::npos) << o;
  ASSERT_NE(c, std::string::npos) << o;
  ASSERT_NE(d, std::string::npos) << o;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, d);
  EXPECT_NE(o.find("ms)  exit 1, expected 0\n    exiting with 1\n"), std::string::npos) << o;
  EXPECT_NE(o.find("ms)  capability violation: fs write /workdir/x\n"), std::string::npos) << o;
  EXPECT_NE(o.find("\n2 passed, 2 failed\n"), std::string::npos) << o;

  // They ran at once: b-fails, later in the list, finished while a-slow (1.5 s) still ran.
  auto j = soyaos({"pack", "test", pack, "--jobs", "4", "--format", "json"});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["examples"].size(), 4u) << j.out;
  EXPECT_EQ(doc["examples"][1]["name"], "b-fails");
  EXPECT_EQ(doc["examples"][3]["exit_code"], 3);
  auto ta = times(doc["examples"][0]["run_id"].get<std::string>());
  auto tb = times(doc["examples"][1]["run_id"].get<std::string>());
  ASSERT_TRUE(ta.count("run_finished") && tb.count("run_finished")) << j.out;
  EXPECT_LT(tb["run_finished"], ta["run_finished"]);

  // --jobs 1: one after the other, same result.
  auto s = soyaos({"pack", "test", pack, "--jobs", "1", "--format", "json"});
  EXPECT_EQ(s.exit_code, 1) << s.err;
  auto serial = nlohmann::json::parse(s.out);
  ASSERT_EQ(serial["examples"].size(), 4u) << s.out;
  EXPECT_EQ(serial["passed"], 2);
  EXPECT_EQ(serial["failed"], 2);
  ta = times(serial["examples"][0]["run_id"].get<std::string>());
  tb = times(serial["examples"][1]["run_id"].get<std::string>());
  ASSERT_TRUE(ta.count("run_finished") && tb.count("run_started")) << s.out;
  EXPECT_GT(tb["run_started"], ta["run_finished"]);
}

}  // namespace
}  // namespace soyaos::testing
