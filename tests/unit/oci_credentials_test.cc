// The Docker config's `auths` entries (oci/credentials.h): what `auth` strings are read, and
// what `soyaos login` writes. Docker itself decodes `auth` with Go's base64.StdEncoding, which
// ignores the unused bits before the padding: configs written by other tools may set them
// ("non-canonical padding"), and they must keep working.
#include "oci/credentials.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "moon_test_util.h"

namespace soyaos::oci {
namespace {

using moon::testing::read_file;
using moon::testing::TmpDir;
using moon::testing::write_file;

// Points DOCKER_CONFIG at a fresh directory for one test, and back where it was after.
class DockerConfig {
 public:
  DockerConfig() {
    if (const char* old = std::getenv("DOCKER_CONFIG"); old != nullptr) old_ = old;
    ::setenv("DOCKER_CONFIG", dir_.path().c_str(), 1);
  }
  ~DockerConfig() {
    if (old_) {
      ::setenv("DOCKER_CONFIG", old_->c_str(), 1);
    } else {
      ::unsetenv("DOCKER_CONFIG");
    }
  }
  DockerConfig(const DockerConfig&) = delete;
  DockerConfig& operator=(const DockerConfig&) = delete;

  // The config.json holding one `auths` entry for r.example whose "auth" is `auth`.
  void with_auth(const std::string& auth) const {
    write_file(dir_.path() / "config.json", R"({"auths": {"r.example": {"auth": ")" + auth + R"("}}})");
  }
  [[nodiscard]] std::string config() const { return read_file(dir_.path() / "config.json"); }

 private:
  TmpDir dir_;
  std::optional<std::string> old_;
};

// USER:PASSWORD from `auth`, or the error's text.
std::string read_auth(const DockerConfig& d, const std::string& auth) {
  d.with_auth(auth);
  auto c = find_credentials("r.example");
  if (!c) return "error: " + c.error().message;
  if (!*c) return "none";
  return (*c)->username + ":" + (*c)->password;
}

TEST(OciCredentials, CanonicalAuthEntriesAreRead) {
  const DockerConfig d;
  EXPECT_EQ(read_auth(d, "dXNlcjpwYXNz"), "user:pass");  // no padding
  EXPECT_EQ(read_auth(d, "dTpwd2Q="), "u:pwd");          // one '='
  EXPECT_EQ(read_auth(d, "dTpwdw=="), "u:pw");           // two
  EXPECT_EQ(read_auth(d, "cm9ib3QkY2k6cDphOnNz"), "robot$ci:p:a:ss");  // split at the first ':'
}

// The bits after the last byte, before the padding, set: Docker ignores them, so do we.
TEST(OciCredentials, NonCanonicalPaddingIsAccepted) {
  const DockerConfig d;
  EXPECT_EQ(read_auth(d, "dTpwdx=="), "u:pw");  // 'x' = 'w' + 1: the lowest unused bit set
  EXPECT_EQ(read_auth(d, "dTpwd/=="), "u:pw");  // '/': all four unused bits set
  EXPECT_EQ(read_auth(d, "dTpwd2R="), "u:pwd");  // 'R' = 'Q' + 1
  EXPECT_EQ(read_auth(d, "dTpwd2T="), "u:pwd");  // both unused bits
}

TEST(OciCredentials, AuthThatIsNotBase64OfUserColonPasswordIsAnError) {
  const DockerConfig d;
  for (const char* bad : {"bm9jb2xvbg==",  // "nocolon"
                          "dTpw=",         // length
                          "dTp",           // length
                          "dTp!",          // alphabet
                          "dTp_",          // the URL-safe alphabet is not Docker's
                          "dTpwdw"}) {     // padding missing
    EXPECT_NE(read_auth(d, bad).find("auths.r.example.auth is not base64 of USER:PASSWORD"), std::string::npos)
        << bad << ": " << read_auth(d, bad);
  }
}

// As Docker (Go's base64.StdEncoding): line breaks are skipped (a wrapped `base64` output).
// Until the codec was shared, CR/LF were accepted only at the end, four at a time.
TEST(OciCredentials, LineBreaksInAuthAreSkipped) {
  const DockerConfig d;
  EXPECT_EQ(read_auth(d, R"(dTpw\n)"), "u:p");
  EXPECT_EQ(read_auth(d, R"(dTpw\r\n\r\n)"), "u:p");
  EXPECT_EQ(read_auth(d, R"(dXNl\ncjpw\nYXNz\n)"), "user:pass");
  EXPECT_EQ(read_auth(d, R"(dTpwdw=\n=)"), "u:pw");
}

// What Docker refuses is refused. OpenSSL's EVP_DecodeBlock, used before, read '=' anywhere as
// zero bits, took a '=' past the padding as one more zero byte, and skipped spaces and '-'
// around the text when they came four at a time: each gave a wrong password (or the right one
// by chance), now a clear error.
TEST(OciCredentials, AuthThatDockerRefusesIsAnError) {
  const DockerConfig d;
  for (const char* bad : {"dTp=dTpw",  // was "u:" NUL "u:p"
                          "dTpwd===",  // was "u:pt"
                          "dTpw====",  // was "u:p" NUL
                          "dTo=    ",  // was "u:" NUL
                          "dTpw    ", "    dTpw", "dTpw----"}) {
    EXPECT_NE(read_auth(d, bad).find("auths.r.example.auth is not base64 of USER:PASSWORD"), std::string::npos)
        << bad << ": " << read_auth(d, bad);
  }
}

// `soyaos login` without a helper writes standard base64 with padding, as docker login does.
TEST(OciCredentials, StoredCredentialsAreStandardBase64AndReadBack) {
  const DockerConfig d;
  d.with_auth("dXNlcjpwYXNz");
  ASSERT_TRUE(store_credentials("r.example", Credentials{"u", "pw>?", ""}));
  EXPECT_NE(d.config().find(R"("auth": "dTpwdz4/")"), std::string::npos) << d.config();
  EXPECT_EQ(read_auth(d, "dTpwdz4/"), "u:pw>?");
  ASSERT_TRUE(store_credentials("r.example", Credentials{"u", "pw", ""}));
  EXPECT_NE(d.config().find(R"("auth": "dTpwdw==")"), std::string::npos) << d.config();
}

}  // namespace
}  // namespace soyaos::oci
