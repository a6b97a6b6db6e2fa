// Secrets through the gateway, end to end with real clients (issue #12, SPEC C11, M7, M8):
// packs/secrets-python (urllib, requests, httpx, http.client) and packs/secrets-node (the
// `openai` and `@anthropic-ai/sdk` npm packages with their DEFAULT base URLs, Node's fetch)
// run in real Comets. api.openai.com and api.anthropic.com reach the loopback mock API
// (mock_api.py) through egress.connect_to; the gateway terminates the agent's TLS with the
// run's CA, verifies the mock's certificate against the test CA in tls.ca_files and puts the
// real key in. Checked: the mock receives the real key, the agent never holds it (its env and
// /proc/self/environ are printed and searched), the key is nowhere in $SOYAOS_HOME, the events,
// stdout, stderr or --out; every refusal is a 403 the client sees, with its violation (EACCES)
// and exit 3; a passthrough entry carries the agent's own TLS session. Root and nobody.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "compat_env.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::vector<std::string> kNames = {"api.openai.com", "api.anthropic.com", "api.compat.test"};

std::string random_key() {
  unsigned char raw[16];
  EXPECT_EQ(::getrandom(raw, sizeof raw, 0), static_cast<ssize_t>(sizeof raw));
  static const char* hex = "0123456789abcdef";
  std::string k = "sk-realkey-";
  for (unsigned char c : raw) {
    k += hex[c >> 4];
    k += hex[c & 15];
  }
  return k;
}

// ---- the agent's memory (gap 3 of the secrets work): read whole, as root, while it waits ----

std::string proc_file(pid_t pid, const char* name) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Whether `pid` descends from `ancestor` (PPid chain in /proc, in this PID namespace).
bool descends_from(pid_t pid, pid_t ancestor) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    std::istringstream status(proc_file(pid, "status"));
    pid_t parent = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) == 0) parent = static_cast<pid_t>(std::atoi(line.c_str() + 5));
    }
    if (parent == ancestor) return true;
    pid = parent;
  }
  return false;
}

// The agent process whose argv holds `check` once it waits for SIGUSR2 (its handler is
// installed: SigCgt in /proc/PID/status shows it); 0 after `timeout`. Only agents of this
// test process count: ctest runs the Python and Node memory tests side by side, and each
// must scan and release its own agent, never the other's.
pid_t wait_for_waiting_agent(const std::string& check, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  constexpr unsigned long long kSigusr2 = 1ULL << (SIGUSR2 - 1);
  while (std::chrono::steady_clock::now() < deadline) {
    DIR* d = ::opendir("/proc");
    while (d != nullptr) {
      const dirent* e = ::readdir(d);
      if (e == nullptr) break;
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0 || pid == ::getpid()) continue;
      std::string argv = proc_file(pid, "cmdline");
      std::replace(argv.begin(), argv.end(), '\0', ' ');
      if (argv.find(" " + check) == std::string::npos || argv.find("soyaos") != std::string::npos) continue;
      if (!descends_from(pid, ::getpid())) continue;
      std::istringstream status(proc_file(pid, "status"));
      unsigned long long caught = 0;
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("SigCgt:", 0) == 0) caught = std::stoull(line.substr(7), nullptr, 16);
      }
      if ((caught & kSigusr2) != 0) {
        ::closedir(d);
        return pid;
      }
    }
    if (d != nullptr) ::closedir(d);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

struct MemoryScan {
  size_t regions = 0, bytes = 0;
  size_t key_hits = 0, placeholder_hits = 0;
  std::string where;  // the first region holding the key
};

// Every readable mapping of `pid` through /proc/PID/mem (all its threads share it), searched
// for `key` and `placeholder`, chunk by chunk with an overlap so nothing straddles unseen.
MemoryScan scan_memory(pid_t pid, const std::string& key, const std::string& placeholder) {
  MemoryScan scan;
  const int mem = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) {
    ADD_FAILURE() << "open /proc/" << pid << "/mem: " << std::strerror(errno);
    return scan;
  }
  std::istringstream maps(proc_file(pid, "maps"));
  const size_t overlap = std::max(key.size(), placeholder.size());
  std::vector<char> buf(size_t{1} << 20);
  for (std::string line; std::getline(maps, line);) {
    unsigned long long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %4s", &start, &end, perms) != 3 || perms[0] != 'r') continue;
    ++scan.regions;
    std::string carry;
    for (unsigned long long at = start; at < end;) {
      const size_t want = static_cast<size_t>(std::min<unsigned long long>(buf.size(), end - at));
      const ssize_t n = ::pread(mem, buf.data(), want, static_cast<off_t>(at));
      if (n <= 0) break;  // [vvar] and guard pages do not read
      scan.bytes += static_cast<size_t>(n);
      std::string chunk = carry + std::string(buf.data(), static_cast<size_t>(n));
      for (size_t p = chunk.find(key); p != std::string::npos; p = chunk.find(key, p + 1)) {
        if (scan.key_hits++ == 0) scan.where = line;
      }
      for (size_t p = chunk.find(placeholder); p != std::string::npos; p = chunk.find(placeholder, p + 1)) {
        ++scan.placeholder_hits;
      }
      carry = chunk.size() > overlap ? chunk.substr(chunk.size() - overlap + 1) : chunk;
      at += static_cast<unsigned long long>(n);
    }
  }
  ::close(mem);
  return scan;
}

struct SecretsRun {
  RunOutput output;
  std::vector<json> events;
  std::map<std::string, CheckResult> results;

  std::vector<json> of_type(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == type) out.push_back(e["data"]);
    }
    return out;
  }
  std::string context() const {
    std::string v;
    for (const auto& d : of_type("capability_violation")) v += "\n  " + d.dump();
    auto clip = [](const std::string& s) { return s.size() > 6000 ? s.substr(0, 6000) + "..." : s; };
    return "exit=" + std::to_string(output.exit_code) + "\nviolations:" + v + "\nstdout:\n" + clip(output.out) +
           "\nstderr:\n" + clip(output.err);
  }
};

class SecretsGatewayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new TempDir();
    key_ = new std::string(random_key());
    ca_ = new TestCa(make_test_ca(shared_->path() / "ca", kNames));
    api_ = new MockApi(shared_->path(), *ca_, *key_);
  }
  static void TearDownTestSuite() {
    delete api_;
    delete ca_;
    delete key_;
    delete shared_;
    api_ = nullptr;
    ca_ = nullptr;
    key_ = nullptr;
    shared_ = nullptr;
  }

  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    home_ = dir_.path() / "home";
    fs::create_directories(home_);
    fs::permissions(home_, fs::perms::all);
    std::vector<std::pair<std::string, int>> from;
    std::vector<int> to;
    for (const auto& n : kNames) {
      from.emplace_back(n, 443);
      to.push_back(api_->https_port());
    }
    from.emplace_back("plain.compat.test", 80);
    to.push_back(api_->http_port());
    std::string moon = connect_to_yaml(from, to);
    dir_.write("home/moon-no-ca.yaml", moon);
    // The gateway verifies the mock's certificate (signed by the test CA) as it would a real API's.
    moon += "tls:\n  ca_files: [\"" + ca_->ca_pem.string() + "\"]\n";
    dir_.write("home/moon.yaml", moon);
  }

  fs::path copy_pack(const std::string& name) {
    fs::path pack = dir_.path() / "pack";
    copy_tree(source_path("tests/compat/packs/" + name), pack, false, false);
    fs::create_directories(pack / "ca");
    fs::copy_file(ca_->ca_pem, pack / "ca/test-ca.pem");
    return pack;
  }

  fs::path node_pack() {
    fs::path modules = source_path("tests/compat/node/node_modules");
    if (!fs::exists(modules / "openai/package.json")) {
      ADD_FAILURE() << modules << " is not installed: run scripts/setup.sh (it runs npm ci in tests/compat/node)";
      return {};
    }
    fs::path pack = copy_pack("secrets-node");
    copy_tree(modules, pack / "node_modules", true, true);
    return pack;
  }

  SecretsRun run(const fs::path& pack, std::vector<std::string> agent_args) {
    auto events = dir_.path() / "events.jsonl";
    fs::remove(events);
    fs::remove_all(dir_.path() / "out");
    std::vector<std::string> args = {"run",      pack.string(),        "--out",    (dir_.path() / "out").string(),
                                     "--events", events.string(),      "--no-cache", "--secret",
                                     "OPENAI_API_KEY", "--secret",     "ANTHROPIC_API_KEY", "--"};
    args.insert(args.end(), agent_args.begin(), agent_args.end());
    SecretsRun r;
    r.output = run_soyaos(args, {{"SOYAOS_HOME", home_.string()}, {"OPENAI_API_KEY", *key_},
                                 {"ANTHROPIC_API_KEY", *key_}},
                          dir_.path());
    r.events = read_events(events);
    r.results = parse_results(r.output.out);
    return r;
  }

  static void expect_results(const SecretsRun& r, const std::vector<std::string>& checks, const std::string& want) {
    for (const auto& c : checks) {
      auto it = r.results.find(c);
      ASSERT_NE(it, r.results.end()) << c << " printed no result\n" << r.context();
      EXPECT_EQ(it->second.status, want) << c << ":" << it->second.detail << "\n" << r.context();
    }
  }

  // The real key is nowhere the agent or the operator's records could show it.
  void expect_key_nowhere(const SecretsRun& r) const {
    EXPECT_EQ(r.output.out.find(*key_), std::string::npos) << "stdout holds the key";
    EXPECT_EQ(r.output.err.find(*key_), std::string::npos) << "stderr holds the key";
    for (const auto& root : {home_, dir_.path() / "out", dir_.path() / "events.jsonl"}) {
      if (!fs::exists(root)) continue;
      std::vector<fs::path> files;
      if (fs::is_regular_file(root)) {
        files.push_back(root);
      } else {
        for (const auto& e : fs::recursive_directory_iterator(root)) {
          if (e.is_regular_file()) files.push_back(e.path());
        }
      }
      for (const auto& f : files) EXPECT_EQ(read_file(f).find(*key_), std::string::npos) << f << " holds the key";
    }
  }

  // The mock saw `path` with the real key in `header`, over TLS the gateway made (ALPN
  // http/1.1 from its ClientHello).
  static void expect_key_arrived(const std::string& path, const std::string& header, const std::string& want) {
    for (const auto& req : api_->requests()) {
      if (req.value("path", "") != path) continue;
      EXPECT_EQ(req.value(header, ""), want) << req.dump();
      EXPECT_EQ(req.value("alpn", ""), "http/1.1") << req.dump();
      return;
    }
    ADD_FAILURE() << path << " never reached the mock API:\n" << api_->describe();
  }

  static void expect_refusal(const SecretsRun& r, const std::string& resource) {
    for (const auto& v : r.of_type("capability_violation")) {
      if (v.value("resource", "") != resource) continue;
      EXPECT_EQ(v.value("surface", ""), "network") << v.dump();
      EXPECT_EQ(v.value("errno", ""), "EACCES") << v.dump();
      return;
    }
    ADD_FAILURE() << "no violation for " << resource << "\n" << r.context();
  }

  // Runs `pack` with `args` (the last check is memscan_wait) on another thread; while the
  // agent waits, reads its whole memory: the placeholder must be there (the scan sees what
  // the agent holds), the key never. Then lets the agent finish.
  SecretsRun run_and_scan_memory(const fs::path& pack, const std::vector<std::string>& args) {
    SecretsRun r;
    std::thread runner([&] { r = run(pack, args); });
    const pid_t pid = wait_for_waiting_agent("memscan_wait", std::chrono::seconds(50));
    if (pid == 0) {
      ADD_FAILURE() << "the agent never reached memscan_wait";
    } else {
      std::string placeholder;
      std::istringstream env(proc_file(pid, "environ"));
      for (std::string var; std::getline(env, var, '\0');) {
        if (var.rfind("OPENAI_API_KEY=", 0) == 0) placeholder = var.substr(15);
      }
      EXPECT_EQ(placeholder.rfind("soyaos-placeholder-", 0), 0U) << placeholder;
      if (!placeholder.empty()) {
        const MemoryScan scan = scan_memory(pid, *key_, placeholder);
        EXPECT_EQ(scan.key_hits, 0U) << "the key is in the agent's memory: " << scan.where;
        EXPECT_GT(scan.placeholder_hits, 0U) << "the scan did not see the placeholder the agent holds";
        EXPECT_GT(scan.bytes, size_t{1} << 20) << scan.regions << " regions";
        RecordProperty("agent_memory_scanned_bytes", std::to_string(scan.bytes));
      }
      ::kill(pid, SIGUSR2);
    }
    runner.join();
    return r;
  }

  static TempDir* shared_;
  static std::string* key_;
  static TestCa* ca_;
  static MockApi* api_;
  TempDir dir_;
  fs::path home_;
};

TempDir* SecretsGatewayTest::shared_ = nullptr;
std::string* SecretsGatewayTest::key_ = nullptr;
TestCa* SecretsGatewayTest::ca_ = nullptr;
MockApi* SecretsGatewayTest::api_ = nullptr;

std::vector<std::string> python_args() {
  return {"--openai", "https://api.openai.com", "--anthropic", "https://api.anthropic.com", "--passthrough",
          "https://api.compat.test"};
}

TEST_F(SecretsGatewayTest, PythonClientsUseKeysTheyNeverSee) {
  const std::vector<std::string> checks = {"env_holds_placeholders", "urllib_openai",         "requests_anthropic",
                                           "httpx_openai_stream",    "sse_spacing",           "keepalive_allowed",
                                           "intercepted_cert",       "passthrough_untouched", "placeholder_in_body_not_substituted",
                                           "plain_http_rules"};
  auto args = python_args();
  args.insert(args.end(), checks.begin(), checks.end());
  auto r = run(copy_pack("secrets-python"), args);
  expect_results(r, checks, "ok");
  EXPECT_EQ(r.output.exit_code, 0) << r.context();
  EXPECT_TRUE(r.of_type("capability_violation").empty()) << r.context();
  expect_key_nowhere(r);
  expect_key_arrived("/v1/chat/completions", "authorization", "Bearer " + *key_);
  expect_key_arrived("/v1/messages", "x-api-key", *key_);
  // The passthrough entry's server saw the agent's own ClientHello (the ALPN only it offers).
  bool passthrough = false;
  for (const auto& req : api_->requests()) {
    if (req.value("path", "") != "/hello/passthrough") continue;
    passthrough = true;
    EXPECT_EQ(req.value("alpn", ""), "soyaos-probe") << req.dump();
  }
  EXPECT_TRUE(passthrough) << api_->describe();
  // A placeholder in a body is not substituted (bodies are never rewritten, docs/secrets.md).
  bool body_seen = false;
  for (const auto& req : api_->requests()) {
    const std::string body = req.value("body", "");
    if (body.find("soyaos-placeholder-") == std::string::npos) continue;
    body_seen = true;
    EXPECT_EQ(body.find(*key_), std::string::npos);
  }
  EXPECT_TRUE(body_seen) << api_->describe();
  // Each request is an http_request event: no query string, the entry named.
  bool sse = false;
  for (const auto& h : r.of_type("http_request")) {
    EXPECT_EQ(h.value("path", "").find('?'), std::string::npos) << h.dump();
    if (h.value("path", "") == "/sse") {
      sse = true;
      EXPECT_EQ(h.value("method", ""), "GET");
      EXPECT_EQ(h.value("status", 0), 200);
      EXPECT_EQ(h.value("manifest_entry", ""), "capabilities.egress[0]");
      EXPECT_GT(h.value("bytes_down", 0), 0);
    }
  }
  EXPECT_TRUE(sse) << r.context();
  // egress_opened says which connections were intercepted, and which were passed through.
  bool intercepted = false, passed = false;
  for (const auto& o : r.of_type("egress_opened")) {
    if (o.value("host", "") == "api.openai.com") intercepted = intercepted || o.value("intercepted", false);
    if (o.value("host", "") == "api.compat.test") passed = passed || !o.value("intercepted", false);
  }
  EXPECT_TRUE(intercepted && passed) << r.context();
}

// TLS session resumption on both sides of an intercepted connection (issue #16): Python's ssl
// resumes its session with the gateway for the same name, and a session of another intercepted
// name is never resumed (each name's leaf context has its own ticket key); the gateway resumes
// its own session with the upstream for the same host:port only — the mock saw a full handshake
// first, then a resumed one, and a full one again for the other name on the same server.
TEST_F(SecretsGatewayTest, TlsSessionsResumePerNameOnBothSides) {
  auto r = run(copy_pack("secrets-python"), [] {
    auto args = python_args();
    args.emplace_back("tls_resumption");
    return args;
  }());
  expect_results(r, {"tls_resumption"}, "ok");
  EXPECT_EQ(r.output.exit_code, 0) << r.context();
  std::map<std::string, json> seen;
  for (const auto& req : api_->requests()) {
    const std::string path = req.value("path", "");
    if (path.find("resume-") != std::string::npos) seen[path] = req;
  }
  ASSERT_EQ(seen.size(), 3U) << api_->describe();
  EXPECT_EQ(seen["/hello/resume-1"].value("resumed", true), false) << seen["/hello/resume-1"].dump();
  EXPECT_EQ(seen["/hello/resume-2"].value("resumed", false), true) << seen["/hello/resume-2"].dump();
  EXPECT_EQ(seen["/v1/models/resume-3"].value("resumed", true), false) << seen["/v1/models/resume-3"].dump();
  EXPECT_EQ(seen["/v1/models/resume-3"].value("sni", ""), "api.openai.com") << seen["/v1/models/resume-3"].dump();
  expect_key_nowhere(r);
}

TEST_F(SecretsGatewayTest, PythonRefusalsAre403sWithViolations) {
  const std::vector<std::string> checks = {"deny_wrong_method",         "deny_wrong_path",
                                           "deny_traversal",            "deny_keepalive_second",
                                           "deny_placeholder_unbound",  "deny_host_mismatch",
                                           "deny_plain_http_path"};
  auto args = python_args();
  args.insert(args.end(), checks.begin(), checks.end());
  auto r = run(copy_pack("secrets-python"), args);
  expect_results(r, checks, "refused");
  EXPECT_EQ(r.output.exit_code, 3) << r.context();
  expect_refusal(r, "DELETE https://api.openai.com/v1/chat/completions");
  expect_refusal(r, "POST https://api.openai.com/v1/files");
  expect_refusal(r, "GET https://api.openai.com/v1/files");  // the keep-alive connection's second request
  expect_refusal(r, "POST https://api.anthropic.com/v1/messages");  // a placeholder bound elsewhere
  expect_refusal(r, "GET http://plain.compat.test/other");          // a plain http entry's rules
  expect_refusal(r, "POST https://api.openai.com/v1/chat/completions");  // Host names another site
  // One violation per refused request: the four traversal forms included.
  EXPECT_GE(r.of_type("capability_violation").size(), 10U) << r.context();
  expect_key_nowhere(r);
  // Nothing refused reached the mock.
  for (const auto& req : api_->requests()) {
    const std::string p = req.value("path", "");
    EXPECT_TRUE(p.find("admin") == std::string::npos && p != "/v1/files") << req.dump();
  }
}

TEST_F(SecretsGatewayTest, AnUpstreamThatDoesNotVerifyIsA502NeverTheKey) {
  // No tls.ca_files: the mock's certificate (the test CA's) does not verify against the system store.
  fs::rename(home_ / "moon-no-ca.yaml", home_ / "moon.yaml");
  // Requests that arrived (the mock also logs handshakes that failed: the gateway's, here).
  auto arrived = [] {
    const auto all = api_->requests();
    return std::count_if(all.begin(), all.end(), [](const json& q) { return q.contains("path"); });
  };
  const auto before = arrived();
  auto args = python_args();
  args.emplace_back("upstream_unverified");
  auto r = run(copy_pack("secrets-python"), args);
  expect_results(r, {"upstream_unverified"}, "ok");
  std::string closed_events;
  for (const auto& c : r.of_type("egress_closed")) closed_events += "\n  " + c.dump();
  EXPECT_EQ(r.output.exit_code, 0) << r.context() << "\negress_closed:" << closed_events;  // not the agent's violation
  EXPECT_TRUE(r.of_type("capability_violation").empty()) << r.context();
  bool closed = false;
  for (const auto& c : r.of_type("egress_closed")) {
    if (c.value("reason", "") != "upstream unreachable") continue;
    closed = true;
    EXPECT_NE(c.value("error", "").find("certificate verification failed"), std::string::npos) << c.dump();
  }
  EXPECT_TRUE(closed) << r.context();
  EXPECT_NE(r.output.err.find("upstream unreachable: api.openai.com:443/https"), std::string::npos) << r.output.err;
  EXPECT_EQ(arrived(), before) << "a request reached an unverified upstream";
  expect_key_nowhere(r);
}

// Chromium's ClientHello (issue #18), built byte for byte by packs/secrets-python/chromium_tls.py
// and completed as a real TLS 1.3 session: on an intercepted entry ECH GREASE is accepted (the
// gateway answers the TLS itself: nothing is hidden from it), the session is the run CA's and the
// bound key goes in; on a passthrough entry the hello without ECH reaches the server untouched,
// and with ECH GREASE it is refused — reset, ECONNRESET, a violation that names GREASE, exit 3.
TEST_F(SecretsGatewayTest, ChromiumClientHellosOnInterceptedAndPassthroughEntries) {
  auto args = python_args();
  for (const char* c : {"chromium_intercepted", "chromium_passthrough", "deny_chromium_passthrough_ech"}) {
    args.emplace_back(c);
  }
  auto r = run(copy_pack("secrets-python"), args);
  expect_results(r, {"chromium_intercepted", "chromium_passthrough"}, "ok");
  expect_results(r, {"deny_chromium_passthrough_ech"}, "refused");
  EXPECT_EQ(r.output.exit_code, 3) << r.context();
  const auto violations = r.of_type("capability_violation");
  ASSERT_EQ(violations.size(), 1U) << r.context();
  EXPECT_EQ(violations[0].value("resource", ""), "api.compat.test:443/https") << violations[0].dump();
  EXPECT_EQ(violations[0].value("errno", ""), "ECONNRESET") << violations[0].dump();
  EXPECT_NE(violations[0].value("detail", "").find("GREASE"), std::string::npos) << violations[0].dump();
  // Every intercepted hello (Chrome 131, 117 and 100's) carried the real key upstream.
  for (const char* label : {"chrome131", "chrome117", "chrome100"}) {
    expect_key_arrived(std::string("/v1/models/chromium-") + label, "authorization", "Bearer " + *key_);
  }
  size_t passthrough = 0;
  for (const auto& req : api_->requests()) {
    const std::string path = req.value("path", "");
    EXPECT_NE(path, "/hello/chromium-ech") << "a hello with ECH reached a passthrough server";
    if (path.rfind("/hello/chromium-passthrough-", 0) != 0) continue;
    ++passthrough;
    EXPECT_EQ(req.value("sni", ""), "api.compat.test") << req.dump();
  }
  EXPECT_EQ(passthrough, 2U) << api_->describe();
  expect_key_nowhere(r);
}

// The agent's memory never holds the key (C11): a Python agent that used both APIs through
// the gateway with bound secrets (urllib, requests, httpx streaming) waits, and the test reads
// every readable mapping of its process through /proc/PID/mem. Root only: reading another
// user's process memory needs CAP_SYS_PTRACE (the rootless variant's agent runs as nobody and
// is read by the root test process all the same).
TEST_F(SecretsGatewayTest, ThePythonAgentsMemoryNeverHoldsTheKey) {
  if (::geteuid() != 0) GTEST_SKIP() << "reading the agent's memory needs root";
  auto args = python_args();
  for (const char* c : {"urllib_openai", "requests_anthropic", "httpx_openai_stream", "memscan_wait"}) {
    args.emplace_back(c);
  }
  auto r = run_and_scan_memory(copy_pack("secrets-python"), args);
  expect_results(r, {"urllib_openai", "requests_anthropic", "httpx_openai_stream", "memscan_wait"}, "ok");
  EXPECT_EQ(r.output.exit_code, 0) << r.context();
  expect_key_arrived("/v1/messages", "x-api-key", *key_);
  expect_key_nowhere(r);
}

TEST_F(SecretsGatewayTest, TheNodeAgentsMemoryNeverHoldsTheKey) {
  if (::geteuid() != 0) GTEST_SKIP() << "reading the agent's memory needs root";
  fs::path pack = node_pack();
  ASSERT_FALSE(pack.empty());
  const std::vector<std::string> checks = {"openai_chat", "openai_stream", "anthropic_message", "memscan_wait"};
  auto r = run_and_scan_memory(pack, checks);
  expect_results(r, checks, "ok");
  EXPECT_EQ(r.output.exit_code, 0) << r.context();
  expect_key_nowhere(r);
}

// curl (Debian's, copied into a native pack: a Comet executes only the pack's own program) trusts
// the run's CA through CURL_CA_BUNDLE with nothing configured, and sees the rules' 403s. (Its
// command line cannot expand the placeholder variable without a shell: substitution itself is
// the same gateway path the other clients prove.)
TEST_F(SecretsGatewayTest, CurlTrustsTheRunCaAndSeesRefusals) {
  if (!fs::exists("/usr/bin/curl")) GTEST_SKIP() << "no /usr/bin/curl on this host";
  const fs::path pack = dir_.path() / "pack";
  fs::create_directories(pack);
  fs::copy_file("/usr/bin/curl", pack / "curl");
  dir_.write("pack/soyapack.yaml", R"(soyapack: v0
name: compat-secrets-curl
version: 0.1.0
agent: {runtime: native, entrypoint: curl}
secrets:
  OPENAI_API_KEY: {hosts: [api.openai.com]}
  ANTHROPIC_API_KEY: {hosts: [api.openai.com]}
capabilities:
  egress:
    - host: api.openai.com
      port: 443
      protocol: https
      http: [{method: GET, path: /sse}]
  fs: {read: [/workdir]}
  determinism_tier: read-only
)");
  auto ok = run(pack, {"-sS", "--no-buffer", "https://api.openai.com/sse"});
  EXPECT_EQ(ok.output.exit_code, 0) << ok.context();
  EXPECT_NE(ok.output.out.find("event: tick"), std::string::npos) << ok.context();
  auto denied = run(pack, {"-sS", "-i", "-X", "DELETE", "https://api.openai.com/sse"});
  EXPECT_EQ(denied.output.exit_code, 3) << denied.context();
  EXPECT_NE(denied.output.out.find("x-soyaos-denied"), std::string::npos) << denied.context();
  expect_refusal(denied, "DELETE https://api.openai.com/sse");
}

TEST_F(SecretsGatewayTest, NodeSdksWithDefaultBaseUrls) {
  fs::path pack = node_pack();
  ASSERT_FALSE(pack.empty());
  const std::vector<std::string> checks = {"env_placeholders", "openai_chat", "openai_stream",
                                           "anthropic_message", "anthropic_stream", "fetch_get"};
  const std::vector<std::string> denied = {"deny_openai_models_list", "deny_fetch_wrong_method"};
  std::vector<std::string> args = checks;
  args.insert(args.end(), denied.begin(), denied.end());
  auto r = run(pack, args);
  expect_results(r, checks, "ok");
  expect_results(r, denied, "refused");
  EXPECT_EQ(r.output.exit_code, 3) << r.context();
  expect_refusal(r, "GET https://api.openai.com/v1/models");
  expect_refusal(r, "DELETE https://api.anthropic.com/v1/messages");
  EXPECT_EQ(r.of_type("capability_violation").size(), 2U) << r.context();
  expect_key_nowhere(r);
  expect_key_arrived("/v1/chat/completions", "authorization", "Bearer " + *key_);
  expect_key_arrived("/v1/messages", "x-api-key", *key_);
}

}  // namespace
}  // namespace soyaos::testing
