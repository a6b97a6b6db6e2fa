// Flags travel (SPEC.md C12, C8 (4); docs/registry.md "Flags travel"): a violation of a run
// of a pack that came from a REAL registry (Debian's docker-registry on 127.0.0.1) is
// published there as a flag referrer of the pack's manifest; another host (another
// SOYAOS_HOME) that inspects, pulls or runs that version sees the flag, warns on each run
// and emits pack_flagged. A registry that is down at the violation costs the run nothing:
// the flag is queued and published by a later command. A hostile registry's flood of
// malformed flag referrers is bounded.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "registry_server.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFlagType = "application/vnd.soyaos.flag.v1+json";

std::string field(const std::string& text, const std::string& after) {
  const auto p = text.find(after);
  if (p == std::string::npos) return "";
  const auto s = p + after.size();
  return text.substr(s, text.find_first_of(" \n", s) - s);
}

class OciFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RegistryServer::available()) GTEST_SKIP() << "docker-registry is not installed (scripts/setup.sh)";
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    fs::create_directories(t_.path() / "docker");
    pack_ = t_.copy_from_source("tests/fixtures/probe", "probe").string();
  }
  void start(int port = 0, bool access_log = false) {
    RegistryServer::Options o;
    o.port = port;
    o.access_log = access_log;
    ASSERT_EQ(reg_.start(t_.path() / "registry", o), "");
    insecure_ = reg_.address();
  }
  [[nodiscard]] std::map<std::string, std::string> env_of(const std::string& host) const {
    return {{"SOYAOS_HOME", (t_.path() / host).string()},
            {"DOCKER_CONFIG", (t_.path() / "docker").string()},
            {"SOYAOS_INSECURE_REGISTRIES", insecure_},
            {"SOYAOS_REGISTRY_BACKOFF_MS", "10"}};
  }
  RunOutput soyaos(const std::string& host, const std::vector<std::string>& args, bool trace_phases = false) const {
    auto env = env_of(host);
    if (trace_phases) env["SOYAOS_TRACE_PHASES"] = "1";
    return run_soyaos(args, env, t_.path());
  }
  [[nodiscard]] std::string ref(const std::string& repo_tag) const { return reg_.address() + "/" + repo_tag; }
  RunOutput run(const std::string& host, const std::string& r, const std::vector<std::string>& action) {
    std::vector<std::string> args = {"run", r, "--out", (t_.path() / ("out-" + std::to_string(++runs_))).string(), "--"};
    args.insert(args.end(), action.begin(), action.end());
    return soyaos(host, args);
  }
  // Pushes hello-report from host "a" to a real registry (for its blobs), serves them from
  // the fake registry (tests/fixtures/fake_registry.py) in `mode`, pulls on host "b" with
  // --approve, stops the fake. `fake` is its HOST:PORT.
  RunOutput pull_from_fake(const std::string& mode, std::string& fake) {
    start();
    auto pushed = soyaos("a", {"pack", "push", t_.copy_from_source("examples/hello-report", "hello").string(),
                               ref("team/hello:1.0.0")});
    EXPECT_EQ(pushed.exit_code, 0) << pushed.err;
    const std::string md = field(pushed.out, ref("team/hello:1.0.0") + "  ");
    reg_.stop();
    const fs::path port_file = t_.path() / "fake.port";
    const pid_t pid = ::fork();
    if (pid == 0) {
      (void)::freopen("/dev/null", "w", stderr);
      ::execlp("python3", "python3", source_path("tests/fixtures/fake_registry.py").c_str(),
               (t_.path() / "a" / "remote" / "blobs" / "sha256").c_str(), md.c_str(), mode.c_str(), port_file.c_str(),
               (t_.path() / "fake.log").c_str(), nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(fs::exists(port_file));
    fake = "127.0.0.1:" + read_file(port_file);
    insecure_ = fake;
    std::ofstream(t_.path() / "docker" / "config.json") << R"({"auths":{")" << fake << R"(":{"auth":"dTpw"}}})";
    auto pull = soyaos("b", {"pack", "pull", "--approve", fake + "/team/hello:1.0.0", "-o", (t_.path() / "x").string()});
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return pull;
  }
  // Pushes the probe (from host "dev") and returns its manifest digest.
  std::string push(const std::string& r) {
    auto p = soyaos("dev", {"pack", "push", pack_, r});
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return field(p.out, r + "  ");
  }
  // The flag referrers of `digest` in team/probe, read with skopeo and the registry API
  // (docker-registry 2.8 has no referrers API: the tag schema's index, sha256-HEX).
  std::vector<json> flag_bodies(const std::string& digest) {
    std::vector<json> out;
    std::string index;
    // A missing tag is "no flag"; skopeo's stderr stays out of the JSON.
    if (sh("(skopeo inspect --raw --tls-verify=false docker://" + ref("team/probe:sha256-" + digest.substr(7)) +
               " 2>/dev/null)",
           &index) != 0)
      return out;
    const json idx = json::parse(index);
    for (const auto& m : idx["manifests"]) {
      if (!m.contains("artifactType") || m["artifactType"] != json(kFlagType)) continue;
      std::string manifest, body;
      EXPECT_EQ(sh("(skopeo inspect --raw --tls-verify=false docker://" + ref("team/probe@") +
                       m["digest"].get<std::string>() + " 2>/dev/null)",
                   &manifest),
                0)
          << manifest;
      const json mj = json::parse(manifest);
      EXPECT_EQ(mj["subject"]["digest"], digest);
      EXPECT_EQ(mj["layers"][0]["mediaType"], kFlagType);
      EXPECT_EQ(sh("curl -sf http://" + reg_.address() + "/v2/team/probe/blobs/" +
                       mj["layers"][0]["digest"].get<std::string>(),
                   &body),
                0);
      out.push_back(json::parse(body));
    }
    return out;
  }
  std::vector<json> events(const std::string& host, const std::string& type) {
    auto r = soyaos(host, {"scope", "query", "--type", type, "--format", "json", "--limit", "0"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<json> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
    }
    return out;
  }
  TempDir t_;
  RegistryServer reg_;
  std::string insecure_;
  std::string pack_;
  int runs_ = 0;
};

// Host A runs a pulled pack that violates: the flag is a referrer in the registry. Host B
// inspects (sees it), runs (warns, pack_flagged with the origin), unflags (its own view).
TEST_F(OciFlags, OciRunFlagSetOnHostAIsSeenOnHostB) {
  start();
  const std::string r = ref("team/probe:0.1.0");
  const std::string digest = push(r);
  ASSERT_FALSE(digest.empty());
  ASSERT_EQ(soyaos("a", {"pack", "approve", r}).exit_code, 0);
  auto bad = run("a", r, {"read", "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  EXPECT_NE(bad.err.find("published flag of " + reg_.address() + "/team/probe@" + digest), std::string::npos) << bad.err;
  const auto bodies = flag_bodies(digest);
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(bodies[0]["digest"], digest);
  EXPECT_EQ(bodies[0]["pack"], "comet-probe@0.1.0");
  EXPECT_EQ(bodies[0]["reason"]["surface"], "fs");
  // The resource is published as its digest only, never as text the agent chose (a flag
  // goes to the pack's own registry: its text would be a channel out of the Comet).
  // sha256("/etc/shadow"):
  const std::string shadow_digest = "sha256:7b5ddf499844cf05866927513cf62fee9af8c281812def040b964146b0ea87d6";
  EXPECT_EQ(bodies[0]["reason"]["resource"], shadow_digest);
  EXPECT_EQ(bodies[0].dump().find("shadow"), std::string::npos) << bodies[0];
  EXPECT_EQ(bodies[0]["moon"].get<std::string>().rfind("ed25519:", 0), 0u) << bodies[0];
  EXPECT_FALSE(bodies[0]["run_id"].get<std::string>().empty());

  // Host B: inspect shows the flag and where it came from.
  auto inspect = soyaos("b", {"pack", "inspect", r});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("flagged:      yes"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("flagged on " + reg_.address() + "/team/probe by moon ed25519:"), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("fs " + shadow_digest), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.err.find("warning: comet-probe@0.1.0 is flagged on"), std::string::npos) << inspect.err;
  auto as_json = soyaos("b", {"pack", "inspect", r, "--format", "json"});
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  const json doc = json::parse(as_json.out);
  EXPECT_EQ(doc["flagged"], true);
  ASSERT_EQ(doc["flags"].size(), 1u);
  EXPECT_EQ(doc["flags"][0]["violation"]["resource"], shadow_digest);

  // Its runs warn and emit pack_flagged (a warning, never a refusal: SPEC C8 (4)).
  ASSERT_EQ(soyaos("b", {"pack", "approve", r}).exit_code, 0);
  auto ok = run("b", r, {"exit", "0"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("comet-probe@0.1.0 is flagged (flagged on " + reg_.address() + "/team/probe"),
            std::string::npos)
      << ok.err;
  auto flagged = events("b", "pack_flagged");
  ASSERT_FALSE(flagged.empty());
  EXPECT_NE(flagged.back()["data"]["origin"].get<std::string>().find("flagged on " + reg_.address()), std::string::npos);
  EXPECT_EQ(flagged.back()["data"]["raised"], false);

  // unflag clears host B's view only: the referrer stays, a later inspect does not bring it back.
  ASSERT_EQ(soyaos("b", {"pack", "unflag", "comet-probe@0.1.0", "--reason", "reviewed"}).exit_code, 0);
  EXPECT_EQ(run("b", r, {"exit", "0"}).err.find("is flagged"), std::string::npos);
  auto again = soyaos("b", {"pack", "inspect", r});
  EXPECT_NE(again.out.find("flagged:      no"), std::string::npos) << again.out;
  EXPECT_EQ(flag_bodies(digest).size(), 1u);
}

// The registry is down when the violation happens: the run exits 3 at once, the flag is
// queued, and the next command that talks to the registry publishes it.
TEST_F(OciFlags, FlagIsQueuedWhileTheRegistryIsDownAndPublishedLater) {
  start();
  const std::string r = ref("team/probe:0.1.0");
  const std::string digest = push(r);
  ASSERT_EQ(soyaos("a", {"pack", "pull", "--approve", r, "-o", (t_.path() / "pulled").string()}).exit_code, 0);
  const int port = std::stoi(reg_.address().substr(reg_.address().rfind(':') + 1));
  reg_.stop();
  const auto t0 = std::chrono::steady_clock::now();
  // A directory run of the pulled content counts as that registry pack (by tree digest).
  auto bad = soyaos("a", {"run", (t_.path() / "pulled").string(), "--out", (t_.path() / "o1").string(), "--", "read",
                          "/etc/shadow"},
                    /*trace_phases=*/true);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  EXPECT_NE(bad.err.find("stays queued"), std::string::npos) << bad.err;
  // The embedded Moon queues by the pack's tree digest: hashed for the flag. A daemon
  // client (this test's daemon. copy; MoonServePublishesItsQueueWhenTheRegistryIsBack) does
  // not: the daemon takes the digest from its record of the run.
  const char* daemon_mode = std::getenv("SOYAOS_TEST_MOON_DAEMON");  // as harness.cc reads it
  const bool via_daemon = daemon_mode != nullptr && std::string(daemon_mode) == "1" && !rootless_mode();
  EXPECT_EQ(bad.err.find("soyaos-phase flag_tree_digest ") != std::string::npos, !via_daemon) << bad.err;
  // Loose: a refused loopback connection is immediate; no wait on the registry.
  EXPECT_LT(took, std::chrono::seconds(60));
  start(port);
  EXPECT_TRUE(flag_bodies(digest).empty());
  auto inspect = soyaos("a", {"pack", "inspect", r});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.err.find("published flag of " + reg_.address() + "/team/probe@" + digest), std::string::npos)
      << inspect.err;
  ASSERT_EQ(flag_bodies(digest).size(), 1u);
  // Published once: the next command has nothing queued.
  auto later = soyaos("a", {"pack", "inspect", r});
  EXPECT_EQ(later.err.find("published flag"), std::string::npos) << later.err;
  EXPECT_EQ(flag_bodies(digest).size(), 1u);
}

// Two publishers find the same queued flags at once (two commands of one host here; the
// client's gate and `moon serve` are the same race, and in this test's daemon. copy both
// commands claim through the daemon): each flag is claimed by one of them and pushed once,
// one push at a time per pack version. The registry's access log has one PUT of each
// flag's referrer manifest (there were up to two before the claim), and the referrers index
// lists every one (two pushes of one version at once used to lose one).
TEST_F(OciFlags, TwoPublishersPushEachQueuedFlagOnce) {
  start(0, /*access_log=*/true);
  const std::string r = ref("team/probe:0.1.0");
  const std::string digest = push(r);
  ASSERT_FALSE(digest.empty());
  const std::string pulled = (t_.path() / "pulled").string();
  ASSERT_EQ(soyaos("a", {"pack", "pull", "--approve", r, "-o", pulled}).exit_code, 0);
  const int port = std::stoi(reg_.address().substr(reg_.address().rfind(':') + 1));
  reg_.stop();
  constexpr int kFlags = 3;  // one per run
  for (int i = 0; i < kFlags; ++i) {
    auto bad = soyaos("a", {"run", pulled, "--out", (t_.path() / ("o" + std::to_string(i))).string(), "--", "read",
                            "/etc/shadow"});
    ASSERT_EQ(bad.exit_code, 3) << bad.err;
    ASSERT_NE(bad.err.find("stays queued"), std::string::npos) << bad.err;
  }
  start(port, /*access_log=*/true);
  Background other({"pack", "inspect", r}, env_of("a"), t_.path());
  const auto first = soyaos("a", {"pack", "inspect", r});
  const auto second = other.finish(60000);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  // A publisher skips a flag while the other pushes one of the same pack version (one push
  // at a time per referrers index): what both skipped goes with the next command.
  const auto third = soyaos("a", {"pack", "inspect", r});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(first.err + second.err + third.err, "published flag of"), kFlags)
      << first.err << "\n---\n" << second.err << "\n---\n" << third.err;
  const std::string log = read_file(reg_.access_log());
  EXPECT_EQ(count(log, "\"PUT /v2/team/probe/manifests/sha256:"), kFlags) << log;
  EXPECT_EQ(flag_bodies(digest).size(), static_cast<size_t>(kFlags));
}

// Through a Moon daemon the queue is the daemon's: a flag queued while the registry is down
// (the client's quick try fails) is published by `moon serve`'s own retry loop once the
// registry is back — with the daemon's credentials and configuration, no client command
// needed — and exactly once.
TEST_F(OciFlags, MoonServePublishesItsQueueWhenTheRegistryIsBack) {
  start();
  const std::string r = ref("team/probe:0.1.0");
  const std::string digest = push(r);
  ASSERT_FALSE(digest.empty());
  const std::string sock = (t_.path() / "moon.sock").string();
  Background daemon({"moon", "serve", "--socket", sock},
                    {{"SOYAOS_HOME", (t_.path() / "daemon-home").string()},
                     {"DOCKER_CONFIG", (t_.path() / "docker").string()},
                     {"SOYAOS_INSECURE_REGISTRIES", insecure_},
                     {"SOYAOS_MOON_FLAG_INTERVAL_MS", "200"},
                     {"SOYAOS_FLAG_BACKOFF_S", "0"}});
  ASSERT_TRUE(daemon.wait_for("listening on", 30000)) << daemon.so_far().err;
  auto client = [&](const std::vector<std::string>& args) {
    return run_soyaos(args, {{"SOYAOS_HOME", (t_.path() / "client").string()},
                             {"SOYAOS_MOON_SOCKET", sock},
                             {"DOCKER_CONFIG", (t_.path() / "docker").string()},
                             {"SOYAOS_INSECURE_REGISTRIES", insecure_},
                             {"SOYAOS_REGISTRY_BACKOFF_MS", "10"},
                             {"SOYAOS_TRACE_PHASES", "1"}},
                      t_.path());
  };
  auto pulled = client({"pack", "pull", "--approve", r, "-o", (t_.path() / "pulled").string()});
  ASSERT_EQ(pulled.exit_code, 0) << pulled.err;
  const int port = std::stoi(reg_.address().substr(reg_.address().rfind(':') + 1));
  reg_.stop();
  auto bad = client({"run", (t_.path() / "pulled").string(), "--out", (t_.path() / "o1").string(), "--", "read",
                     "/etc/shadow"});
  ASSERT_EQ(bad.exit_code, 3) << bad.err;
  EXPECT_NE(bad.err.find("stays queued"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(t_.path() / "client" / "moon.db")) << "a command used the embedded Moon";
  // The daemon takes the tree digest from its record of the run: the client does not hash
  // the pack for the flag (it did, for nothing).
  EXPECT_NE(bad.err.find("soyaos-phase reported "), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find("soyaos-phase flag_tree_digest "), std::string::npos) << bad.err;
  start(port);
  ASSERT_TRUE(daemon.wait_for("published flag of " + reg_.address() + "/team/probe@" + digest, 30000))
      << daemon.so_far().err;
  const auto bodies = flag_bodies(digest);
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(bodies[0]["reason"]["surface"], "fs");
  // Built by the daemon from its own record of the run: its key, the resource's digest only.
  EXPECT_EQ(bodies[0]["reason"]["resource"], "sha256:7b5ddf499844cf05866927513cf62fee9af8c281812def040b964146b0ea87d6");
  EXPECT_EQ(bodies[0]["moon"].get<std::string>().rfind("ed25519:", 0), 0u) << bodies[0];
  // Published once: nothing is left for the next command or the next round of the loop.
  auto later = client({"pack", "inspect", r});
  ASSERT_EQ(later.exit_code, 0) << later.err;
  EXPECT_EQ(later.err.find("published flag"), std::string::npos) << later.err;
  EXPECT_NE(later.out.find("flagged:      yes"), std::string::npos) << later.out;
  EXPECT_EQ(flag_bodies(digest).size(), 1u);
  daemon.signal(SIGTERM);
  const auto served = daemon.finish(20000);
  EXPECT_EQ(served.exit_code, 0) << served.err;
}

// A hostile registry answers with 40 flag referrers, most of them malformed or oversized:
// at most 16 are read, the valid one is recorded (escaped when shown), the pull succeeds.
TEST_F(OciFlags, HostileFlagReferrersAreBoundedAndIgnored) {
  std::string fake;
  auto pull = pull_from_fake("flags", fake);
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_NE(pull.err.find("larger than 4 MiB"), std::string::npos) << pull.err;
  EXPECT_NE(pull.err.find("more flag referrers in " + fake + "/team/hello ignored (at most 16 are read)"),
            std::string::npos)
      << pull.err;
  EXPECT_NE(pull.err.find("hello-report@1.0.0 is flagged on " + fake + "/team/hello by moon ed25519:0123456789abcdef"),
            std::string::npos)
      << pull.err;
  EXPECT_EQ(pull.err.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
  // Bounded warnings: 3 named, the rest counted.
  size_t warnings = 0;
  for (size_t p = pull.err.find("ignored:"); p != std::string::npos; p = pull.err.find("ignored:", p + 1)) ++warnings;
  EXPECT_EQ(warnings, 3u) << pull.err;
  // Recorded once, with its origin; another pack's flag was not.
  auto flags = events("b", "pack_flagged");
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0]["data"]["received"], true);
  EXPECT_EQ(flags[0]["data"]["violation"]["resource"], "/etc/shadow\x1b[31m");
}

// Malformed entries in the referrers list itself (not an object, a digest that is not
// sha256, a negative size, no mediaType) are skipped one by one: the valid flag listed
// after them is still read and recorded, and the bad entries are named (bounded).
TEST_F(OciFlags, MalformedReferrerEntriesDoNotHideTheOthers) {
  std::string fake;
  auto pull = pull_from_fake("badentries", fake);
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_NE(pull.err.find("a flag referrer entry in " + fake + "/team/hello ignored: manifests[0]: not a descriptor"),
            std::string::npos)
      << pull.err;
  EXPECT_NE(pull.err.find("manifests[1]: digest missing or not sha256"), std::string::npos) << pull.err;
  EXPECT_NE(pull.err.find("manifests[2]: size missing"), std::string::npos) << pull.err;
  // Three named, the fourth counted.
  EXPECT_EQ(pull.err.find("manifests[3]"), std::string::npos) << pull.err;
  EXPECT_NE(pull.err.find("1 more flag referrers in " + fake + "/team/hello ignored"), std::string::npos) << pull.err;
  EXPECT_NE(pull.err.find("hello-report@1.0.0 is flagged on " + fake + "/team/hello by moon ed25519:0123456789abcdef"),
            std::string::npos)
      << pull.err;
  auto flags = events("b", "pack_flagged");
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0]["data"]["received"], true);
}

}  // namespace
}  // namespace soyaos::testing
