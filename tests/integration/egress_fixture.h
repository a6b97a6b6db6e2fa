// The egress tests' fixture (egress_test.cc, egress_proxy_test.cc, egress_connect_to_test.cc):
// the real soyaos binary runs the probe pack (tests/fixtures/probe) with generated egress
// entries in a real Comet, against real servers on the host's loopback (net_servers.h) that
// the operator maps with dns.hosts (or egress.connect_to) in the Moon configuration
// (moon.yaml). ctest runs every Egress* test twice: as root and (prefix `rootless.`) as nobody.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "net_servers.h"

namespace soyaos::testing::egress {

using nlohmann::json;

struct ProbeRun {
  RunOutput output;
  std::vector<json> events;
  std::vector<std::string> results;  // every "RESULT ..." line, without the prefix, in order
  std::string result;                // the first one

  std::vector<json> of_type(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == type) out.push_back(e);
    }
    return out;
  }
  std::vector<json> violations() const { return of_type("capability_violation"); }
  // The first network violation whose resource is exactly `resource` (null if none).
  json violation(const std::string& resource) const {
    for (const auto& v : violations()) {
      if (v["data"].value("resource", "") == resource) return v["data"];
    }
    return nullptr;
  }
  // The first network violation whose resource satisfies `pred`.
  template <typename Pred>
  json violation_where(Pred pred) const {
    for (const auto& v : violations()) {
      if (pred(v["data"].value("resource", ""))) return v["data"];
    }
    return nullptr;
  }
  std::string context() const {
    std::string resources;
    for (const auto& v : violations()) resources += " " + v["data"].value("resource", "?");
    std::string out = output.out.size() > 3000 ? output.out.substr(0, 3000) + "..." : output.out;
    std::string err = output.err.size() > 3000 ? output.err.substr(0, 3000) + "..." : output.err;
    return "exit=" + std::to_string(output.exit_code) + "\nviolations:" + resources + "\nstdout:\n" + out +
           "\nstderr:\n" + err;
  }
};

struct Entry {
  std::string host;
  int port;
  std::string protocol;
};

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The TLS server (net_servers.cc) writes with SSL_write/SSL_shutdown, which can raise
// SIGPIPE in this process when the gateway or the proxy has already closed the upstream
// socket (seen rootless through the proxy's CONNECT tunnel): a no-op handler turns that into
// EPIPE for the server thread. A handler (unlike SIG_IGN) is reset by exec, so soyaos and
// the agent keep the default disposition.
inline void sigpipe_noop(int) {}
[[maybe_unused]] inline const bool kSigpipeHandled = [] {
  struct sigaction sa {};
  sa.sa_handler = sigpipe_noop;
  ::sigemptyset(&sa.sa_mask);
  return ::sigaction(SIGPIPE, &sa, nullptr) == 0;
}();

// 198.18.0.0/15: where the DNS stub's fake per-name addresses live.
inline bool is_fake_address(const std::string& a) {
  unsigned b[4];
  char tail = 0;
  if (std::sscanf(a.c_str(), "%u.%u.%u.%u%c", &b[0], &b[1], &b[2], &b[3], &tail) != 4) return false;
  return b[0] == 198 && (b[1] == 18 || b[1] == 19) && b[2] < 256 && b[3] < 256;
}

// A refused protocol check: the connect went through (to the gateway), then the
// connection was reset. The agent sees a reset, a broken pipe or a TLS error.
inline bool looks_reset(const std::string& result) {
  return result == "errno=ECONNRESET" || result == "errno=EPIPE" || result.rfind("ssl=", 0) == 0;
}

// A port in an event: a JSON number (or, leniently, its decimal string).
inline bool same_port(const json& j, int port) {
  if (j.is_number_integer()) return j.get<int>() == port;
  if (j.is_string()) return j.get<std::string>() == std::to_string(port);
  return false;
}

// The supervisor's peak RSS bound in the bad-input tests. Under AddressSanitizer the
// allocator's quarantine and shadow memory alone exceed it (measured ~160 MiB), so the
// sanitized build gets its own bound.
inline long supervisor_rss_bound_kib() { return soyaos_sanitized() ? 320 * 1024 : 64 * 1024; }

class EgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
    home_ = dir_.path() / "home";
    std::filesystem::create_directories(home_);
    std::filesystem::permissions(home_, std::filesystem::perms::all);
    // A host address other than loopback, where a leak out of the sandbox could land.
    leak_ip_ = host_ipv4_address();
    if (leak_ip_.empty()) leak_ip_ = "127.0.0.1";
  }

  static std::string manifest(const std::string& egress_yaml, const std::string& tier) {
    return "soyapack: v0\nname: egress-probe\nversion: 0.1.0\n"
           "agent: {runtime: python3, entrypoint: probe.py}\n"
           "capabilities:\n  egress:" +
           egress_yaml +
           "\n  fs: {read: [/workdir], write: [/workdir/out]}\n"
           "  determinism_tier: " +
           tier + "\nresources: {timeout: 20s, write_quota: 1Mi}\n";
  }

  // The pack's capabilities.egress, in this order (entry i is capabilities.egress[i]).
  void set_egress(const std::vector<Entry>& entries, const std::string& tier = "read-only") {
    std::string yaml = entries.empty() ? " []" : "";
    for (const auto& e : entries) {
      yaml += "\n    - {host: \"" + e.host + "\", port: " + std::to_string(e.port) + ", protocol: " + e.protocol + "}";
    }
    dir_.write("pack/soyapack.yaml", manifest(yaml, tier));
  }

  void set_egress_star() { dir_.write("pack/soyapack.yaml", manifest(" \"*\"", "unrestricted")); }

  static std::string moon_yaml(const std::map<std::string, std::string>& hosts,
                               const std::vector<std::string>& deny,
                               const std::vector<std::string>& allow_private = {}) {
    std::string y = "dns:\n  hosts:";
    if (hosts.empty()) y += " {}";
    for (const auto& [name, addr] : hosts) y += "\n    " + name + ": " + addr;
    y += "\negress:\n  deny: [";
    for (size_t i = 0; i < deny.size(); ++i) y += (i > 0 ? ", " : "") + deny[i];
    y += "]\n  allow_private: [";
    for (size_t i = 0; i < allow_private.size(); ++i) y += (i > 0 ? ", " : "") + allow_private[i];
    y += "]\n";
    return y;
  }

  // The operator's Moon configuration: $SOYAOS_HOME/moon.yaml.
  void set_moon(const std::map<std::string, std::string>& hosts, const std::vector<std::string>& deny = {},
                const std::vector<std::string>& allow_private = {}) {
    dir_.write("home/moon.yaml", moon_yaml(hosts, deny, allow_private));
  }

  ProbeRun probe(const std::vector<std::string>& action, const std::map<std::string, std::string>& extra_env = {}) {
    return run_pack(pack_, action, extra_env);
  }

  // `soyaos run PACK [FLAGS] -- ARGS` with this test's SOYAOS_HOME; events and RESULT lines parsed.
  ProbeRun run_pack(const std::filesystem::path& pack, const std::vector<std::string>& action,
                    const std::map<std::string, std::string>& extra_env = {},
                    const std::vector<std::string>& flags = {}) {
    auto events = dir_.path() / "events.jsonl";
    std::filesystem::remove(events);
    std::vector<std::string> args = {"run",      pack.string(),   "--out", (dir_.path() / "out").string(),
                                     "--events", events.string(), "--no-cache"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.emplace_back("--");
    args.insert(args.end(), action.begin(), action.end());
    std::map<std::string, std::string> env = {{"SOYAOS_HOME", home_.string()}};
    for (const auto& [k, v] : extra_env) env[k] = v;
    ProbeRun run;
    run.output = run_soyaos(args, env, dir_.path());
    std::istringstream lines(read_file(events));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) run.events.push_back(json::parse(line));
    }
    std::istringstream out(run.output.out);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("RESULT ", 0) == 0) run.results.push_back(line.substr(7));
    }
    if (!run.results.empty()) run.result = run.results.front();
    return run;
  }

  // Allowed: the probe's line starts with `prefix`, no violation, exit 0.
  static void expect_allowed(const ProbeRun& run, const std::string& prefix) {
    EXPECT_EQ(run.result.rfind(prefix, 0), 0U) << "got: " << run.result << "\n" << run.context();
    EXPECT_EQ(run.output.exit_code, 0) << run.context();
    EXPECT_TRUE(run.violations().empty()) << run.context();
  }

  // A network violation with this resource and errno; the run exits 3.
  static void expect_network_violation(const ProbeRun& run, const std::string& resource, const std::string& errno_name,
                                       const std::string& syscall = "") {
    EXPECT_EQ(run.output.exit_code, 3) << run.context();
    json v = run.violation(resource);
    ASSERT_FALSE(v.is_null()) << "no violation for " << resource << "\n" << run.context();
    EXPECT_EQ(v["surface"], "network") << v.dump();
    EXPECT_EQ(v["errno"], errno_name) << v.dump();
    EXPECT_EQ(v["pack"], "egress-probe") << v.dump();
    EXPECT_TRUE(v.contains("manifest_entry")) << v.dump();
    EXPECT_TRUE(v.contains("syscall")) << v.dump();
    if (!syscall.empty()) {
      EXPECT_EQ(v["syscall"], syscall) << v.dump();
    }
    EXPECT_TRUE(contains(run.output.err, "capability violation")) << run.output.err;
  }

  // A refused protocol check (SNI, Host, plaintext on https): reset, a violation
  // ECONNRESET naming the entry's port and protocol and the entry that came closest.
  static void expect_reset_violation(const ProbeRun& run, const std::string& result, int port,
                                     const std::string& protocol) {
    EXPECT_TRUE(looks_reset(result)) << "not a reset: " << result << "\n" << run.context();
    EXPECT_EQ(run.output.exit_code, 3) << run.context();
    json v = run.violation_where([&](const std::string& r) {
      return ends_with(r, ":" + std::to_string(port) + "/" + protocol);
    });
    ASSERT_FALSE(v.is_null()) << "no violation for *:" << port << "/" << protocol << "\n" << run.context();
    EXPECT_EQ(v["surface"], "network") << v.dump();
    EXPECT_EQ(v["errno"], "ECONNRESET") << v.dump();
    EXPECT_EQ(v["manifest_entry"], "capabilities.egress[0]") << v.dump();
  }

  // Nothing reached this host-side server (after a moment for a late connection to land).
  static void expect_untouched(const NetServer& server) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(server.accepted(), 0) << "reached the host: " << server.describe();
  }

  TempDir dir_;
  std::filesystem::path pack_;
  std::filesystem::path home_;
  std::string leak_ip_;
};

// ---- the Moon proxy (SPEC C7, issue #5) ---------------------------------------------------------
//
// The pack declares only {host: moon, port: 3128, protocol: moon-proxy}; the operator's
// proxy.allow names web.test (http, the HttpServer's port) and tls.test (https, the
// TlsEchoServer's port), both mapped to the host's loopback by dns.hosts.

class EgressProxyTest : public EgressTest {
 protected:
  struct Allow {
    std::string host;
    int port;
    std::string protocol;
  };
  void set_proxy_moon(const std::map<std::string, std::string>& hosts, const std::vector<Allow>& allow,
                      const std::vector<std::string>& deny = {}) {
    std::string y = moon_yaml(hosts, deny);
    y += "proxy:\n  allow:";
    if (allow.empty()) y += " []";
    for (const auto& a : allow) {
      y += "\n    - {host: \"" + a.host + "\", port: " + std::to_string(a.port) + ", protocol: " + a.protocol + "}";
    }
    y += "\n";
    dir_.write("home/moon.yaml", y);
  }
  void set_proxy_pack() { set_egress({{"moon", 3128, "moon-proxy"}}); }

  // A proxy refusal: the agent saw 403, the violation (surface network, EACCES) names the
  // target and says "Moon proxy: ...".
  static void expect_proxy_refusal(const ProbeRun& run, const std::string& result, const std::string& resource,
                                   const std::string& detail_part = "") {
    EXPECT_EQ(result, "http=403") << resource << "\n" << run.context();
    EXPECT_EQ(run.output.exit_code, 3) << run.context();
    json v = run.violation(resource);
    ASSERT_FALSE(v.is_null()) << "no violation for " << resource << "\n" << run.context();
    EXPECT_EQ(v["surface"], "network") << v.dump();
    EXPECT_EQ(v["errno"], "EACCES") << v.dump();
    EXPECT_EQ(v["pack"], "egress-probe") << v.dump();
    EXPECT_EQ(v.value("detail", "").rfind("Moon proxy:", 0), 0u) << v.dump();
    if (!detail_part.empty()) {
      EXPECT_TRUE(contains(v.value("detail", ""), detail_part)) << v.dump();
    }
  }

  static std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
};


}  // namespace soyaos::testing::egress
