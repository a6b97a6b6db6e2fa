// `soyaos pack sign` and `soyaos pack diff` end to end (SPEC.md C12): the real binary with
// SOYAOS_HOME in a temp directory, keys from Debian's minisign (scripts/setup.sh) and from
// common/minisign.h, and `minisign -V` checking what we signed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/minisign.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

int sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());  // NOLINT(cert-env33-c): test helper, fixed commands
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class PackSign : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sh("command -v minisign >/dev/null 2>&1"), 0) << "minisign is not installed (scripts/setup.sh)";
  }
  RunOutput soyaos(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
    env["SOYAOS_HOME"] = home();
    return run_soyaos(args, env);
  }
  [[nodiscard]] std::string home() const { return (t_.path() / "home").string(); }
  [[nodiscard]] std::string path(const std::string& name) const { return (t_.path() / name).string(); }
  std::string push_hello() {
    const std::string src = t_.copy_from_source("examples/hello-report", "hello").string();
    auto r = soyaos({"pack", "push", src});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return src;
  }
  // The OCI manifest digest of a pushed pack and its blob's path.
  std::string manifest_blob(const std::string& ref, std::string* digest = nullptr) {
    auto r = soyaos({"pack", "inspect", ref, "--format", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string d = json::parse(r.out)["oci_manifest"].get<std::string>();
    if (digest != nullptr) *digest = d;
    return home() + "/oci/blobs/sha256/" + d.substr(7);
  }
  TempDir t_;
};

TEST_F(PackSign, MinisignVerifiesWhatPackSignSigns) {
  push_hello();
  ASSERT_EQ(sh("minisign -G -W -p " + path("k.pub") + " -s " + path("k.key") + " >/dev/null"), 0);
  auto r = soyaos({"pack", "sign", "hello-report@1.0.0", "--key", path("k.key"), "-o", path("sig")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string digest;
  const std::string blob = manifest_blob("hello-report@1.0.0", &digest);
  auto pub = minisign::parse_public_key(read_file(path("k.pub")));
  ASSERT_TRUE(pub);
  EXPECT_EQ(r.out, "signed  hello-report@1.0.0  " + digest + "  key " + minisign::key_id_hex(pub->key_id) + "\n");
  // minisign checks the signature over the stored OCI manifest and shows the digest.
  EXPECT_EQ(sh("minisign -V -q -p " + path("k.pub") + " -x " + path("sig") + " -m " + blob), 0);
  EXPECT_EQ(sh("minisign -V -Q -p " + path("k.pub") + " -x " + path("sig") + " -m " + blob + " | grep -q 'digest:" +
               digest + "'"),
            0);
  // The signature is kept in the Moon, shown by inspect, and recorded as an event.
  r = soyaos({"pack", "inspect", "hello-report@1.0.0", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["signatures"].size(), 1u) << r.out;
  EXPECT_EQ(doc["signatures"][0]["key_id"], minisign::key_id_hex(pub->key_id));
  EXPECT_EQ(doc["signatures"][0]["signature"], read_file(path("sig")));
  r = soyaos({"pack", "inspect", "hello-report@1.0.0"});
  EXPECT_NE(r.out.find("signatures:\n  " + minisign::key_id_hex(pub->key_id)), std::string::npos) << r.out;
  r = soyaos({"scope", "query", "--type", "pack_signed", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"key_id\":\"" + minisign::key_id_hex(pub->key_id) + "\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"manifest_digest\":\"" + digest + "\""), std::string::npos) << r.out;
}

TEST_F(PackSign, EncryptedKeysTakeTheirPasswordFromStdinOrTheEnvironment) {
  push_hello();
  auto key = minisign::generate();
  ASSERT_TRUE(key);
  // Cheap scrypt parameters (minisign -G's take 1 GiB and tens of seconds); same format.
  auto enc = minisign::format_secret_key(*key, "pass phrase", 32768, 16u << 20);
  ASSERT_TRUE(enc);
  t_.write("enc.key", *enc);
  auto r = run_soyaos_stdin({"pack", "sign", "hello-report@1.0.0", "--key", path("enc.key")}, "pass phrase\n",
                            {{"SOYAOS_HOME", home()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = soyaos({"pack", "sign", "hello-report@1.0.0", "--key", path("enc.key")},
             {{"SOYAOS_KEY_PASSWORD", "pass phrase"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_soyaos_stdin({"pack", "sign", "hello-report@1.0.0", "--key", path("enc.key")}, "wrong\n",
                       {{"SOYAOS_HOME", home()}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("wrong password"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pass phrase"), std::string::npos);
}

TEST_F(PackSign, BadInputIsAClearError) {
  push_hello();
  ASSERT_EQ(sh("minisign -G -W -p " + path("k.pub") + " -s " + path("k.key") + " >/dev/null"), 0);
  auto r = soyaos({"pack", "sign", "not a ref", "--key", path("k.key")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = soyaos({"pack", "sign", "hello-report@9.9.9", "--key", path("k.key")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not in the registry"), std::string::npos) << r.err;
  r = soyaos({"pack", "sign", "hello-report@1.0.0", "--key", path("missing.key")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.key"), std::string::npos) << r.err;
  r = soyaos({"pack", "sign", "hello-report@1.0.0", "--key", path("k.pub")});  // a public key
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("secret key"), std::string::npos) << r.err;
  r = soyaos({"pack", "sign", "hello-report@1.0.0"});
  EXPECT_EQ(r.exit_code, 2);
  // A FIFO (or any file that is not regular) as the key: refused at once, not a read that
  // waits forever for a writer.
  ASSERT_EQ(::mkfifo(path("fifo.key").c_str(), 0600), 0);
  Background fifo({"pack", "sign", "hello-report@1.0.0", "--key", path("fifo.key")}, {{"SOYAOS_HOME", home()}});
  r = fifo.finish(10000);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

class PackDiff : public PackSign {
 protected:
  // hello-report with `edit` applied to its manifest (find -> replace), in DIR.
  std::string variant(const std::string& dir, const std::string& find, const std::string& replace) {
    const fs::path p = t_.copy_from_source("examples/hello-report", dir);
    std::string m = read_file(p / "soyapack.yaml");
    const size_t at = m.find(find);
    EXPECT_NE(at, std::string::npos) << find;
    if (at != std::string::npos) m.replace(at, find.size(), replace);
    t_.write(dir + "/soyapack.yaml", m);
    return p.string();
  }
};

TEST_F(PackDiff, DirectoriesTextJsonAndExitCode) {
  const std::string a = t_.copy_from_source("examples/hello-report", "a").string();
  const std::string b = variant("b", "  egress: []\n",
                                "  egress:\n    - {host: api.example.com, port: 443, protocol: https}\n");
  auto r = soyaos({"pack", "diff", a, b});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "--- " + a + "\n+++ " + b +
                       "\n+ egress         api.example.com:443/https  (wider)\nwider: B may do what A may not\n");
  r = soyaos({"pack", "diff", a, b, "--exit-code"});
  EXPECT_EQ(r.exit_code, 1);
  r = soyaos({"pack", "diff", b, a, "--exit-code"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("- egress         api.example.com:443/https\nnarrower"), std::string::npos) << r.out;
  r = soyaos({"pack", "diff", a, a, "--exit-code"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("no capability changes"), std::string::npos);

  r = soyaos({"pack", "diff", a, b, "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["a"], a);
  EXPECT_TRUE(doc["wider"].get<bool>());
  ASSERT_EQ(doc["changes"].size(), 1u);
  EXPECT_EQ(doc["changes"][0]["area"], "egress");
  EXPECT_EQ(doc["changes"][0]["change"], "added");
  EXPECT_EQ(doc["changes"][0]["item"], "api.example.com:443/https");
}

TEST_F(PackDiff, LocalRefsAndLimits) {
  push_hello();
  const std::string v2 = variant("v2", "version: 1.0.0\n", "version: 1.1.0\n");
  // v2: more memory, a new write path, side-effect tier.
  std::string m = read_file(fs::path(v2) / "soyapack.yaml");
  m.replace(m.find("memory: 256Mi"), 13, "memory: 512Mi");
  m.replace(m.find("determinism_tier: read-only"), 27, "determinism_tier: side-effect");
  t_.write("v2/soyapack.yaml", m);
  auto r = soyaos({"pack", "push", v2});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  r = soyaos({"pack", "diff", "hello-report@1.0.0", "hello-report@1.1.0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("~ tier           read-only -> side-effect  (wider)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("~ limits.memory  268435456 -> 536870912  (wider)"), std::string::npos) << r.out;
  // Mixed: a directory against a local ref.
  r = soyaos({"pack", "diff", v2, "hello-report@1.0.0", "--exit-code"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("narrower"), std::string::npos) << r.out;
  // Neither a directory nor a reference: usage error.
  r = soyaos({"pack", "diff", "no-such-dir", "hello-report@1.0.0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no-such-dir"), std::string::npos) << r.err;
  r = soyaos({"pack", "diff", "hello-report@2.0.0", "hello-report@1.0.0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not in the registry"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace soyaos::testing
