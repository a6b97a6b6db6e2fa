// `soyaos moon serve` / `soyaos moon status` and every Moon command through the daemon
// (docs/moon.md "Daemon mode"): the daemon is a real `soyaos moon serve` child process with
// its own home; the client commands get another SOYAOS_HOME, so anything that went to an
// embedded Moon instead of the daemon would be missing from what the daemon stores.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "harness.h"
#include "moon_daemon_peers.h"

extern char** environ;

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class MoonDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_home_ = (dir_.path() / "daemon-home").string();
    client_home_ = (dir_.path() / "client-home").string();
    socket_ = (dir_.path() / "moon.sock").string();
    log_ = dir_.path() / "daemon.log";
    start_daemon(daemon_home_, {"--socket", socket_});
  }
  void TearDown() override {
    if (daemon_.pid() > 0) {
      daemon_.kill(SIGTERM);
      EXPECT_EQ(daemon_.wait(15), 0) << read_file(log_);
    }
  }
  void start_daemon(const std::string& home, std::vector<std::string> args) {
    daemon_.start(home, args, log_);
    std::string sock = socket_;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--socket") sock = args[i + 1];
    }
    if (args.empty() || std::find(args.begin(), args.end(), "--socket") == args.end()) sock = home + "/moon.sock";
    for (int i = 0; i < 500; ++i) {
      auto r = run_soyaos({"moon", "status", "--format", "json"}, {{"SOYAOS_HOME", home}, {"SOYAOS_MOON_SOCKET", sock}});
      if (r.exit_code == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "the daemon did not answer: " << read_file(log_);
  }
  // A client command through the daemon (SOYAOS_MOON_SOCKET), with its own home.
  RunOutput soyaos(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
    env.emplace("SOYAOS_HOME", client_home_);
    env.emplace("SOYAOS_MOON_SOCKET", socket_);
    return run_soyaos(args, env, dir_.path());
  }
  RunOutput run(const std::string& pack, const std::vector<std::string>& action, const std::string& out = "out") {
    std::vector<std::string> args = {"run", pack, "--no-cache", "--out", (dir_.path() / out).string(), "--"};
    args.insert(args.end(), action.begin(), action.end());
    return soyaos(args);
  }
  std::vector<json> stored(const std::vector<std::string>& filter) {
    std::vector<std::string> args = {"scope", "query", "--format", "json", "--limit", "0"};
    args.insert(args.end(), filter.begin(), filter.end());
    auto r = soyaos(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<json> out;
    for (const auto& l : lines(r.out)) out.push_back(json::parse(l));
    return out;
  }
  // The uid of the client commands (and of the daemon): nobody's in rootless mode.
  static int64_t client_uid() { return rootless_mode() ? 65534 : static_cast<int64_t>(::getuid()); }
  static std::string run_id_of(const RunOutput& r) {
    auto pos = r.err.find("soyaos: run ");
    return pos == std::string::npos ? "" : r.err.substr(pos + 12, 26);
  }
  // The client never opened an embedded Moon of its own.
  void expect_client_home_unused() {
    EXPECT_FALSE(fs::exists(fs::path(client_home_) / "moon.db")) << "a command used the embedded Moon";
  }

  TempDir dir_;
  std::string daemon_home_, client_home_, socket_;
  fs::path log_;
  Daemon daemon_;
};

TEST_F(MoonDaemon, StatusNamesTheDaemonAndTheSocketIsPrivate) {
  auto r = soyaos({"moon", "status", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json st = json::parse(r.out);
  EXPECT_EQ(st["mode"], "daemon");
  EXPECT_EQ(st["socket"], socket_);
  EXPECT_EQ(st["home"], daemon_home_);
  EXPECT_EQ(st["pid"], daemon_.pid());
  EXPECT_EQ(st["packs"], 0);
  EXPECT_EQ(st["events"], 0);
  r = soyaos({"moon", "status"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("mode:     daemon at " + socket_), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pid:      " + std::to_string(daemon_.pid())), std::string::npos) << r.out;
  struct stat st_sock {};
  ASSERT_EQ(::lstat(socket_.c_str(), &st_sock), 0);
  EXPECT_TRUE(S_ISSOCK(st_sock.st_mode));
  EXPECT_EQ(st_sock.st_mode & 07777, 0600u);
  expect_client_home_unused();
}

TEST_F(MoonDaemon, PushListInspectPullThroughTheDaemon) {
  const std::string src = dir_.copy_from_source("examples/hello-report", "src").string();
  auto r = soyaos({"pack", "push", src});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.out.rfind("pushed  hello-report@1.0.0  sha256:", 0), 0u) << r.out;
  const std::string digest = r.out.substr(r.out.find("sha256:"), 71);
  r = soyaos({"pack", "push", src});
  EXPECT_EQ(r.out, "already pushed  hello-report@1.0.0  " + digest + "\n");
  // The daemon's home has it: the pack went over the socket.
  EXPECT_TRUE(fs::exists(fs::path(daemon_home_) / "oci/blobs/sha256" / digest.substr(7)));

  r = soyaos({"pack", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello-report@1.0.0  " + digest + "\n");
  r = soyaos({"pack", "inspect", "hello-report@1.0.0", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["tree_digest"], tree_digest(src).value());

  const fs::path out = dir_.path() / "pulled";
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pulled  hello-report@1.0.0  " + digest + "  -> " + out.string() + "\n");
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    EXPECT_EQ(read_file(e.path()), read_file(out / fs::relative(e.path(), src))) << e.path();
  }
  EXPECT_EQ(tree_digest(out).value(), tree_digest(src).value());
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", out.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;

  // Same version, other content: refused by the daemon.
  dir_.write("src/main.py", "print('changed')\n");
  r = soyaos({"pack", "push", src});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already in the registry with different content"), std::string::npos) << r.err;
  // An invalid manifest: the diagnostics name the client's file, not the daemon's copy.
  dir_.write("bad/soyapack.yaml", "soyapack: v0\nname: demo\n");
  r = soyaos({"pack", "push", (dir_.path() / "bad").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((dir_.path() / "bad" / "soyapack.yaml").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("refused: the manifest is invalid"), std::string::npos) << r.err;
  // A directory whose name holds an ESC and a newline: named escaped once, as the embedded
  // Moon names it (the diagnostics are escaped; the client's path put in front of them too).
  const std::string hostile = "bad\x1b[2J\nsoyaos: ok";
  dir_.write(hostile + "/soyapack.yaml", "soyapack: v0\nname: demo\n");
  r = soyaos({"pack", "push", (dir_.path() / hostile).string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((dir_.path() / "bad\\x1B[2J\\nsoyaos: ok" / "soyapack.yaml").string() + ":"), std::string::npos)
      << r.err;
  EXPECT_NE(soyaos({"pack", "inspect", "nope@1.0.0"}).err.find("nope@1.0.0 is not in the registry"), std::string::npos);

  // A tampered blob: the client checks the digest of what the daemon sends.
  const fs::path blob = fs::path(daemon_home_) / "oci/blobs/sha256" / digest.substr(7);
  std::string bytes = read_file(blob);
  bytes[bytes.size() / 2] ^= 1;
  dir_.write("tampered", bytes);
  fs::rename(dir_.path() / "tampered", blob);
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", (dir_.path() / "t").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tampered"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "t"));
  // Its variant of another size: refused on the size, before anything is unpacked.
  std::ofstream(blob, std::ios::binary | std::ios::app) << "x";
  r = soyaos({"pack", "pull", "hello-report@1.0.0", "-o", (dir_.path() / "t").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tampered"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bytes, not"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "t"));
  expect_client_home_unused();
}

TEST_F(MoonDaemon, ARunsEventsAndFlagGoThroughTheDaemon) {
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  ASSERT_EQ(soyaos({"pack", "push", pack.string()}).exit_code, 0);
  auto bad = run(pack.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  const std::string run_id = run_id_of(bad);
  // Visible from another process, through the daemon...
  auto events = stored({"--run", run_id});
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["type"], "run_started");  // durable before the agent started
  EXPECT_EQ(events[1]["type"], "pack_flagged");  // raised at once (flag first), by this run
  EXPECT_EQ(events[2]["type"], "capability_violation");
  // The daemon, not the client, attributes the run's events (E5): the peer's uid.
  EXPECT_EQ(events[0]["soyaosuid"], client_uid());
  EXPECT_EQ(events[2]["soyaosuid"], client_uid());
  EXPECT_EQ(events[2]["data"]["resource"], "/etc/shadow");
  EXPECT_EQ(events[3]["type"], "run_finished");
  // ... and stored in the daemon's home: the embedded Moon of that home sees them too.
  auto direct = run_soyaos({"scope", "query", "--run", run_id, "--format", "json"},
                           {{"SOYAOS_HOME", daemon_home_}, {"SOYAOS_MOON_SOCKET", ""}});
  EXPECT_EQ(lines(direct.out).size(), 4u) << direct.err;
  // The flag: the next run warns and emits pack_flagged.
  auto next = run(pack.string(), {"exit", "0"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_NE(next.err.find("comet-probe@0.1.0 is flagged"), std::string::npos) << next.err;
  auto flagged = stored({"--type", "pack_flagged"});
  ASSERT_EQ(flagged.size(), 2u);  // raised by the bad run, then the warning of the next
  EXPECT_EQ(flagged[0]["data"]["run_id"], run_id);
  EXPECT_EQ(flagged[1]["data"]["flagged_by_run"], run_id);
  auto inspect = soyaos({"pack", "inspect", "comet-probe@0.1.0"});
  EXPECT_NE(inspect.out.find("/etc/shadow"), std::string::npos) << inspect.out;
  EXPECT_NE(soyaos({"pack", "list"}).out.find("[flagged]"), std::string::npos);
  // unflag through the daemon clears it; the daemon records its peer's uid.
  auto u = soyaos({"pack", "unflag", "comet-probe@0.1.0", "--reason", "daemon test"});
  EXPECT_EQ(u.out, "unflagged  comet-probe@0.1.0  (1 flag cleared)\n") << u.err;
  auto un = stored({"--type", "pack_unflagged"});
  ASSERT_EQ(un.size(), 1u);
  EXPECT_EQ(un[0]["data"]["actor"]["uid"], client_uid());
  EXPECT_EQ(un[0]["data"]["reason"], "daemon test");
  EXPECT_EQ(run(pack.string(), {"exit", "0"}).err.find("is flagged"), std::string::npos);
  // NAME@VERSION from the daemon's registry (extracted into the client's run cache).
  fs::remove_all(pack);
  auto byname = run("comet-probe@0.1.0", {"read", "/workdir/probe.py"});
  EXPECT_EQ(byname.exit_code, 0) << byname.err;
  EXPECT_NE(byname.out.find("RESULT ok"), std::string::npos) << byname.out;
  EXPECT_EQ(run("comet-probe@9.9.9", {"exit", "0"}).exit_code, 125);
  EXPECT_FALSE(fs::exists(fs::path(client_home_) / "moon.db"));
}

TEST_F(MoonDaemon, TwentyParallelRunsLoseNoEvent) {
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  constexpr int kRuns = 20;
  std::vector<RunOutput> results(kRuns);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRuns; ++i) {
    threads.emplace_back([&, i] { results[i] = run(pack.string(), {"read", "/etc/shadow"}, "out" + std::to_string(i)); });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> run_ids;
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 3) << r.err;
    run_ids.insert(run_id_of(r));
  }
  ASSERT_EQ(run_ids.size(), static_cast<size_t>(kRuns));
  auto events = stored({"--pack", "comet-probe"});
  // Each run raised its own flag (stored first); a run that started after another's flag
  // was raised also carries the warning form (raised: false) before its run_started.
  std::map<std::string, std::vector<std::string>> by_run;
  std::map<std::string, int> raised;
  for (const auto& e : events) {
    const std::string id = e["data"].value("run_id", e["data"].value("flagged_by_run", ""));
    if (e["type"] == "pack_flagged") {
      if (e["data"].value("raised", false)) ++raised[e["data"]["run_id"].get<std::string>()];
      continue;
    }
    by_run[id].push_back(e["type"]);
  }
  for (const auto& id : run_ids) {
    EXPECT_EQ(by_run[id], (std::vector<std::string>{"run_started", "capability_violation", "run_finished"})) << id;
    EXPECT_EQ(raised[id], 1) << id;
  }
  EXPECT_GE(events.size(), 4u * kRuns);
  auto st = json::parse(soyaos({"moon", "status", "--format", "json"}).out);
  EXPECT_EQ(st["events"], events.size());
  expect_client_home_unused();
}

// Group commit (issue #16, E4; docs/moon.md "Group commit"): the batches of events that
// concurrent runs send the daemon together are committed in one transaction, and each run
// is answered only once its own events are durable. A long gathering delay
// (SOYAOS_MOON_GROUP_DELAY_US) makes groups certain here; nothing may be lost, every run's
// record is complete and in order, and the chain verifies.
TEST_F(MoonDaemon, ConcurrentRunsAreGroupCommittedAndLoseNothing) {
  daemon_.kill(SIGTERM);
  ASSERT_EQ(daemon_.wait(15), 0) << read_file(log_);
  ::setenv("SOYAOS_MOON_GROUP_DELAY_US", "200000", 1);  // read by the daemon's environment only
  start_daemon(daemon_home_, {"--socket", socket_});
  ::unsetenv("SOYAOS_MOON_GROUP_DELAY_US");
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  constexpr int kRuns = 12;
  std::vector<RunOutput> results(kRuns);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRuns; ++i) {
    threads.emplace_back(
        [&, i] { results[i] = run(pack.string(), {"write", "/workdir/out/r"}, "gc-out" + std::to_string(i)); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << r.err;
  auto events = stored({"--pack", "comet-probe"});
  std::map<std::string, std::vector<std::string>> by_run;
  for (const auto& e : events) by_run[e["data"]["run_id"].get<std::string>()].push_back(e["type"]);
  ASSERT_EQ(by_run.size(), static_cast<size_t>(kRuns));
  for (const auto& [id, types] : by_run) {
    ASSERT_GE(types.size(), 2u) << id;
    EXPECT_EQ(types.front(), "run_started") << id;
    EXPECT_EQ(types.back(), "run_finished") << id;
  }
  // The record as stored verifies: chain, checkpoints, head (read directly, not via the daemon).
  auto check = run_soyaos({"moon", "check"}, {{"SOYAOS_HOME", daemon_home_}, {"SOYAOS_MOON_SOCKET", ""}});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  // The daemon says at its end how many transactions its batches took: fewer than batches.
  daemon_.kill(SIGTERM);
  ASSERT_EQ(daemon_.wait(15), 0) << read_file(log_);
  const std::string log = read_file(log_);
  const auto at = log.rfind("group commit: ");
  ASSERT_NE(at, std::string::npos) << log;
  unsigned long long batches = 0, stored_events = 0, transactions = 0, largest = 0, failed = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + at,
                        "group commit: %llu batches of events (%llu events) in %llu transactions, at most %llu "
                        "batches in one; %llu failed",
                        &batches, &stored_events, &transactions, &largest, &failed),
            5)
      << log.substr(at);
  EXPECT_EQ(stored_events, events.size());
  EXPECT_GE(batches, 2u * kRuns);  // at least run_started, and the rest, for each run
  EXPECT_LT(transactions, batches) << log.substr(at);
  EXPECT_GE(largest, 2u);
  EXPECT_EQ(failed, 0u);
}

TEST_F(MoonDaemon, AnExplicitSocketThatDoesNotAnswerIsAClearError) {
  const std::string nothing = (dir_.path() / "nothing.sock").string();
  const std::map<std::string, std::string> env = {{"SOYAOS_MOON_SOCKET", nothing}};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"pack", "list"}, std::vector<std::string>{"scope", "query"},
        std::vector<std::string>{"moon", "status"}}) {
    auto r = soyaos(args, env);
    EXPECT_EQ(r.exit_code, 1) << args[0];
    EXPECT_NE(r.err.find("the Moon daemon at " + nothing + " (SOYAOS_MOON_SOCKET) does not answer"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
  }
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  auto r = soyaos({"run", pack.string(), "--no-cache", "--out", (dir_.path() / "o").string(), "--", "write",
                   "/workdir/out/ran"},
                  env);
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("SOYAOS_MOON_SOCKET"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "o" / "ran"));
  expect_client_home_unused();
}

TEST_F(MoonDaemon, ASecondDaemonOnTheSameSocketIsRefused) {
  Daemon second;
  const fs::path log2 = dir_.path() / "second.log";
  second.start(daemon_home_, {"--socket", socket_}, log2);
  EXPECT_EQ(second.wait(10), 1);
  EXPECT_NE(read_file(log2).find("a Moon daemon already answers on " + socket_), std::string::npos) << read_file(log2);
  // The first one still answers.
  EXPECT_EQ(soyaos({"moon", "status"}).exit_code, 0);
}

TEST_F(MoonDaemon, SigtermRemovesTheSocket) {
  daemon_.kill(SIGTERM);
  EXPECT_EQ(daemon_.wait(15), 0) << read_file(log_);
  EXPECT_FALSE(fs::exists(socket_));
}

TEST_F(MoonDaemon, AKilledDaemonFallsBackToEmbeddedOnlyWithoutAnExplicitSocket) {
  // A daemon on the home's default socket, used by plain commands (no SOYAOS_MOON_SOCKET).
  daemon_.kill(SIGTERM);
  ASSERT_EQ(daemon_.wait(15), 0);
  const std::string home = daemon_home_;
  const std::string sock = home + "/moon.sock";
  start_daemon(home, {});
  const std::map<std::string, std::string> plain = {{"SOYAOS_HOME", home}, {"SOYAOS_MOON_SOCKET", ""}};
  auto st = run_soyaos({"moon", "status", "--format", "json"}, plain);
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(json::parse(st.out)["mode"], "daemon");
  EXPECT_EQ(json::parse(st.out)["socket"], sock);
  const std::string src = dir_.copy_from_source("examples/hello-report", "src").string();
  ASSERT_EQ(run_soyaos({"pack", "push", src}, plain).exit_code, 0);

  daemon_.kill(SIGKILL);  // the socket file stays behind
  ASSERT_TRUE(fs::exists(sock));
  // Not explicit: the embedded Moon of the same home, which has the pack.
  st = run_soyaos({"moon", "status", "--format", "json"}, plain);
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(json::parse(st.out)["mode"], "embedded");
  EXPECT_EQ(json::parse(st.out)["stale_socket"], sock);
  auto list = run_soyaos({"pack", "list"}, plain);
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("hello-report@1.0.0"), std::string::npos);
  // Explicit: a clear error, no fallback.
  auto r = run_soyaos({"pack", "list"}, {{"SOYAOS_HOME", home}, {"SOYAOS_MOON_SOCKET", sock}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not answer"), std::string::npos) << r.err;
  // A new daemon replaces the stale socket.
  start_daemon(home, {});
  st = run_soyaos({"moon", "status", "--format", "json"}, plain);
  EXPECT_EQ(json::parse(st.out)["mode"], "daemon");
  EXPECT_EQ(json::parse(st.out)["packs"], 1);
}

TEST_F(MoonDaemon, ADaemonThatDiesDuringARun) {
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  auto run_killing_daemon = [&](const std::map<std::string, std::string>& env) {
    RunOutput r;
    std::thread t([&] {
      r = run_soyaos({"run", pack.string(), "--no-cache", "--out", (dir_.path() / "o").string(), "--", "sleep", "2"},
                     env, dir_.path());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    daemon_.kill(SIGKILL);
    t.join();
    return r;
  };
  // Explicit socket: storing the events fails, and the run says so (125), never success.
  auto r = run_killing_daemon({{"SOYAOS_HOME", client_home_}, {"SOYAOS_MOON_SOCKET", socket_}});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find(socket_), std::string::npos) << r.err;
  // The home's own socket: the events go to the embedded Moon of the same home.
  std::error_code ec;
  fs::remove(socket_, ec);
  start_daemon(daemon_home_, {});
  r = run_killing_daemon({{"SOYAOS_HOME", daemon_home_}, {"SOYAOS_MOON_SOCKET", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto q = run_soyaos({"scope", "query", "--format", "json", "--type", "run_finished"},
                      {{"SOYAOS_HOME", daemon_home_}, {"SOYAOS_MOON_SOCKET", ""}});
  EXPECT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(lines(q.out).size(), 1u) << q.out;
}

TEST_F(MoonDaemon, GroupMakesTheSocket0660) {
  // A group the daemon's user is in: its own egid (nogroup for the rootless daemon).
  const gid_t gid = rootless_mode() ? 65534 : ::getegid();
  group* g = ::getgrgid(gid);
  ASSERT_NE(g, nullptr);
  const std::string name = g->gr_name;
  const std::string sock = (dir_.path() / "group.sock").string();
  Daemon d;
  d.start(daemon_home_, {"--socket", sock, "--group", name}, dir_.path() / "group.log");
  for (int i = 0; i < 250 && !fs::exists(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  struct stat st {};
  ASSERT_EQ(::lstat(sock.c_str(), &st), 0) << read_file(dir_.path() / "group.log");
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, gid);
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(15), 0);
  Daemon bad;
  bad.start(daemon_home_, {"--socket", sock, "--group", "no-such-group-soyaos"}, dir_.path() / "bad.log");
  EXPECT_EQ(bad.wait(10), 1);
  EXPECT_NE(read_file(dir_.path() / "bad.log").find("no such group"), std::string::npos);
}


json event_of(const std::string& type, const std::string& run_id, const json& data_extra = json::object()) {
  json data = {{"run_id", run_id}, {"pack", "comet-probe"}, {"version", "0.1.0"}, {"digest", "sha256:00"}};
  for (const auto& [k, v] : data_extra.items()) data[k] = v;
  return {{"specversion", "1.0"}, {"id", "x-" + type}, {"source", "soyaos://forged/comet/" + run_id},
          {"type", type}, {"time", "2026-12-01T00:00:00.000000Z"}, {"subject", "comet-probe@0.1.0"},
          {"datacontenttype", "application/json"}, {"data", data}, {"soyaosuid", 0}};
}

TEST_F(MoonDaemon, AClientOfAnotherUidWritesOnlyIntoRunsItStarted) {
  // A real run of root's, with a violation and its flag.
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  auto bad = run(pack.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  const std::string theirs = run_id_of(bad);
  const size_t before = stored({"--run", theirs}).size();
  // A daemon of the same home whose socket the group nogroup may use: nobody connects.
  const std::string sock = (dir_.path() / "peer.sock").string();
  Daemon d;
  d.start(daemon_home_, {"--socket", sock, "--group", "nogroup"}, dir_.path() / "peer.log");
  for (int i = 0; i < 250 && !fs::exists(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string mine = "01NOBODYRUN0000000000000001";
  // One connection as nobody; it drops without run_end when the client exits: connection_lost.
  auto replies = call_as_nobody(
      sock, {{{"op", "append_events"}, {"events", json::array({event_of("capability_violation", theirs)})}},
             {{"op", "run_events"}, {"run_id", theirs}, {"events", json::array({event_of("run_finished", theirs)})}},
             {{"op", "flag"}, {"name", "comet-probe"}, {"version", "0.1.0"}, {"digest", ""}, {"run_id", theirs},
              {"violation", event_of("capability_violation", theirs)}},
             {{"op", "run_begin"}, {"run_id", theirs}, {"event", event_of("run_started", theirs)}},
             // Its own run: accepted, attributed to nobody whatever it claims, flagged as its own.
             {{"op", "run_begin"}, {"run_id", mine}, {"event", event_of("run_started", mine)}},
             {{"op", "run_events"}, {"run_id", mine}, {"events", json::array({event_of("capability_violation", mine)})}},
             {{"op", "run_flag"}, {"run_id", mine}, {"violation", event_of("capability_violation", theirs)}}});
  ASSERT_EQ(replies.size(), 7u) << read_file(dir_.path() / "peer.log");
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(replies[i]["ok"], false) << replies[i].dump();
    EXPECT_EQ(replies[i]["errno"], i == 3 ? EEXIST : EPERM) << replies[i].dump();
  }
  EXPECT_EQ(replies[4]["ok"], true) << replies[4].dump();
  EXPECT_EQ(replies[5]["ok"], true) << replies[5].dump();
  EXPECT_EQ(replies[6]["ok"], false) << "a flag's reason must be the run's own violation: " << replies[6].dump();
  // Root's run is untouched; nobody's is attributed to nobody and marked when it dropped.
  EXPECT_EQ(stored({"--run", theirs}).size(), before);
  std::vector<json> own;
  for (int i = 0; i < 250; ++i) {
    own = stored({"--run", mine});
    if (own.size() >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(own.size(), 3u);
  EXPECT_EQ(own[0]["type"], "run_started");
  EXPECT_EQ(own[0]["soyaosuid"], 65534);
  EXPECT_EQ(own[0]["soyaosuser"], "nobody");
  EXPECT_EQ(own[1]["soyaosuid"], 65534);
  EXPECT_EQ(own[2]["type"], "run_incomplete");
  EXPECT_EQ(own[2]["data"]["reason"], "connection_lost");
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(15), 0);
}

// C8 (4), issue #17: clearing a flag hides a pack that misbehaved. A member of the socket's
// group who is neither root nor the daemon's own uid is refused (EPERM, a clear message,
// the daemon's log names the client) and the flag stays; root clears it, as an event that
// records root as the actor.
TEST_F(MoonDaemon, OnlyRootOrTheMoonsOwnerMayClearAFlag) {
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  auto bad = run(pack.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  ASSERT_EQ(stored({"--type", "pack_flagged"}).size(), 1u);
  const std::string sock = (dir_.path() / "peer.sock").string();
  Daemon d;
  d.start(daemon_home_, {"--socket", sock, "--group", "nogroup"}, dir_.path() / "peer.log");
  for (int i = 0; i < 250 && !fs::exists(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto replies = call_as_nobody(sock, {{{"op", "unflag"}, {"name", "comet-probe"}, {"version", "0.1.0"},
                                        {"reason", "nothing to see here"}},
                                       {{"op", "flags"}, {"name", "comet-probe"}, {"version", "0.1.0"}, {"digest", ""}}});
  ASSERT_EQ(replies.size(), 2u) << read_file(dir_.path() / "peer.log");
  EXPECT_EQ(replies[0]["ok"], false) << replies[0].dump();
  EXPECT_EQ(replies[0]["errno"], EPERM) << replies[0].dump();
  const std::string why = replies[0].value("error", "");
  EXPECT_NE(why.find("only root or the Moon's owner"), std::string::npos) << why;
  EXPECT_NE(why.find("uid 65534"), std::string::npos) << why;
  ASSERT_EQ(replies[1]["ok"], true) << replies[1].dump();
  ASSERT_EQ(replies[1]["flags"].size(), 1u) << replies[1].dump();
  EXPECT_EQ(replies[1]["flags"][0]["active"], true) << "the refused unflag cleared nothing: " << replies[1].dump();
  EXPECT_TRUE(stored({"--type", "pack_unflagged"}).empty());
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(15), 0);
  EXPECT_NE(read_file(dir_.path() / "peer.log").find("unflag by uid=65534"), std::string::npos)
      << read_file(dir_.path() / "peer.log");
  // Root may: the clearing is an event with its actor and reason.
  auto u = soyaos({"pack", "unflag", "comet-probe@0.1.0", "--reason", "reviewed"});
  EXPECT_EQ(u.out, "unflagged  comet-probe@0.1.0  (1 flag cleared)\n") << u.err;
  auto un = stored({"--type", "pack_unflagged"});
  ASSERT_EQ(un.size(), 1u);
  EXPECT_EQ(un[0]["data"]["actor"]["uid"], 0);
  EXPECT_EQ(un[0]["data"]["reason"], "reviewed");
  auto raised = stored({"--type", "pack_flagged"});
  ASSERT_FALSE(raised.empty());
  EXPECT_TRUE(raised[0]["data"].contains("actor")) << "raising a flag records who ran the run: " << raised[0].dump();
}

// Flags that travel, through the daemon (moon/server_flags.h): the registry I/O is the
// client's, the records are the daemon's. A client of another uid may not point content at
// a registry of its choosing, queue, see or report on another user's queued flag, or slip
// in a malformed received flag; a valid received flag is recorded with the daemon's clock
// (its flagged_at stays the registry's claim) and the client named as who reported it.
TEST_F(MoonDaemon, FlagsThatTravelTrustAClientOnlyWithItsOwnRuns) {
  const fs::path pack = dir_.copy_from_source("tests/fixtures/probe", "pack");
  auto bad = run(pack.string(), {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  const std::string theirs = run_id_of(bad);
  const auto started = stored({"--run", theirs, "--type", "run_started"});
  ASSERT_EQ(started.size(), 1u);
  const std::string tree = started[0]["data"]["digest"];
  const std::string sock = (dir_.path() / "peer.sock").string();
  Daemon d;
  d.start(daemon_home_, {"--socket", sock, "--group", "nogroup"}, dir_.path() / "peer.log");
  for (int i = 0; i < 250 && !fs::exists(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string b = "sha256:" + std::string(64, 'b'), c = "sha256:" + std::string(64, 'c');
  // Root (the owner) says where root's content came from and queues root's run's flag. The
  // registry is a closed loopback port: nothing is published in this test.
  json origin = {{"tree_digest", tree}, {"registry", "127.0.0.1:9"}, {"repository", "team/probe"},
                 {"manifest_digest", b},  {"manifest_size", 500},      {"name", "comet-probe"},
                 {"version", "0.1.0"}};
  int64_t queued_id = 0;
  {
    RawClient root(sock);
    ASSERT_TRUE(root.connected());
    EXPECT_EQ(json::parse(root.call({{"op", "remote_origin"}, {"origin", origin}}))["ok"], true);
    const json q = json::parse(root.call({{"op", "queue_run_flag"}, {"run_id", theirs}}));
    ASSERT_EQ(q["ok"], true) << q.dump();
    EXPECT_EQ(q["queued"]["registries"], json::array({"127.0.0.1:9"})) << q.dump();
    const json l = json::parse(root.call({{"op", "queued_flags"}}));
    ASSERT_EQ(l["flags"].size(), 1u) << l.dump();
    queued_id = l["flags"][0]["id"];
    const json body = json::parse(l["flags"][0]["body"].get<std::string>());
    EXPECT_EQ(body["run_id"], theirs);
    EXPECT_EQ(body["reason"]["surface"], "fs");
    EXPECT_EQ(body["reason"]["resource"].get<std::string>().rfind("sha256:", 0), 0u) << body;
  }
  json elsewhere = origin;
  elsewhere["repository"] = "evil/exfil";
  json flag = {{"name", "comet-probe"}, {"version", "0.1.0"}, {"tree_digest", tree}, {"registry", "127.0.0.1:9"},
               {"repository", "team/probe"}, {"manifest_digest", b}, {"referrer", c}, {"run_id", "01REMOTERUN"},
               {"flagged_at", "2001-01-01T00:00:00Z"}, {"surface", "fs"}, {"resource", "sha256:" + std::string(64, 'd')},
               {"moon", ""}};
  json bogus = flag;
  bogus["surface"] = "everything";
  const std::string mine = "01NOBODYRUN0000000000000002";
  const json started_of_tree = event_of("run_started", mine, {{"digest", tree}});
  auto replies = call_as_nobody(sock, {{{"op", "remote_origin"}, {"origin", elsewhere}},
                                       {{"op", "queue_run_flag"}, {"run_id", theirs}},
                                       {{"op", "queued_flags"}},
                                       {{"op", "flag_publish_result"}, {"id", queued_id}, {"referrer", c}},
                                       {{"op", "received_flag"}, {"flag", bogus}},
                                       {{"op", "received_flag"}, {"flag", flag}},
                                       // Its own run of root's content, with a violation it streamed:
                                       // not queued, only a note (the record is the client's word).
                                       {{"op", "run_begin"}, {"run_id", mine}, {"event", started_of_tree}},
                                       {{"op", "run_events"}, {"run_id", mine},
                                        {"events", json::array({event_of("capability_violation", mine)})}},
                                       {{"op", "queue_run_flag"}, {"run_id", mine}}});
  ASSERT_EQ(replies.size(), 9u) << read_file(dir_.path() / "peer.log");
  EXPECT_EQ(replies[6]["ok"], true) << replies[6].dump();
  EXPECT_EQ(replies[7]["ok"], true) << replies[7].dump();
  ASSERT_EQ(replies[8]["ok"], true) << replies[8].dump();
  EXPECT_TRUE(replies[8]["queued"]["registries"].empty()) << replies[8].dump();
  EXPECT_NE(replies[8]["queued"]["notes"].dump().find("only the runs of root or the Moon's owner"), std::string::npos)
      << replies[8].dump();
  // Another user's origin is not recorded (it would apply to the owner's runs too), and the
  // flag of another user's run is not queued: both only in the daemon's log.
  EXPECT_EQ(replies[0]["ok"], true) << replies[0].dump();
  EXPECT_EQ(replies[0]["recorded"], false) << replies[0].dump();
  EXPECT_EQ(replies[1]["errno"], EPERM) << replies[1].dump();
  ASSERT_EQ(replies[2]["ok"], true) << replies[2].dump();
  EXPECT_TRUE(replies[2]["flags"].empty()) << "another user's queued flag was shown: " << replies[2].dump();
  EXPECT_EQ(replies[3]["errno"], EPERM) << replies[3].dump();
  EXPECT_EQ(replies[4]["errno"], EINVAL) << replies[4].dump();
  ASSERT_EQ(replies[5]["ok"], true) << replies[5].dump();
  EXPECT_EQ(replies[5]["added"], true) << replies[5].dump();
  // Root's flag still waits; the received one names its reporter and the daemon's time.
  {
    RawClient root(sock);
    EXPECT_EQ(json::parse(root.call({{"op", "queued_flags"}}))["flags"].size(), 1u);
  }
  const auto received = stored({"--type", "pack_flagged"});
  ASSERT_EQ(received.size(), 2u);
  const json& e = received[1];
  EXPECT_EQ(e["data"]["received"], true) << e.dump();
  EXPECT_EQ(e["data"]["reported_by"]["uid"], 65534) << e.dump();
  EXPECT_EQ(e["data"]["flagged_at"], "2001-01-01T00:00:00Z") << e.dump();
  EXPECT_GT(e["time"].get<std::string>(), "2020") << "the event's time is the daemon's clock: " << e.dump();
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(15), 0);
  const std::string log = read_file(dir_.path() / "peer.log");
  EXPECT_NE(log.find("queue_run_flag by uid=65534"), std::string::npos) << log;
  EXPECT_NE(log.find("received flag of comet-probe@0.1.0"), std::string::npos) << log;
}

// Signatures, approvals and run-less events through the daemon (docs/signing.md "Through a
// Moon daemon"): a non-owner's approval is refused with EPERM and the daemon's log names
// the client; the events' time is the daemon's clock, not the client's; a signature record
// and an event are bounded in size, and a digest's signature records in number.
TEST_F(MoonDaemon, ConsentRecordsAreStampedAndBoundedByTheDaemon) {
  const std::string sock = (dir_.path() / "peer.sock").string();
  Daemon d;
  d.start(daemon_home_, {"--socket", sock, "--group", "nogroup"}, dir_.path() / "peer.log");
  for (int i = 0; i < 250 && !fs::exists(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string digest = "sha256:" + std::string(64, 'e');
  auto event = [&](const std::string& type, const json& extra) {
    json data = {{"run_id", nullptr}, {"manifest_digest", digest}, {"actor", {{"uid", 0}, {"user", "root"}}}};
    for (const auto& [k, v] : extra.items()) data[k] = v;
    return json{{"specversion", "1.0"}, {"id", "x-" + type}, {"source", "soyaos://forged/moon"}, {"type", type},
                {"time", "2001-01-01T00:00:00.000000Z"}, {"subject", "hello@1.0.0"}, {"datacontenttype", "application/json"},
                {"data", data}};
  };
  auto signature = [&](int i) {
    return json{{"manifest_digest", digest}, {"key_id", "00000000000000" + std::to_string(10 + i)},
                {"signature", "untrusted comment: " + std::to_string(i) + "\nRWQ…\n"}, {"reference", "r"}};
  };
  std::vector<json> reqs = {
      {{"op", "add_approval"},
       {"approval", {{"repository", "127.0.0.1:9/team/hello"}, {"digest", digest}, {"manifest", "name: hello"}}},
       {"event", event("pack_approved", json::object())}},
      {{"op", "pack_event"}, {"event", event("pack_refused", {{"reason", "approval"}})}},
      {{"op", "pack_event"}, {"event", event("pack_refused", {{"detail", std::string(70 * 1024, 'x')}})}},
      {{"op", "add_signature"},
       {"signature", {{"manifest_digest", digest}, {"key_id", "ab"}, {"signature", std::string(65 * 1024, 's')}}},
       {"event", nullptr}}};
  for (int i = 0; i < 33; ++i) reqs.push_back({{"op", "add_signature"}, {"signature", signature(i)}, {"event", nullptr}});
  reqs.push_back({{"op", "add_signature"}, {"signature", signature(0)}, {"event", nullptr}});  // known: not a 33rd
  reqs.push_back({{"op", "signatures"}, {"digest", digest}});
  auto replies = call_as_nobody(sock, reqs);
  ASSERT_EQ(replies.size(), reqs.size()) << read_file(dir_.path() / "peer.log");
  EXPECT_EQ(replies[0]["errno"], EPERM) << replies[0].dump();
  EXPECT_NE(replies[0].value("error", "").find("only root or the Moon's owner"), std::string::npos) << replies[0].dump();
  EXPECT_NE(replies[0].value("error", "").find("uid 65534"), std::string::npos) << replies[0].dump();
  EXPECT_EQ(replies[1]["ok"], true) << replies[1].dump();
  EXPECT_EQ(replies[2]["errno"], EFBIG) << "an oversized event: " << replies[2].dump().substr(0, 300);
  EXPECT_EQ(replies[3]["errno"], EFBIG) << "an oversized signature: " << replies[3].dump().substr(0, 300);
  for (size_t i = 4; i < 4 + 32; ++i) EXPECT_EQ(replies[i]["ok"], true) << i << " " << replies[i].dump();
  EXPECT_EQ(replies[36]["errno"], ENOSPC) << replies[36].dump();
  EXPECT_NE(replies[36].value("error", "").find("already has 32 signatures"), std::string::npos) << replies[36].dump();
  EXPECT_EQ(replies[37]["ok"], true) << "a signature already held is no 33rd: " << replies[37].dump();
  EXPECT_EQ(replies[37]["added"], false) << replies[37].dump();
  EXPECT_EQ(replies[38]["signatures"].size(), 32u);
  {
    // The bound is nobody's: root (the owner) still keeps a signature for that digest.
    RawClient root(sock);
    ASSERT_TRUE(root.connected());
    const json added = json::parse(root.call({{"op", "add_signature"}, {"signature", signature(40)}, {"event", nullptr}}));
    EXPECT_EQ(added["ok"], true) << added.dump();
    EXPECT_EQ(json::parse(root.call({{"op", "signatures"}, {"digest", digest}}))["signatures"].size(), 33u);
  }
  d.kill(SIGTERM);
  EXPECT_EQ(d.wait(15), 0);
  EXPECT_NE(read_file(dir_.path() / "peer.log").find("add_approval by uid=65534"), std::string::npos)
      << read_file(dir_.path() / "peer.log");
  // Nothing approved; the refused event is stored with the daemon's time and its peer.
  EXPECT_TRUE(stored({"--type", "pack_approved"}).empty());
  auto refused = stored({"--type", "pack_refused"});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_GT(refused[0]["time"].get<std::string>(), "2020") << "the client's time was kept: " << refused[0].dump();
  EXPECT_EQ(refused[0]["data"]["actor"]["uid"], 65534);
  EXPECT_EQ(refused[0]["soyaosuid"], 65534);
}

// The daemon keeps netfilter's hooks enabled (comet::hold_netfilter_hooks, issue #16): it
// holds an fd to a network namespace of its own, not the host's, holding the Comet's
// ruleset; the run through it works as always.
TEST_F(MoonDaemon, HoldsANetnsWithTheCometsHooks) {
  std::error_code ec;
  const auto host_ns = fs::read_symlink("/proc/self/ns/net", ec);
  ASSERT_FALSE(ec) << ec.message();
  std::string held;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(daemon_.pid()) + "/fd", ec)) {
    const auto target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("net:[", 0) == 0 && target != host_ns) held = e.path().string();
  }
  ASSERT_FALSE(held.empty()) << "no netns fd in the daemon: " << read_file(log_);
  const std::string listing = dir_.path() / "ruleset.txt";
  const std::string cmd = "nsenter --net=" + held + " nft list ruleset > " + listing + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(listing);
  const std::string rules = read_file(listing);
  EXPECT_NE(rules.find("table inet soyaos"), std::string::npos) << rules;
  EXPECT_NE(rules.find("type nat hook output"), std::string::npos) << rules;
  EXPECT_NE(rules.find("ct state established,related accept"), std::string::npos) << rules;
  EXPECT_EQ(read_file(log_).find("netfilter hooks not held"), std::string::npos) << read_file(log_);
}

}  // namespace
}  // namespace soyaos::testing
