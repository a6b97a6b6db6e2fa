// Using registry packs on a host (SPEC.md C12, docs/registry.md): `pack test REF` pulls on
// first use through the same consent gate as `run REF`; `pack list` shows the registry packs
// a home holds with where each stands (approved or not); and the approval question asked on
// a terminal — a real pseudo-terminal (forkpty) — approves on "y" and refuses on "n" or EOF,
// while a stdin that is not a terminal is never asked. Debian's docker-registry on 127.0.0.1.
#include <gtest/gtest.h>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "registry_server.h"

extern char** environ;

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class OciUse : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RegistryServer::available()) GTEST_SKIP() << "docker-registry is not installed (scripts/setup.sh)";
    fs::create_directories(t_.path() / "docker");
    ASSERT_EQ(reg_.start(t_.path() / "registry", {}), "");
  }
  [[nodiscard]] std::map<std::string, std::string> env(const std::string& host) const {
    return {{"SOYAOS_HOME", (t_.path() / host).string()},
            {"DOCKER_CONFIG", (t_.path() / "docker").string()},
            {"SOYAOS_INSECURE_REGISTRIES", reg_.address()},
            {"SOYAOS_REGISTRY_BACKOFF_MS", "10"}};
  }
  RunOutput soyaos(const std::string& host, const std::vector<std::string>& args) const {
    return run_soyaos(args, env(host));
  }
  [[nodiscard]] std::string ref(const std::string& repo_tag) const { return reg_.address() + "/" + repo_tag; }
  [[nodiscard]] std::string path(const std::string& name) const { return (t_.path() / name).string(); }
  // hello-report at `version`, with `find` replaced by `replace` in its manifest.
  std::string pack(const std::string& version, const std::string& find = "", const std::string& replace = "") {
    const fs::path dir = t_.copy_from_source("examples/hello-report", "src-" + version);
    std::string m = read_file(dir / "soyapack.yaml");
    m.replace(m.find("version: 1.0.0"), 14, "version: " + version);
    if (!find.empty()) m.replace(m.find(find), find.size(), replace);
    std::ofstream(dir / "soyapack.yaml", std::ios::trunc) << m;
    return dir.string();
  }
  void push(const std::string& dir, const std::string& r) {
    auto p = soyaos("a", {"pack", "push", dir, r});
    ASSERT_EQ(p.exit_code, 0) << p.err << p.out;
  }
  [[nodiscard]] std::string input() const { return (fs::path(path("src-1.0.0")) / "examples" / "basic.json").string(); }
  TempDir t_;
  RegistryServer reg_;
};

TEST_F(OciUse, PackTestRefPullsThroughTheConsentGateThenRunsTheExamples) {
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0"), r1);
  // Not approved: refused before anything is pulled or run, as `run REF` is.
  auto r = soyaos("b", {"pack", "test", r1});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("approve"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(t_.path() / "b" / "remote" / "refs.json"));
  ASSERT_EQ(soyaos("b", {"pack", "approve", r1}).exit_code, 0);
  r = soyaos("b", {"pack", "test", r1});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("pulled " + r1), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("PASS  basic"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 passed, 0 failed"), std::string::npos) << r.out;
  // Offline afterwards: the local copy, no pull.
  reg_.stop();
  r = soyaos("b", {"pack", "test", r1, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.err.find("pulled"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(r.out)["passed"], 1);
  // Never pulled and the registry is gone: nothing runs (125).
  r = soyaos("c", {"pack", "test", r1});
  EXPECT_EQ(r.exit_code, 125) << r.err;
}

TEST_F(OciUse, PackListShowsTheRegistryPacksAHomeHoldsAndWhetherTheyAreApproved) {
  const std::string r1 = ref("team/hello:1.0.0"), r2 = ref("team/hello:2.0.0");
  push(pack("1.0.0"), r1);
  push(pack("2.0.0", "  egress: []\n", "  egress:\n    - {host: api.example.com, port: 443, protocol: https}\n"), r2);
  EXPECT_EQ(soyaos("b", {"pack", "list"}).out, "");
  ASSERT_EQ(soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p1")}).exit_code, 0);
  // Pulled by digest only (the wider 2.0.0, not approved): listed, needs approval.
  auto inspect = soyaos("b", {"pack", "inspect", r2, "--format", "json"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const std::string d2 = json::parse(inspect.out)["digest"];
  ASSERT_EQ(soyaos("b", {"pack", "approve", r2}).exit_code, 0);
  ASSERT_EQ(soyaos("b", {"pack", "pull", reg_.address() + "/team/hello@" + d2, "-o", path("p2")}).exit_code, 0);
  // A local pack is listed as before, the registry packs after it.
  ASSERT_EQ(soyaos("b", {"pack", "push", path("src-1.0.0")}).exit_code, 0);
  auto l = soyaos("b", {"pack", "list"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  std::vector<std::string> lines;
  std::istringstream in(l.out);
  for (std::string s; std::getline(in, s);) lines.push_back(s);
  ASSERT_EQ(lines.size(), 3u) << l.out;
  EXPECT_EQ(lines[0].rfind("hello-report@1.0.0  sha256:", 0), 0u) << l.out;
  EXPECT_EQ(lines[1].rfind(reg_.address() + "/team/hello:1.0.0  sha256:", 0), 0u) << l.out;
  EXPECT_NE(lines[1].find("  hello-report@1.0.0  approved"), std::string::npos) << l.out;
  EXPECT_EQ(lines[2].rfind(reg_.address() + "/team/hello@" + d2 + "  " + d2 + "  hello-report@2.0.0  approved", 0), 0u)
      << l.out;

  // JSON: the local entry has remote false; the registry ones their reference, digest and
  // consent. A new approval of a wider version elsewhere does not change what was approved.
  auto j = soyaos("b", {"pack", "list", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json arr = json::parse(j.out);
  ASSERT_EQ(arr.size(), 3u) << j.out;
  EXPECT_EQ(arr[0]["remote"], false);
  EXPECT_EQ(arr[1]["remote"], true);
  EXPECT_EQ(arr[1]["reference"], r1);
  EXPECT_EQ(arr[1]["name"], "hello-report");
  EXPECT_EQ(arr[1]["version"], "1.0.0");
  EXPECT_EQ(arr[1]["approved"], true);
  EXPECT_EQ(arr[2]["digest"], d2);
  EXPECT_EQ(arr[2]["approved"], true);

  // Another home pulled 1.0.0 by approval, then 2.0.0's copy arrives without approval (a
  // run of it is refused): listed as needing approval.
  ASSERT_EQ(soyaos("c", {"pack", "pull", "--approve", r1, "-o", path("c1")}).exit_code, 0);
  fs::copy(t_.path() / "b" / "remote" / "blobs", t_.path() / "c" / "remote" / "blobs",
           fs::copy_options::recursive | fs::copy_options::skip_existing);
  std::ofstream(t_.path() / "c" / "remote" / "refs.json", std::ios::trunc)
      << json{{r2, {{"manifest", d2}, {"at", "2026-12-01T00:00:00Z"}}}}.dump();
  l = soyaos("c", {"pack", "list"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find(r2 + "  " + d2 + "  hello-report@2.0.0  needs approval (wider than the approved " + r1 + ")"),
            std::string::npos)
      << l.out;
}

// One damaged entry of refs.json (not a reference, no manifest digest, a local copy that is
// gone) does not fail `pack list`: the others are listed, and each bad one is named with
// what is wrong with it.
TEST_F(OciUse, PackListNamesADamagedEntryAndListsTheOthers) {
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0"), r1);
  ASSERT_EQ(soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p1")}).exit_code, 0);
  const fs::path refs = t_.path() / "b" / "remote" / "refs.json";
  json doc = json::parse(read_file(refs));
  doc["team/no-registry:1"] = {{"manifest", "sha256:" + std::string(64, 'a')}};
  doc[ref("team/odd:1")] = "not an object";
  doc[ref("team/gone:1")] = {{"manifest", "sha256:" + std::string(64, 'b')}, {"at", "2026-12-01T00:00:00Z"}};
  std::ofstream(refs, std::ios::trunc) << doc.dump();
  auto l = soyaos("b", {"pack", "list"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find(r1 + "  sha256:"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("  hello-report@1.0.0  approved\n"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("team/no-registry:1  -  error: not a registry reference"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find(ref("team/odd:1") + "  -  error: its entry in refs.json names no manifest digest"),
            std::string::npos)
      << l.out;
  EXPECT_NE(l.out.find(ref("team/gone:1") + "  sha256:" + std::string(64, 'b') +
                       "  error: the local copy is incomplete (pull it again)"),
            std::string::npos)
      << l.out;
  auto j = soyaos("b", {"pack", "list", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json arr = json::parse(j.out);
  ASSERT_EQ(arr.size(), 4u) << j.out;
  size_t errors = 0;
  for (const auto& e : arr) errors += e.contains("error") ? 1 : 0;
  EXPECT_EQ(errors, 3u) << j.out;
  // An index that is not a JSON object at all: one row names it, exit 0.
  std::ofstream(refs, std::ios::trunc) << "[1,2]";
  l = soyaos("b", {"pack", "list"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("refs.json  -  error: "), std::string::npos) << l.out;
}

// `pack list` says what an offline `run REF` would decide, signatures included: a pulled
// and approved pack whose repository a trust scope now covers, with no kept signature by
// its key, is "refused (signature: …)", not "approved" — and the run is indeed refused.
TEST_F(OciUse, PackListShowsASignatureTheRunWouldRefuse) {
  ASSERT_EQ(sh("command -v minisign"), 0) << "minisign is not installed (scripts/setup.sh)";
  ASSERT_EQ(sh("minisign -G -W -p " + path("team.pub") + " -s " + path("team.key") + " >/dev/null"), 0);
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0"), r1);
  ASSERT_EQ(soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p1")}).exit_code, 0);
  auto j = soyaos("b", {"pack", "list", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(json::parse(j.out)[0]["signature"], "not required") << j.out;
  std::ofstream(t_.path() / "b" / "moon.yaml", std::ios::trunc)
      << "trust:\n  - scope: \"" << reg_.address() << "/team/*\"\n    keys: [" << path("team.pub") << "]\n";
  auto l = soyaos("b", {"pack", "list"});
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("  hello-report@1.0.0  refused (signature: "), std::string::npos) << l.out;
  j = soyaos("b", {"pack", "list", "--format", "json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json e = json::parse(j.out)[0];
  EXPECT_EQ(e["approved"], true) << j.out;  // the approval stands; the signature is missing
  EXPECT_EQ(e["runs"], false) << j.out;
  EXPECT_EQ(e["signature"].get<std::string>().rfind("refused: ", 0), 0u) << j.out;
  reg_.stop();
  auto run = soyaos("b", {"run", r1, "--input", input(), "--out", path("out")});
  EXPECT_EQ(run.exit_code, 125) << run.err;
  EXPECT_NE(run.err.find("signature"), std::string::npos) << run.err;
}

// `pack sign` and `pack approve` of a client of a Moon daemon go through the daemon's
// protocol: the signature and the approval are the daemon's records, stamped with the
// client's uid by the daemon, and the client grows no embedded moon.db of its own.
TEST_F(OciUse, SignAndApproveGoThroughTheMoonDaemon) {
  ASSERT_EQ(sh("command -v minisign"), 0) << "minisign is not installed (scripts/setup.sh)";
  ASSERT_EQ(sh("minisign -G -W -p " + path("team.pub") + " -s " + path("team.key") + " >/dev/null"), 0);
  fs::permissions(path("team.key"), fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0"), r1);
  const std::string sock = path("moon.sock");
  Background daemon({"moon", "serve", "--socket", sock}, {{"SOYAOS_HOME", path("daemon-home")}});
  auto client = env("client");
  client["SOYAOS_MOON_SOCKET"] = sock;
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    up = run_soyaos({"moon", "status"}, client).exit_code == 0;
    if (!up) ::usleep(20000);
  }
  ASSERT_TRUE(up) << daemon.so_far().err;
  const int64_t uid = rootless_mode() ? 65534 : static_cast<int64_t>(::getuid());

  auto s = run_soyaos({"pack", "sign", r1, "--key", path("team.key")}, client);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  auto a = run_soyaos({"pack", "approve", r1}, client);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("approved  " + r1), std::string::npos) << a.out;
  // The daemon's approval lets the client pull; inspect shows the daemon's records.
  auto p = run_soyaos({"pack", "pull", r1, "-o", path("p1")}, client);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto i = run_soyaos({"pack", "inspect", r1}, client);
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("consent:      approved"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("approved:     "), std::string::npos) << i.out;
  // A local pack pushed to the daemon is signed from the daemon's copy of its manifest.
  ASSERT_EQ(run_soyaos({"pack", "push", path("src-1.0.0")}, client).exit_code, 0);
  auto ls = run_soyaos({"pack", "sign", "hello-report@1.0.0", "--key", path("team.key")}, client);
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  auto li = run_soyaos({"pack", "inspect", "hello-report@1.0.0", "--format", "json"}, client);
  ASSERT_EQ(li.exit_code, 0) << li.err;
  ASSERT_EQ(json::parse(li.out)["signatures"].size(), 1u) << li.out;
  EXPECT_EQ(json::parse(li.out)["signatures"][0]["by"]["uid"], uid);
  auto l = run_soyaos({"pack", "list"}, client);
  EXPECT_NE(l.out.find(r1 + "  sha256:"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("hello-report@1.0.0  approved"), std::string::npos) << l.out;

  // Stored by the daemon, attributed by it.
  for (const char* type : {"pack_signed", "pack_approved"}) {
    auto q = run_soyaos({"scope", "query", "--type", type, "--format", "json"}, client);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    std::istringstream in(q.out);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      const json e = json::parse(line);
      EXPECT_EQ(e["data"]["actor"]["uid"], uid) << line;
      EXPECT_EQ(e["soyaosuid"], uid) << line;
      ++n;
    }
    EXPECT_EQ(n, std::string(type) == "pack_signed" ? 2 : 1) << q.out;
  }
  EXPECT_FALSE(fs::exists(path("client/moon.db"))) << "a command used the embedded Moon";
  EXPECT_TRUE(fs::exists(path("daemon-home/moon.db")));
}

// ---- the question on a terminal ----

// soyaos ARGS on a new pseudo-terminal (its stdin, stdout and stderr): once `prompt` shows,
// `answer` is typed (an empty answer closes the line with Ctrl-D: end of file). What it
// printed (stdout and stderr merged, as a terminal shows them) and its exit status.
RunOutput on_terminal(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                      const std::string& prompt, const std::string& answer) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string s = *e;
    const auto eq = s.find('=');
    if (eq != std::string::npos && env.count(s.substr(0, eq)) != 0) continue;
    envs.push_back(s);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<std::string> argv = {soyaos_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : envs) e.push_back(s.data());
  e.push_back(nullptr);
  RunOutput out;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return out;
  if (pid == 0) {
    ::execve(a[0], a.data(), e.data());
    ::_exit(127);
  }
  bool answered = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    if (!answered && out.out.find(prompt) != std::string::npos) {
      const std::string typed = answer.empty() ? std::string("\x04") : answer;
      if (::write(master, typed.data(), typed.size()) != static_cast<ssize_t>(typed.size())) break;
      answered = true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO: the terminal's last holder closed it
    out.out.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

class OciTerminal : public OciUse {
 protected:
  void SetUp() override {
    OciUse::SetUp();
    if (IsSkipped()) return;
    r1_ = ref("team/hello:1.0.0");
    push(pack("1.0.0"), r1_);
  }
  std::vector<json> events(const std::string& host, const std::string& type) {
    auto r = soyaos(host, {"scope", "query", "--type", type, "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<json> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
    }
    return out;
  }
  static constexpr const char* kPrompt = "Approve these capabilities? [y/N] ";
  std::string r1_;
};

TEST_F(OciTerminal, YesOnTheTerminalApprovesAndRuns) {
  auto r = on_terminal({"run", r1_, "--input", input(), "--out", path("out")}, env("b"), kPrompt, "y\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // The capabilities were shown before the question.
  const auto asked = r.out.find(kPrompt);
  ASSERT_NE(asked, std::string::npos) << r.out;
  EXPECT_LT(r.out.find("+ fs.write       /workdir/out"), asked) << r.out;
  EXPECT_NE(r.out.find("approved: " + r1_), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(path("out/report.md")));
  auto approved = events("b", "pack_approved");
  ASSERT_EQ(approved.size(), 1u);
  EXPECT_EQ(approved[0]["data"]["reference"], r1_);
  // Recorded: the next run asks nothing.
  auto again = run_soyaos({"run", r1_, "--input", input(), "--out", path("out2")}, env("b"));
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("[y/N]"), std::string::npos) << again.err;
}

TEST_F(OciTerminal, NoOrEndOfFileRefusesWith125) {
  for (const std::string answer : {"n\n", "yes please\n", ""}) {
    auto r = on_terminal({"run", r1_, "--input", input(), "--out", path("out")}, env("b"), kPrompt, answer);
    EXPECT_EQ(r.exit_code, 125) << "answer [" << answer << "]: " << r.out;
    EXPECT_NE(r.out.find(kPrompt), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("approve it first: soyaos pack approve " + r1_), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(path("out/report.md")));
  }
  EXPECT_TRUE(events("b", "pack_approved").empty());
  EXPECT_EQ(events("b", "pack_refused").size(), 3u);
  // pull on a terminal: refused with 1.
  auto p = on_terminal({"pack", "pull", r1_, "-o", path("p")}, env("b"), kPrompt, "n\n");
  EXPECT_EQ(p.exit_code, 1) << p.out;
  EXPECT_FALSE(fs::exists(path("p")));
}

TEST_F(OciTerminal, AStdinThatIsNoTerminalIsNeverAsked) {
  // A "y" arriving on a pipe is not the operator at a terminal: no question, refused.
  auto r = run_soyaos_stdin({"run", r1_, "--input", input(), "--out", path("out")}, "y\n", env("b"));
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_EQ(r.err.find("[y/N]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("approve"), std::string::npos) << r.err;
  r = run_soyaos({"pack", "pull", r1_, "-o", path("p")}, env("b"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("[y/N]"), std::string::npos) << r.err;
  EXPECT_TRUE(events("b", "pack_approved").empty());
}

// Review D3: `secret set` (and `pack sign`'s key password) read a hidden value through one
// function. On a terminal: the prompt, one line typed without echo, its newline dropped.
TEST(HiddenInput, SecretSetOnATerminalReadsOneLineWithoutEcho) {
  TempDir t;
  const std::map<std::string, std::string> e = {{"SOYAOS_HOME", (t.path() / "home").string()}};
  auto r = on_terminal({"secret", "set", "TOKEN"}, e, "Value for TOKEN (not echoed, end with Enter): ",
                       "hidden-value-42\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("hidden-value-42"), std::string::npos) << "echoed: " << r.out;
  EXPECT_EQ(read_file(t.path() / "home" / "secrets" / "TOKEN"), "hidden-value-42");
}

}  // namespace
}  // namespace soyaos::testing
