// Secrets, the operator side (SPEC.md M7, C11; docs/secrets.md): `soyaos secret set|ls|rm`
// (permissions, stdin, the trailing newline), the --secret forms, a missing value refused
// before start (125) with the message, an undeclared --secret (2), and inside a real Comet
// the agent seeing only a per-run placeholder (its environment and /proc/self/environ)
// while the value appears nowhere in $SOYAOS_HOME outside secrets/, in events, stdout,
// stderr or --out. Root and nobody (rootless.Secrets*), embedded Moon and daemon.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "harness.h"
#include "patched_library.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

// A value no test output could contain by accident.
constexpr const char* kValue = "sk-test-Q7vLw2pXz9RkT4mN8bYc1dHf6gJs3aE5";

const std::string kManifest = R"(soyapack: v0
name: secret-probe
version: 0.1.0
agent:
  runtime: python3
  entrypoint: main.py
secrets:
  API_KEY:
    hosts: [api.example.com]
capabilities:
  egress:
    - {host: api.example.com, port: 443, protocol: https}
  fs:
    write: [/workdir/out]
  determinism_tier: read-only
resources:
  timeout: 20s
examples:
  - name: basic
    expect: {stdout_contains: "VALUE soyaos-placeholder-"}
)";

// Prints what the agent can see of API_KEY: its variable, whether /proc/self/environ holds
// exactly that, and the whole environ (so the test can look for the value in it).
const std::string kMain = R"(import os
v = os.environ.get("API_KEY", "<unset>")
print("VALUE " + v)
with open("/proc/self/environ", "rb") as f:
    env = f.read()
print("ENVIRON_ENTRY", (b"API_KEY=" + v.encode() + b"\0") in env)
print("ENVIRON " + env.replace(b"\0", b" ").decode())
with open("/workdir/out/seen.txt", "w") as f:
    f.write(v + "\n" + env.replace(b"\0", b"\n").decode())
)";

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Every regular file under `dir` (but `skip`) that contains `needle`.
std::vector<std::string> files_containing(const fs::path& dir, const std::string& needle, const fs::path& skip = {}) {
  std::vector<std::string> hits;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return hits;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!skip.empty() && it->path() == skip) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    if (contains(read_file(it->path()), needle)) hits.push_back(it->path().string());
  }
  return hits;
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

class SecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    dir_.write("pack/soyapack.yaml", kManifest);
    dir_.write("pack/main.py", kMain);
    pack_ = (dir_.path() / "pack").string();
    home_ = dir_.path() / "home";
    fs::create_directories(home_);
    fs::permissions(home_, fs::perms::all);
  }
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra = {}) const {
    extra["SOYAOS_HOME"] = home_.string();
    return extra;
  }
  RunOutput secret(const std::vector<std::string>& args, const std::string& stdin_data = "") const {
    std::vector<std::string> a = {"secret"};
    a.insert(a.end(), args.begin(), args.end());
    return run_soyaos_stdin(a, stdin_data, env());
  }
  // `soyaos run` with --out and --events in fresh places.
  RunOutput run(const std::vector<std::string>& extra, std::map<std::string, std::string> e = {}) {
    out_ = dir_.path() / ("out" + std::to_string(n_));
    events_ = dir_.path() / ("events" + std::to_string(n_) + ".jsonl");
    ++n_;
    std::vector<std::string> args = {"run", pack_, "--out", out_.string(), "--events", events_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_soyaos(args, env(std::move(e)), dir_.path());
  }
  // The agent saw a placeholder, and only that; the value is nowhere the run wrote.
  void expect_placeholder_only(const RunOutput& r) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("VALUE (soyaos-placeholder-[0-9a-f]{32})\n"))) << r.out;
    last_placeholder_ = m[1];
    EXPECT_TRUE(contains(r.out, "ENVIRON_ENTRY True")) << r.out;
    EXPECT_FALSE(contains(r.out, kValue));
    EXPECT_FALSE(contains(r.err, kValue));
    EXPECT_FALSE(contains(read_file(events_), kValue));
    EXPECT_TRUE(contains(read_file(events_), "run_finished"));
    EXPECT_EQ(read_file(out_ / "seen.txt").substr(0, last_placeholder_.size()), last_placeholder_);
    EXPECT_TRUE(files_containing(out_, kValue).empty());
    EXPECT_EQ(files_containing(home_, kValue, home_ / "secrets"), std::vector<std::string>{});
  }
  TempDir dir_;
  std::string pack_;
  fs::path home_, out_, events_;
  std::string last_placeholder_;
  int n_ = 0;
};

// ---- the store -------------------------------------------------------------------------

TEST_F(SecretsTest, SetReadsStdinDropsOneNewlineAndStoresPrivately) {
  auto r = secret({"set", "API_KEY"}, std::string(kValue) + "\n\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out + r.err, kValue));
  const fs::path file = home_ / "secrets" / "API_KEY";
  EXPECT_EQ(read_file(file), std::string(kValue) + "\n");  // exactly one newline dropped
  EXPECT_EQ(mode_of(home_ / "secrets"), 0700u);
  EXPECT_EQ(mode_of(file), 0600u);
  // Replaced atomically: no temporary file left behind.
  ASSERT_EQ(secret({"set", "API_KEY"}, kValue).exit_code, 0);
  EXPECT_EQ(read_file(file), kValue);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(home_ / "secrets")) entries += e.path().filename() == "API_KEY" ? 1 : 100;
  EXPECT_EQ(entries, 1u);
  // The value is never an argument: a second positional is a usage error.
  EXPECT_EQ(secret({"set", "API_KEY", kValue}).exit_code, 2);
}

TEST_F(SecretsTest, LsShowsNamesAndTimesNeverValues) {
  ASSERT_EQ(secret({"set", "B_KEY"}, "bee-value-1234\n").exit_code, 0);
  ASSERT_EQ(secret({"set", "A_KEY"}, kValue).exit_code, 0);
  auto ls = secret({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(std::regex_match(ls.out, std::regex("A_KEY  \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ\n"
                                                  "B_KEY  \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ\n")))
      << ls.out;
  auto json = secret({"ls", "--json"});
  ASSERT_EQ(json.exit_code, 0);
  EXPECT_TRUE(contains(json.out, "{\"name\":\"A_KEY\",\"set\":\"")) << json.out;
  for (const auto& o : {ls.out, ls.err, json.out}) {
    EXPECT_FALSE(contains(o, kValue));
    EXPECT_FALSE(contains(o, "bee-value"));
  }
}

TEST_F(SecretsTest, RmRemovesAndSaysWhenThereIsNothing) {
  ASSERT_EQ(secret({"set", "API_KEY"}, kValue).exit_code, 0);
  auto rm = secret({"rm", "API_KEY"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(home_ / "secrets" / "API_KEY"));
  auto again = secret({"rm", "API_KEY"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(contains(again.err, "no secret API_KEY")) << again.err;
  EXPECT_EQ(secret({"ls"}).out, "");
}

TEST_F(SecretsTest, BadNamesAndEmptyValuesAreRefused) {
  EXPECT_EQ(secret({"set", "api_key"}, kValue).exit_code, 2);
  EXPECT_EQ(secret({"set", "../X"}, kValue).exit_code, 2);
  EXPECT_EQ(secret({"rm", "a-b"}).exit_code, 2);
  auto empty = secret({"set", "API_KEY"}, "\n");
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_TRUE(contains(empty.err, "empty")) << empty.err;
  EXPECT_FALSE(fs::exists(home_ / "secrets" / "API_KEY"));
}

TEST_F(SecretsTest, AReadableStoreFileIsRefusedWithTheReason) {
  ASSERT_EQ(secret({"set", "API_KEY"}, kValue).exit_code, 0);
  fs::permissions(home_ / "secrets" / "API_KEY", fs::perms(0644));
  auto r = run({});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(contains(r.err, "mode 0644: others can read or change it")) << r.err;
  EXPECT_FALSE(contains(r.out, "VALUE"));
  fs::permissions(home_ / "secrets" / "API_KEY", fs::perms(0600));
  fs::permissions(home_ / "secrets", fs::perms(0755));
  auto dir = run({});
  EXPECT_EQ(dir.exit_code, 125);
  EXPECT_TRUE(contains(dir.err, "the secret store")) << dir.err;
  EXPECT_TRUE(contains(dir.err, "mode 0755")) << dir.err;
  EXPECT_FALSE(contains(dir.err + dir.out, kValue));
}

TEST_F(SecretsTest, AStoreFileOfAnotherUserIsRefused) {
  if (rootless_mode() || ::geteuid() != 0) GTEST_SKIP() << "needs root to give the file to another user";
  ASSERT_EQ(secret({"set", "API_KEY"}, kValue).exit_code, 0);
  ASSERT_EQ(::chown((home_ / "secrets" / "API_KEY").c_str(), 65534, 65534), 0);
  auto r = run({});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(contains(r.err, "is owned by uid 65534, not by you")) << r.err;
}

// ---- runs --------------------------------------------------------------------------------

TEST_F(SecretsTest, TheAgentSeesOnlyAPlaceholderFromTheStore) {
  ASSERT_EQ(secret({"set", "API_KEY"}, std::string(kValue) + "\n").exit_code, 0);
  auto r = run({});
  expect_placeholder_only(r);
  // Per run, and never replayed from the cache (a read-only pack with a secret): a second
  // run starts a Comet and gets another placeholder.
  const std::string first = last_placeholder_;
  auto again = run({});
  expect_placeholder_only(again);
  EXPECT_NE(last_placeholder_, first);
  EXPECT_FALSE(contains(again.err, "replayed from cache")) << again.err;
}

TEST_F(SecretsTest, SecretFromTheOperatorsEnvironment) {
  expect_placeholder_only(run({"--secret", "API_KEY"}, {{"API_KEY", kValue}}));
  expect_placeholder_only(run({"--secret", "API_KEY=env:MY_VAR"}, {{"MY_VAR", kValue}}));
}

TEST_F(SecretsTest, SecretFromAFile) {
  dir_.write("key.txt", std::string(kValue) + "\n");
  expect_placeholder_only(run({"--secret", "API_KEY=file:" + (dir_.path() / "key.txt").string()}));
}

TEST_F(SecretsTest, AMissingValueStopsTheRunBeforeStart) {
  auto r = run({});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(contains(r.err, "secret API_KEY: no value")) << r.err;
  EXPECT_TRUE(contains(r.err, "--secret API_KEY (from your environment variable API_KEY)")) << r.err;
  EXPECT_TRUE(contains(r.err, "--secret API_KEY=env:VAR or --secret API_KEY=file:PATH")) << r.err;
  EXPECT_TRUE(contains(r.err, "`soyaos secret set API_KEY`")) << r.err;
  EXPECT_FALSE(contains(r.out, "VALUE"));
  EXPECT_FALSE(fs::exists(events_)) << "nothing started, nothing emitted";
  auto unset = run({"--secret", "API_KEY"});
  EXPECT_EQ(unset.exit_code, 125);
  EXPECT_TRUE(contains(unset.err, "your environment has no variable API_KEY")) << unset.err;
  auto nofile = run({"--secret", "API_KEY=file:" + (dir_.path() / "nope").string()});
  EXPECT_EQ(nofile.exit_code, 125);
  EXPECT_TRUE(contains(nofile.err, "No such file")) << nofile.err;
  auto empty = run({"--secret", "API_KEY=env:EMPTY"}, {{"EMPTY", ""}});
  EXPECT_EQ(empty.exit_code, 125);
  EXPECT_TRUE(contains(empty.err, "empty")) << empty.err;
}

// libssl is loaded (dlopen) only when a run intercepts TLS (src/common/libssl.h): a library
// that cannot be loaded refuses the run (125) naming it, before the agent runs; a command
// that uses no TLS does not load it at all.
TEST_F(SecretsTest, UnloadableLibsslRefusesAnInterceptingRunNamingIt) {
  dir_.write("badlib/libssl.so.3", "not a shared object\n");
  const std::string libdir = (dir_.path() / "badlib").string();
  auto version = run_soyaos({"version"}, env({{"LD_LIBRARY_PATH", libdir}}));
  EXPECT_EQ(version.exit_code, 0) << version.err;
  auto r = run({"--secret", "API_KEY"}, {{"API_KEY", kValue}, {"LD_LIBRARY_PATH", libdir}});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_TRUE(contains(r.err, "TLS interception: cannot load libssl.so.3 (the libssl3 package)")) << r.err;
  EXPECT_FALSE(contains(r.out, "VALUE"));
}

// libcrypto too is loaded (dlopen) only where used (src/common/libcrypto.h): an intercepting
// run without it is refused (125) naming it, before the agent runs; `version` and runs without
// TLS do not load it (CacheTest.ARunAHitAndVersionNeverLoadLibcrypto).
TEST_F(SecretsTest, UnloadableLibcryptoRefusesAnInterceptingRunNamingIt) {
  dir_.write("badlib/libcrypto.so.3", "not a shared object\n");
  const std::string libdir = (dir_.path() / "badlib").string();
  auto version = run_soyaos({"version"}, env({{"LD_LIBRARY_PATH", libdir}}));
  EXPECT_EQ(version.exit_code, 0) << version.err;
  auto r = run({"--secret", "API_KEY"}, {{"API_KEY", kValue}, {"LD_LIBRARY_PATH", libdir}});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_TRUE(contains(r.err, "TLS interception: cannot load libcrypto.so.3 (the libssl3 package)")) << r.err;
  EXPECT_FALSE(contains(r.out, "VALUE"));
}

// A libssl that loads but lacks one function soyaos calls (one libssl does not call itself,
// so RTLD_NOW alone would not notice): refused before the run starts, naming it — not a
// run killed in its gateway thread at the function's first call, after its agent started.
TEST_F(SecretsTest, ALibsslLackingAFunctionRefusesTheRunBeforeItStarts) {
  const auto libdir = library_lacking("/lib/x86_64-linux-gnu/libssl.so.3", "SSL_set1_host", dir_.path() / "oldlib");
  auto r = run({"--secret", "API_KEY"}, {{"API_KEY", kValue}, {"LD_LIBRARY_PATH", libdir.string()}});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_TRUE(contains(r.err, "TLS interception: libssl.so.3 lacks SSL_set1_host (version OPENSSL_3.0.0)")) << r.err;
  EXPECT_FALSE(contains(r.out, "VALUE"));
  // Refused before run_started: no run of it is in the Moon (the agent never started).
  auto started = run_soyaos({"scope", "query", "--type", "run_started", "--format", "json"}, env());
  EXPECT_EQ(started.out, "") << started.out;
}

TEST_F(SecretsTest, BadSecretArgumentsAreUsageErrors) {
  auto undeclared = run({"--secret", "OTHER_KEY"}, {{"OTHER_KEY", kValue}});
  EXPECT_EQ(undeclared.exit_code, 2);
  EXPECT_TRUE(contains(undeclared.err, "the manifest declares no secret OTHER_KEY")) << undeclared.err;
  auto literal = run({"--secret", std::string("API_KEY=") + kValue});
  EXPECT_EQ(literal.exit_code, 2);
  EXPECT_TRUE(contains(literal.err, "a value on the command line is not accepted")) << literal.err;
  EXPECT_FALSE(contains(literal.err, kValue)) << "the refusal must not echo the value";
  auto twice = run({"--secret", "API_KEY", "--secret", "API_KEY=env:X"}, {{"API_KEY", kValue}, {"X", kValue}});
  EXPECT_EQ(twice.exit_code, 2);
  auto bad = run({"--secret", "api-key"});
  EXPECT_EQ(bad.exit_code, 2);
}

TEST_F(SecretsTest, PackTestUsesTheSameSources) {
  auto missing = run_soyaos({"pack", "test", pack_}, env(), dir_.path());
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_TRUE(contains(missing.err, "secret API_KEY: no value")) << missing.err;
  auto undeclared = run_soyaos({"pack", "test", pack_, "--secret", "NOPE"}, env({{"NOPE", "x"}}), dir_.path());
  EXPECT_EQ(undeclared.exit_code, 2) << undeclared.err;
  auto ok = run_soyaos({"pack", "test", pack_, "--secret", "API_KEY=env:K"}, env({{"K", kValue}}), dir_.path());
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_TRUE(contains(ok.out, "PASS  basic")) << ok.out;
  EXPECT_FALSE(contains(ok.out + ok.err, kValue));
  EXPECT_EQ(files_containing(home_, kValue, home_ / "secrets"), std::vector<std::string>{});
}

// M8 rules are enforced by the gateway (TLS termination, docs/secrets.md): a pack that declares
// them runs, and the Comet trusts the run's CA with nothing configured (its requests are
// tested end to end with real clients in tests/compat/secrets_test.cc).
TEST_F(SecretsTest, HttpRulesRunWithTheRunCaTrusted) {
  std::string ruled = kManifest;
  const std::string plain = "protocol: https}";
  ruled.replace(ruled.find(plain), plain.size(), "protocol: https, http: [{method: GET, path: /}]}");
  dir_.write("pack/soyapack.yaml", ruled);
  auto r = run({"--secret", "API_KEY"}, {{"API_KEY", kValue}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "VALUE soyaos-placeholder-")) << r.out;
  for (const char* var : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"}) {
    EXPECT_TRUE(contains(r.out, std::string(var) + "=/etc/soyaos/ca-certificates.crt")) << var << "\n" << r.out;
  }
  EXPECT_FALSE(contains(r.out + r.err, kValue));
}

// ---- lint, push and inspect ----------------------------------------------------------------

TEST_F(SecretsTest, PushRefusesACredentialLiteralWithoutRepeatingIt) {
  const std::string leaky = "  entrypoint: main.py\n  env: {OTHER: \"" + std::string(kValue) + "\"}\n";
  dir_.write("leaky/soyapack.yaml", [&] {
    std::string m = kManifest;
    m.replace(m.find("  entrypoint: main.py\n"), std::string("  entrypoint: main.py\n").size(), leaky);
    return m;
  }());
  dir_.write("leaky/main.py", kMain);
  const std::string leaky_pack = (dir_.path() / "leaky").string();
  auto lint = run_soyaos({"pack", "lint", leaky_pack}, env());
  EXPECT_EQ(lint.exit_code, 1);
  EXPECT_TRUE(contains(lint.out, "agent.env.OTHER holds what looks like an OpenAI-style secret key (sk-...)"))
      << lint.out;
  auto push = run_soyaos({"pack", "push", leaky_pack}, env());
  EXPECT_EQ(push.exit_code, 1);
  EXPECT_TRUE(contains(push.err, "refused: lint errors")) << push.err;
  EXPECT_FALSE(contains(push.out + push.err + lint.out + lint.err, kValue));
  // A clean pack with http rules pushes; inspect lists its secrets and http rules.
  std::string ruled = kManifest;
  const std::string plain = "protocol: https}";
  ruled.replace(ruled.find(plain), plain.size(), "protocol: https, http: [{method: POST, path: /v1/messages}]}");
  dir_.write("ruled/soyapack.yaml", ruled);
  dir_.write("ruled/main.py", kMain);
  auto ok = run_soyaos({"pack", "push", (dir_.path() / "ruled").string()}, env());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  auto inspect = run_soyaos({"pack", "inspect", "secret-probe@0.1.0"}, env());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_TRUE(contains(inspect.out, "secrets:\n  API_KEY  -> api.example.com\n")) << inspect.out;
  EXPECT_TRUE(contains(inspect.out, "http rules:\n  capabilities.egress[0]  api.example.com:443/https  POST /v1/messages\n"))
      << inspect.out;
  auto json = run_soyaos({"pack", "inspect", "secret-probe@0.1.0", "--format", "json"}, env());
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(contains(json.out, "\"secrets\": [")) << json.out;
  EXPECT_TRUE(contains(json.out, "\"name\": \"API_KEY\"")) << json.out;
  EXPECT_TRUE(contains(json.out, "\"http_rules\": [")) << json.out;
  EXPECT_TRUE(contains(json.out, "\"method\": \"POST\"")) << json.out;
}

}  // namespace
}  // namespace soyaos::testing
