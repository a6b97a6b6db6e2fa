// Packs through a REAL OCI registry (SPEC.md C12, docs/registry.md): Debian's docker-registry
// (CNCF distribution) on 127.0.0.1 — plain http, and TLS with a test CA plus htpasswd basic
// auth — and a hostile registry (tests/fixtures/fake_registry.py) for what a real one never
// sends. The real soyaos binary, each "host" a SOYAOS_HOME of its own.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "registry_server.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string field(const std::string& text, const std::string& after) {
  const auto p = text.find(after);
  if (p == std::string::npos) return "";
  const auto s = p + after.size();
  return text.substr(s, text.find_first_of(" \n", s) - s);
}

class OciRegistry : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RegistryServer::available()) GTEST_SKIP() << "docker-registry is not installed (scripts/setup.sh)";
    fs::create_directories(t_.path() / "docker");
    pack_ = t_.copy_from_source("examples/hello-report", "src").string();
  }
  void start(const RegistryServer::Options& o = {}) {
    const std::string why = reg_.start(t_.path() / "registry", o);
    ASSERT_EQ(why, "");
    if (!o.tls) insecure_ = reg_.address();
  }
  std::map<std::string, std::string> env(const std::string& host) const {
    std::map<std::string, std::string> e = {{"SOYAOS_HOME", (t_.path() / host).string()},
                                            {"DOCKER_CONFIG", (t_.path() / "docker").string()},
                                            {"SOYAOS_REGISTRY_BACKOFF_MS", "10"}};
    if (!insecure_.empty()) e["SOYAOS_INSECURE_REGISTRIES"] = insecure_;
    return e;
  }
  RunOutput soyaos(const std::string& host, const std::vector<std::string>& args,
                   std::map<std::string, std::string> extra = {}) const {
    auto e = env(host);
    for (auto& [k, v] : extra) e[k] = v;
    return run_soyaos(args, e);
  }
  [[nodiscard]] std::string ref(const std::string& repo_tag) const { return reg_.address() + "/" + repo_tag; }
  // A second version of the pack, different content.
  std::string variant(const std::string& version) {
    const fs::path dir = t_.copy_from_source("examples/hello-report", "src-" + version);
    std::string m = read_file(dir / "soyapack.yaml");
    m.replace(m.find("version: 1.0.0"), 14, "version: " + version);
    std::ofstream(dir / "soyapack.yaml") << m;
    return dir.string();
  }
  TempDir t_;
  RegistryServer reg_;
  std::string insecure_;
  std::string pack_;
};

TEST_F(OciRegistry, PushPullInspectOverPlainHttpWithTheLocalDigests) {
  start();
  const std::string r1 = ref("team/hello:1.0.0");
  // Chunked upload (4 KiB chunks) the first time.
  auto push = soyaos("a", {"pack", "push", pack_, r1}, {{"SOYAOS_REGISTRY_CHUNK_SIZE", "4096"}});
  ASSERT_EQ(push.exit_code, 0) << push.err;
  EXPECT_EQ(push.out.rfind("pushed  " + r1 + "  sha256:", 0), 0U) << push.out;
  EXPECT_NE(push.out.find("2 uploaded"), std::string::npos) << push.out;
  EXPECT_NE(push.out.find("chunks"), std::string::npos) << push.out;
  const std::string manifest_digest = field(push.out, r1 + "  ");
  const std::string archive = field(push.out, "archive ");

  // An unchanged re-push uploads no blob.
  auto again = soyaos("a", {"pack", "push", pack_, r1});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("0 uploaded (0 bytes), 2 already there"), std::string::npos) << again.out;
  EXPECT_EQ(field(again.out, r1 + "  "), manifest_digest);
  // Another repository of the registry: the layer is mounted, not uploaded.
  auto other = soyaos("a", {"pack", "push", pack_, ref("other/hello:1.0.0")});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_NE(other.out.find("1 mounted"), std::string::npos) << other.out;

  // The archive digest is the local Moon's.
  auto local = soyaos("a", {"pack", "push", pack_});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  EXPECT_NE(local.out.find(archive), std::string::npos) << local.out << " vs " << archive;

  // Interop: skopeo reads our manifest.
  std::string raw;
  ASSERT_EQ(sh("skopeo inspect --raw --tls-verify=false docker://" + r1, &raw), 0) << raw;
  json m = json::parse(raw);
  EXPECT_EQ(m["artifactType"], "application/vnd.soyaos.pack.v0");
  EXPECT_EQ(m["layers"][0]["digest"], archive);
  EXPECT_EQ(m["annotations"]["org.opencontainers.image.version"], "1.0.0");
  EXPECT_EQ(m["annotations"]["org.opencontainers.image.title"], "hello-report");

  // Another host: inspect without the layer, then pull, byte-identical files.
  auto inspect = soyaos("b", {"pack", "inspect", r1});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("tier:         read-only"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("digest:       " + manifest_digest), std::string::npos) << inspect.out;
  EXPECT_FALSE(fs::exists(t_.path() / "b" / "remote" / "blobs" / "sha256" / archive.substr(7)));
  auto ij = soyaos("b", {"pack", "inspect", r1, "--format", "json"});
  ASSERT_EQ(ij.exit_code, 0) << ij.err;
  EXPECT_EQ(json::parse(ij.out)["capabilities"]["determinism_tier"], "read-only");

  const fs::path out = t_.path() / "pulled";
  auto pull = soyaos("b", {"pack", "pull", "--approve", r1, "-o", out.string()});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_EQ(read_file(out / "main.py"), read_file(fs::path(pack_) / "main.py"));
  EXPECT_EQ(read_file(out / "soyapack.yaml"), read_file(fs::path(pack_) / "soyapack.yaml"));
  // Pinned by digest works too; a digest the registry does not have is an error.
  auto pinned = soyaos("c", {"pack", "pull", "--approve", reg_.address() + "/team/hello@" + manifest_digest, "-o",
                             (t_.path() / "pinned").string()});
  EXPECT_EQ(pinned.exit_code, 0) << pinned.err;
  auto missing = soyaos("c", {"pack", "pull", "--approve", ref("team/hello:9.9.9"), "-o", (t_.path() / "none").string()});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("not found"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(t_.path() / "none"));
}

TEST_F(OciRegistry, TamperedBlobsAndManifestsInTheRegistryAreRefused) {
  start();
  const std::string r1 = ref("team/hello:1.0.0");
  auto push = soyaos("a", {"pack", "push", pack_, r1});
  ASSERT_EQ(push.exit_code, 0) << push.err;
  const std::string manifest_digest = field(push.out, r1 + "  ");
  const std::string archive = field(push.out, "archive ");
  // Another artifact under the same tag: a pull pinned to the first digest still gets the first.
  auto v2 = soyaos("a", {"pack", "push", variant("1.0.1"), r1});
  ASSERT_EQ(v2.exit_code, 0) << v2.err;
  ASSERT_NE(field(v2.out, r1 + "  "), manifest_digest);
  auto pinned = soyaos("b", {"pack", "pull", "--approve", r1 + "@" + manifest_digest, "-o", (t_.path() / "p1").string()});
  ASSERT_EQ(pinned.exit_code, 0) << pinned.err;
  EXPECT_NE(read_file(t_.path() / "p1" / "soyapack.yaml").find("version: 1.0.0"), std::string::npos);

  // A modified layer in the registry's storage: refused, nothing extracted.
  const fs::path data = reg_.storage() / "docker/registry/v2/blobs/sha256" / archive.substr(7, 2) / archive.substr(7) / "data";
  ASSERT_TRUE(fs::exists(data));
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(600);
    f.put('X');
  }
  auto bad = soyaos("c", {"pack", "pull", "--approve", r1 + "@" + manifest_digest, "-o", (t_.path() / "p2").string()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("does not match its digest"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(t_.path() / "p2"));
  EXPECT_FALSE(fs::exists(t_.path() / "c" / "remote" / "blobs" / "sha256" / archive.substr(7)));

  // A modified manifest (the registry still names the old digest): refused.
  const std::string md = field(v2.out, r1 + "  ");
  const fs::path mdata = reg_.storage() / "docker/registry/v2/blobs/sha256" / md.substr(7, 2) / md.substr(7) / "data";
  std::string text = read_file(mdata);
  text.replace(text.find("1.0.1"), 5, "6.6.6");
  std::ofstream(mdata, std::ios::trunc) << text;
  auto badm = soyaos("c", {"pack", "inspect", r1});
  EXPECT_EQ(badm.exit_code, 1);
  EXPECT_NE(badm.err.find("refused"), std::string::npos) << badm.err;
}

TEST_F(OciRegistry, TlsWithBasicAuthLoginAndLogout) {
  start({.tls = true, .auth = true});
  const std::string r1 = ref("team/hello:1.0.0");
  // The test CA, through moon.yaml tls.ca_files.
  for (const char* host : {"a", "b"}) {
    fs::create_directories(t_.path() / host);
    std::ofstream(t_.path() / host / "moon.yaml") << "tls:\n  ca_files: [" << reg_.ca_file().string() << "]\n";
  }
  auto anon = soyaos("a", {"pack", "push", pack_, r1});
  EXPECT_EQ(anon.exit_code, 1);
  EXPECT_NE(anon.err.find("soyaos login " + reg_.address()), std::string::npos) << anon.err;

  auto wrong = run_soyaos_stdin({"login", reg_.address(), "-u", RegistryServer::kUser}, "nope\n", env("a"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_FALSE(fs::exists(t_.path() / "docker" / "config.json"));
  auto login = run_soyaos_stdin({"login", reg_.address(), "-u", RegistryServer::kUser},
                                std::string(RegistryServer::kPassword) + "\n", env("a"));
  ASSERT_EQ(login.exit_code, 0) << login.err;
  const json cfg = json::parse(read_file(t_.path() / "docker" / "config.json"));
  EXPECT_TRUE(cfg["auths"].contains(reg_.address()));
  EXPECT_EQ(fs::status(t_.path() / "docker" / "config.json").permissions() & fs::perms::group_read, fs::perms::none);

  auto push = soyaos("a", {"pack", "push", pack_, r1});
  ASSERT_EQ(push.exit_code, 0) << push.err;
  auto pull = soyaos("b", {"pack", "pull", "--approve", r1, "-o", (t_.path() / "pulled").string()});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  // Without the CA the certificate is not trusted: refused, not downgraded.
  auto untrusted = soyaos("c", {"pack", "inspect", r1});
  EXPECT_EQ(untrusted.exit_code, 1);
  EXPECT_NE(untrusted.err.find("certificate"), std::string::npos) << untrusted.err;
  // skopeo reads it with the same credentials file.
  std::string raw;
  EXPECT_EQ(sh("skopeo inspect --raw --cert-dir /nonexistent --tls-verify=false --authfile '" +
                   (t_.path() / "docker" / "config.json").string() + "' docker://" + r1,
               &raw),
            0)
      << raw;

  auto logout = soyaos("a", {"logout", reg_.address()});
  ASSERT_EQ(logout.exit_code, 0) << logout.err;
  EXPECT_EQ(logout.out, "logged out  " + reg_.address() + "\n");
  auto after = soyaos("b", {"pack", "inspect", r1});
  EXPECT_EQ(after.exit_code, 1);
  EXPECT_NE(after.err.find("unauthorized"), std::string::npos) << after.err;
}

TEST_F(OciRegistry, MalformedReferencesAreUsageErrors) {
  for (const std::string& bad : {std::string("127.0.0.1:5000/../x:1"), std::string("127.0.0.1:5000/A:1"),
                                 std::string("127.0.0.1:5000/x@sha256:12")}) {
    auto r = soyaos("a", {"pack", "pull", bad});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("not a registry reference"), std::string::npos) << r.err;
  }
}

// The pack is pulled on first use, then runs with the registry gone. Root and nobody.
TEST_F(OciRegistry, OciRunPullsOnFirstUseThenRunsOffline) {
  start();
  const std::string r1 = ref("team/hello:1.0.0");
  ASSERT_EQ(soyaos("a", {"pack", "push", pack_, r1}).exit_code, 0);
  const std::string input = (fs::path(pack_) / "examples" / "basic.json").string();
  // Nothing from a registry runs before the operator approved its capabilities (C12).
  auto refused = soyaos("b", {"run", r1, "--input", input});
  EXPECT_EQ(refused.exit_code, 125) << refused.err;
  EXPECT_NE(refused.err.find("approve"), std::string::npos) << refused.err;
  ASSERT_EQ(soyaos("b", {"pack", "approve", r1}).exit_code, 0);
  auto first = soyaos("b", {"run", r1, "--input", input, "--out", (t_.path() / "out1").string()});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("pulled " + r1), std::string::npos) << first.err;
  EXPECT_TRUE(fs::exists(t_.path() / "out1" / "report.md"));
  reg_.stop();
  auto offline = soyaos("b", {"run", r1, "--input", input, "--out", (t_.path() / "out2").string()});
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_EQ(offline.err.find("pulled"), std::string::npos) << offline.err;
  EXPECT_TRUE(fs::exists(t_.path() / "out2" / "report.md"));
  // Never pulled and the registry is down: the run does not start.
  auto down = soyaos("c", {"run", r1, "--input", input});
  EXPECT_EQ(down.exit_code, 125) << down.err;
}

// ---- a hostile registry ----

class OciHostileRegistry : public OciRegistry {
 protected:
  // Pushes the pack to a real registry (for its blobs), then serves them from the fake one.
  void serve(const std::string& mode) {
    start();
    auto push = soyaos("a", {"pack", "push", pack_, ref("team/hello:1.0.0")});
    ASSERT_EQ(push.exit_code, 0) << push.err;
    const std::string md = field(push.out, ref("team/hello:1.0.0") + "  ");
    reg_.stop();
    const fs::path port_file = t_.path() / "fake.port";
    log_ = t_.path() / "fake.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      (void)::freopen("/dev/null", "w", stderr);
      ::execlp("python3", "python3", source_path("tests/fixtures/fake_registry.py").c_str(),
               (t_.path() / "a" / "remote" / "blobs" / "sha256").c_str(), md.c_str(), mode.c_str(),
               port_file.c_str(), log_.c_str(), nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(fs::exists(port_file));
    port_ = read_file(port_file);
    fake_ = "127.0.0.1:" + port_;
    insecure_ = fake_ + ",localhost:" + port_;
    std::ofstream(t_.path() / "docker" / "config.json") << R"({"auths":{")" << fake_ << R"(":{"auth":"dTpw"}}})";
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  RunOutput pull(const std::string& out, std::map<std::string, std::string> extra = {}) {
    return soyaos("b", {"pack", "pull", "--approve", fake_ + "/team/hello:1.0.0", "-o", (t_.path() / out).string()}, std::move(extra));
  }
  pid_t pid_ = -1;
  std::string fake_, port_;
  fs::path log_;
};

TEST_F(OciHostileRegistry, ControlPullWorksWithDockerConfigBasicAuth) {
  serve("ok");
  auto r = pull("ok");
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(OciHostileRegistry, OversizedManifestIsRefused) {
  serve("oversize");
  auto r = pull("x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("larger than 4 MiB"), std::string::npos) << r.err;
}

TEST_F(OciHostileRegistry, MalformedManifestIsRefused) {
  serve("malformed");
  auto r = pull("x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a JSON object"), std::string::npos) << r.err;
}

TEST_F(OciHostileRegistry, WrongMediaTypeIsRefused) {
  serve("mediatype");
  auto r = pull("x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has media type \"application/vnd.docker.distribution.manifest.v2+json\""), std::string::npos) << r.err;
}

// E7: the registry's own error text reaches the terminal escaped once, at the print boundary
// (cli/print_error.h): a C1 CSI as \u{009B}, a backslash as \\ (not doubled); the client already
// turns C0 controls into '?'. No ESC, CR, BEL or C1 byte on stderr or stdout.
TEST_F(OciHostileRegistry, ARegistrysErrorTextIsEscapedOnce) {
  serve("hostileerror");
  auto r = pull("x");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (const std::string& raw : {std::string("\x1b"), std::string("\r"), std::string("\a"), std::string("\xc2\x9b")}) {
    EXPECT_EQ(r.err.find(raw), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find(raw), std::string::npos) << r.out;
  }
  const std::string shown = "DENIED: m\\u{009B}2J?]0;t?? a\\\\b)";
  const auto at = r.err.find(shown);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(shown, at + 1), std::string::npos) << "printed twice: " << r.err;
  EXPECT_EQ(r.err.find("\\\\\\"), std::string::npos) << "escaped twice: " << r.err;
}

TEST_F(OciHostileRegistry, ManifestRedirectToAnotherHostIsRefused) {
  serve("redirect");
  auto r = pull("x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("only blob downloads may be redirected"), std::string::npos) << r.err;
}

TEST_F(OciHostileRegistry, BlobRedirectToAnotherHostGetsNoCredentials) {
  serve("blobredirect");
  auto r = pull("x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(log_), "auth=none\n");
}

TEST_F(OciHostileRegistry, ModifiedBlobIsRefusedBeforeUnpacking) {
  serve("badblob");
  auto r = pull("x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not match its digest"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(t_.path() / "x"));
}

TEST_F(OciHostileRegistry, StalledBlobIsAbandoned) {
  serve("stall");
  auto r = pull("x", {{"SOYAOS_REGISTRY_STALL_SECONDS", "1"}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("stalled"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(t_.path() / "x"));
}

TEST_F(OciHostileRegistry, InterruptedBlobIsResumed) {
  serve("flaky");
  auto r = pull("x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(t_.path() / "x" / "main.py"), read_file(fs::path(pack_) / "main.py"));
}

TEST_F(OciHostileRegistry, BearerTokenFlowAsksForTheRepositoryScope) {
  serve("bearer");
  auto r = pull("x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(log_), "service=fake scope=repository:team/hello:pull\n");  // one token, reused
}

TEST_F(OciHostileRegistry, CredentialHelperFromDockerConfig) {
  serve("ok");
  // docker-credential-soyaostest on PATH answers `get` with u:p (and logs what it was asked).
  const fs::path bin = t_.path() / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "docker-credential-soyaostest")
      << "#!/bin/sh\nread reg\necho \"$1 $reg\" >> " << (t_.path() / "helper.log").string()
      << "\nprintf '{\"ServerURL\":\"%s\",\"Username\":\"u\",\"Secret\":\"p\"}' \"$reg\"\n";
  fs::permissions(bin / "docker-credential-soyaostest", fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec |
                                                         fs::perms::group_read | fs::perms::others_read);
  std::ofstream(t_.path() / "docker" / "config.json") << R"({"credHelpers":{")" << fake_ << R"(":"soyaostest"}})";
  auto r = pull("x", {{"PATH", bin.string() + ":" + std::string(std::getenv("PATH"))}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(t_.path() / "helper.log"), "get " + fake_ + "\n");
}

TEST_F(OciHostileRegistry, BusyRegistryIsRetriedWithBackoff) {
  serve("busy");
  auto r = pull("x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace soyaos::testing
