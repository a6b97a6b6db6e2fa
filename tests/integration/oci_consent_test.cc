// Signatures, trust and consent through a REAL OCI registry (SPEC.md C12, docs/signing.md):
// Debian's docker-registry on 127.0.0.1, keys from Debian's minisign, each "host" a
// SOYAOS_HOME of its own. A signed pack pulls; unsigned, foreign-signed and re-tagged ones
// are refused at pull (1) and run (125) with an event; a first or wider version waits for
// approval, a narrower one does not. Root and nobody (the `rootless.` copies).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.h"
#include "registry_server.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class OciConsent : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RegistryServer::available()) GTEST_SKIP() << "docker-registry is not installed (scripts/setup.sh)";
    ASSERT_EQ(sh("command -v minisign"), 0) << "minisign is not installed (scripts/setup.sh)";
    fs::create_directories(t_.path() / "docker");
    ASSERT_EQ(reg_.start(t_.path() / "registry", {}), "");
  }
  RunOutput soyaos(const std::string& host, const std::vector<std::string>& args) const {
    return run_soyaos(args, {{"SOYAOS_HOME", (t_.path() / host).string()},
                             {"DOCKER_CONFIG", (t_.path() / "docker").string()},
                             {"SOYAOS_INSECURE_REGISTRIES", reg_.address()},
                             {"SOYAOS_REGISTRY_BACKOFF_MS", "10"}});
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
  void key(const std::string& name) {
    ASSERT_EQ(sh("minisign -G -W -p " + path(name + ".pub") + " -s " + path(name + ".key") + " >/dev/null"), 0);
    // Readable by the rootless copies' soyaos (nobody), which signs with it.
    fs::permissions(path(name + ".key"), fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  }
  void trust(const std::string& host, const std::string& pub) {
    fs::create_directories(t_.path() / host);
    fs::permissions(t_.path() / host, fs::perms::all);  // a SOYAOS_HOME nobody can write to
    std::ofstream(t_.path() / host / "moon.yaml", std::ios::trunc)
        << "trust:\n  - scope: \"" << reg_.address() << "/team/*\"\n    keys: [" << path(pub) << "]\n";
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
  TempDir t_;
  RegistryServer reg_;
};

TEST_F(OciConsent, TrustedScopesNeedASignatureByTheirKey) {
  key("team");
  key("other");
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0"), r1);
  trust("b", "team.pub");

  // Unsigned: refused, says "signature", an event.
  auto r = soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p0")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("signature"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("p0")));
  auto refused = events("b", "pack_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["data"]["reason"], "signature");
  EXPECT_EQ(refused[0]["data"]["stage"], "pull");

  // Signed by a key the scope does not trust: refused.
  ASSERT_EQ(soyaos("a", {"pack", "sign", r1, "--key", path("other.key")}).exit_code, 0);
  r = soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p1")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("signature"), std::string::npos) << r.err;

  // Signed by the team key: pulled, and minisign agrees on the pulled manifest's bytes.
  auto s = soyaos("a", {"pack", "sign", r1, "--key", path("team.key"), "-o", path("team.sig")});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("referrer sha256:"), std::string::npos) << s.out;
  r = soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p2")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("signature verified"), std::string::npos) << r.err;
  const std::string manifest_blob = path("b/remote/blobs/sha256/") + s.out.substr(s.out.find("sha256:") + 7, 64);
  EXPECT_EQ(sh("minisign -V -q -p " + path("team.pub") + " -x " + path("team.sig") + " -m " + manifest_blob), 0);
  auto inspect = soyaos("b", {"pack", "inspect", r1});
  EXPECT_NE(inspect.out.find("signature:    verified"), std::string::npos) << inspect.out;

  // Another artifact under the same tag (the digest changed): its old signature does not
  // cover it.
  push(pack("1.0.1"), r1);
  r = soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p3")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("signature"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("p3")));

  // At run too (125), with the registry gone: the kept signatures are checked offline, and
  // a trust change applies to what was pulled before.
  const std::string signed_digest = s.out.substr(s.out.find("sha256:"), 71);
  const std::string pinned = r1 + "@" + signed_digest;
  r = soyaos("b", {"pack", "pull", pinned, "-o", path("p4")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  reg_.stop();
  const std::string input = (fs::path(path("src-1.0.0")) / "examples" / "basic.json").string();
  r = soyaos("b", {"run", pinned, "--input", input, "--out", path("out1")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  trust("b", "other.pub");
  r = soyaos("b", {"run", pinned, "--input", input, "--out", path("out2")});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("signature"), std::string::npos) << r.err;
  refused = events("b", "pack_refused");
  ASSERT_FALSE(refused.empty());
  EXPECT_EQ(refused.back()["data"]["stage"], "run");
}

// E7: `pack approve` prints the capability diff's lines escaped once (they were escaped when
// the diff was formatted and again when printed: a backslash in a path showed as \\\\).
TEST_F(OciConsent, ApproveShowsTheDiffEscapedOnce) {
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0", "write: [/workdir/out]", "write: [/workdir/out, \"/workdir/out/a\\\\b\\e\"]"), r1);
  auto a = soyaos("b", {"pack", "approve", r1});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  for (const char c : {'\x1b', '\r', '\a'}) EXPECT_EQ(a.out.find(c), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("+ fs.write       /workdir/out/a\\\\b\\x1B  (wider)\n"), std::string::npos) << a.out;
  EXPECT_EQ(a.out.find("\\\\\\"), std::string::npos) << "escaped twice: " << a.out;
}

// A manifest path may hold a newline (only NUL is refused): `pack approve` shows it as \n
// inside its own change's line. The raw diff text was split on '\n' and each piece escaped,
// so the rest of the path printed as a line of its own, here a forged `- egress` removal.
TEST_F(OciConsent, ApproveShowsANewlineInAPathInsideItsLine) {
  const std::string r1 = ref("team/hello:1.0.0");
  push(pack("1.0.0", "write: [/workdir/out]",
            "write: [/workdir/out, \"/workdir/out/a\\n- egress         api.example.com:443 https\"]"),
       r1);
  auto a = soyaos("b", {"pack", "approve", r1});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::vector<std::string> fs_write;
  std::istringstream in(a.out);
  for (std::string line; std::getline(in, line);) {
    EXPECT_NE(line.rfind("- egress", 0), 0u) << "a forged line: " << a.out;
    if (line.rfind("+ fs.write", 0) == 0) fs_write.push_back(line);
  }
  ASSERT_EQ(fs_write.size(), 2u) << a.out;  // /workdir/out and the hostile path, one line each
  EXPECT_EQ(fs_write[0], "+ fs.write       /workdir/out  (wider)") << a.out;
  EXPECT_EQ(fs_write[1], "+ fs.write       /workdir/out/a\\n- egress         api.example.com:443 https  (wider)")
      << a.out;
}

TEST_F(OciConsent, FirstAndWiderVersionsWaitForApprovalNarrowerDoNot) {
  const std::string r1 = ref("team/hello:1.0.0"), r2 = ref("team/hello:2.0.0"), r3 = ref("team/hello:3.0.0");
  push(pack("1.0.0"), r1);
  push(pack("2.0.0", "  egress: []\n", "  egress:\n    - {host: api.example.com, port: 443, protocol: https}\n"), r2);
  push(pack("3.0.0", "memory: 256Mi", "memory: 128Mi"), r3);

  // The first version of a repository: shown, refused until approved.
  auto r = soyaos("b", {"pack", "pull", r1, "-o", path("p1")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("first version"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("approve"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("+ fs.write       /workdir/out"), std::string::npos) << r.err;
  r = soyaos("b", {"pack", "pull", "--approve", r1, "-o", path("p1")});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // Wider: not run (125), the diff shown; `pack diff` says the same.
  const std::string input = (fs::path(path("src-1.0.0")) / "examples" / "basic.json").string();
  r = soyaos("b", {"run", r2, "--input", input});
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("approve"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("+ egress         api.example.com:443/https  (wider)"), std::string::npos) << r.err;
  auto d = soyaos("b", {"pack", "diff", r1, r2, "--exit-code"});
  EXPECT_EQ(d.exit_code, 1) << d.err;
  EXPECT_NE(d.out.find("+ egress         api.example.com:443/https"), std::string::npos) << d.out;
  auto refused = events("b", "pack_refused");
  ASSERT_FALSE(refused.empty());
  EXPECT_EQ(refused.back()["data"]["reason"], "approval");
  EXPECT_EQ(refused.back()["data"]["stage"], "run");

  // Approved by hand: recorded with who, shown by inspect.
  auto a = soyaos("b", {"pack", "approve", r2});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("--- the approved " + r1), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("approved  " + r2), std::string::npos) << a.out;
  r = soyaos("b", {"pack", "pull", r2, "-o", path("p2")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto inspect = soyaos("b", {"pack", "inspect", r2});
  EXPECT_NE(inspect.out.find("consent:      approved"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("approved:     "), std::string::npos) << inspect.out;
  auto approved = events("b", "pack_approved");
  ASSERT_EQ(approved.size(), 2u);
  EXPECT_EQ(approved[1]["data"]["consent"], "wider");
  EXPECT_EQ(approved[1]["data"]["actor"]["uid"], rootless_mode() ? 65534 : 0);

  // Narrower than the newest approval: needs nothing.
  r = soyaos("b", {"pack", "pull", r3, "-o", path("p3")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(events("b", "pack_approved").size(), 2u);

  // Local references need no approval.
  EXPECT_EQ(soyaos("b", {"pack", "approve", "hello-report@1.0.0"}).exit_code, 2);
}

}  // namespace
}  // namespace soyaos::testing
