// The distribution client's API (src/oci/client.h) against a real registry (Debian's
// docker-registry on 127.0.0.1, plain http): referrers with the tag-schema fallback (the
// path `pack sign` and flags take), chunked uploads, cross-repository mounts, downloads
// verified by digest.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "oci/client.h"
#include "child_test.h"
#include "registry_server.h"

namespace soyaos::oci {
namespace {

using json = nlohmann::ordered_json;

class OciClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RegistryServer::available()) GTEST_SKIP() << "docker-registry is not installed";
    char tmpl[] = "/tmp/soyaos-oci-client-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(reg_.start(dir_, {}), "");
    ClientOptions o;
    o.insecure = true;
    o.insecure_hosts = {reg_.address()};
    o.backoff_ms = 10;
    o.chunk_size = 16 * 1024;
    auto c = Client::open(reg_.address(), o);
    ASSERT_TRUE(c.ok());
    client_.emplace(std::move(*c));
  }
  void TearDown() override {
    reg_.stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // An image manifest with one layer, pushed by tag; its descriptor.
  Descriptor push_subject(const std::string& repo, const std::string& layer) {
    const std::string layer_digest = "sha256:" + sha256_hex(layer);
    EXPECT_TRUE(client_->push_blob(repo, "{}", "sha256:" + sha256_hex("{}")));
    EXPECT_TRUE(client_->push_blob(repo, layer, layer_digest));
    json m = {{"schemaVersion", 2},
              {"mediaType", kImageManifest},
              {"config", {{"mediaType", kEmptyMediaType}, {"digest", "sha256:" + sha256_hex("{}")}, {"size", 2}}},
              {"layers", json::array({{{"mediaType", "application/octet-stream"}, {"digest", layer_digest}, {"size", layer.size()}}})}};
    auto put = client_->put_manifest(repo, "v1", m.dump(), kImageManifest);
    EXPECT_TRUE(put.ok()) << (put.ok() ? "" : put.error().describe());
    return Descriptor{kImageManifest, put.ok() ? put->digest : "", m.dump().size()};
  }
  std::filesystem::path dir_;
  testing::RegistryServer reg_;
  std::optional<Client> client_;
};

TEST_F(OciClientTest, ReferrersThroughTheTagSchemaFallback) {
  const Descriptor subject = push_subject("team/pack", "payload");
  auto none = client_->referrers("team/pack", subject.digest);
  ASSERT_TRUE(none.ok()) << none.error().describe();
  EXPECT_TRUE(none->empty());

  auto sig = client_->push_referrer("team/pack", subject, "application/vnd.soyaos.signature.v0", "sig-bytes",
                                    "application/vnd.soyaos.minisig", {{"org.soyaos.key", "K1"}});
  ASSERT_TRUE(sig.ok()) << sig.error().describe();
  auto flag = client_->push_referrer("team/pack", subject, "application/vnd.soyaos.flag.v0", "{\"run\":1}",
                                     "application/json");
  ASSERT_TRUE(flag.ok()) << flag.error().describe();
  // Pushing the same referrer again does not list it twice.
  ASSERT_TRUE(client_->push_referrer("team/pack", subject, "application/vnd.soyaos.flag.v0", "{\"run\":1}",
                                     "application/json").ok());

  auto all = client_->referrers("team/pack", subject.digest);
  ASSERT_TRUE(all.ok()) << all.error().describe();
  ASSERT_EQ(all->size(), 2u);
  auto sigs = client_->referrers("team/pack", subject.digest, "application/vnd.soyaos.signature.v0");
  ASSERT_TRUE(sigs.ok());
  ASSERT_EQ(sigs->size(), 1u);
  EXPECT_EQ((*sigs)[0].digest, sig->digest);
  EXPECT_EQ((*sigs)[0].annotations["org.soyaos.key"], "K1");
  // The referrer's manifest and payload read back, verified.
  auto m = client_->get_manifest("team/pack", sig->digest);
  ASSERT_TRUE(m.ok() && m->has_value());
  const json mj = json::parse((*m)->bytes);
  EXPECT_EQ(mj["subject"]["digest"], subject.digest);
  auto layer = Descriptor::from_json(mj["layers"][0], "layer");
  ASSERT_TRUE(layer.ok());
  auto payload = client_->get_blob("team/pack", *layer, 1024);
  ASSERT_TRUE(payload.ok());
  EXPECT_EQ(*payload, "sig-bytes");
  // The fallback index is the tag sha256-HEX.
  auto idx = client_->get_manifest("team/pack", "sha256-" + subject.digest.substr(7), {kImageIndex});
  ASSERT_TRUE(idx.ok() && idx->has_value());
}

TEST_F(OciClientTest, ChunkedUploadMountAndVerifiedDownload) {
  std::string big(100 * 1024 + 7, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  const std::string digest = "sha256:" + sha256_hex(big);
  const std::string path = (dir_ / "big").string();
  {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_EQ(::write(fd.get(), big.data(), big.size()), static_cast<ssize_t>(big.size()));
    ASSERT_TRUE(client_->push_blob_fd("team/a", fd.get(), big.size(), digest));
  }
  EXPECT_EQ(client_->stats().blobs_uploaded, 1);
  EXPECT_EQ(client_->stats().chunks, 7);  // 7 PATCHes (6 of 16 KiB, then the rest), an empty PUT
  auto has = client_->blob_exists("team/a", digest);
  ASSERT_TRUE(has.ok() && *has);
  {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(client_->push_blob_fd("team/b", fd.get(), big.size(), digest, {"team/a"}));
  }
  EXPECT_EQ(client_->stats().blobs_mounted, 1);
  const std::string out = (dir_ / "out").string();
  UniqueFd fd(::open(out.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(client_->get_blob_to_fd("team/b", Descriptor{"application/octet-stream", digest, big.size()}, fd.get()));
  // A descriptor that lies about the digest: refused.
  const std::string wrong = "sha256:" + sha256_hex("other");
  auto bad = client_->get_blob_to_fd("team/b", Descriptor{"application/octet-stream", wrong, big.size()}, fd.get());
  EXPECT_FALSE(bad.ok());
}


// A download whose write fails part-way (in a child whose RLIMIT_FSIZE ends the file in the
// middle of the second ~1 MiB write batch: a short write, then EFBIG) fails, and the file
// holds exactly the batch written before, not the torn start of the failed one (it used to
// keep it, up to the limit).
TEST_F(OciClientTest, FailedDownloadWriteLeavesNoTornBatch) {
  constexpr std::size_t kBatch = std::size_t{1} << 20;
  constexpr std::size_t kLimit = kBatch + kBatch / 2;
  std::string big(3 * kBatch, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  const std::string digest = "sha256:" + sha256_hex(big);
  ClientOptions o;
  o.insecure = true;
  o.insecure_hosts = {reg_.address()};
  o.chunk_size = 0;  // one PUT
  auto pusher = Client::open(reg_.address(), o);
  ASSERT_TRUE(pusher.ok());
  ASSERT_TRUE(pusher->push_blob("team/big", big, digest));
  const std::string out = (dir_ / "out").string();
  const std::string report = testing::run_in_child([&](int report) {
    UniqueFd fd(::open(out.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) testing::child_fail(report, __LINE__, "open", -1, errno);
    const rlimit lim{kLimit, kLimit};
    CHILD_EXPECT_OK(::setrlimit(RLIMIT_FSIZE, &lim));
    if (::signal(SIGXFSZ, SIG_IGN) == SIG_ERR) testing::child_fail(report, __LINE__, "signal", -1, errno);
    auto s = client_->get_blob_to_fd("team/big", Descriptor{"application/octet-stream", digest, big.size()}, fd.get());
    if (s.ok()) testing::child_fail(report, __LINE__, "the download succeeded past RLIMIT_FSIZE", 0, 0);
    if (s.error().describe().find("File too large") == std::string::npos) {
      testing::child_fail(report, __LINE__, s.error().describe().c_str(), 0, 0);
    }
  });
  ASSERT_EQ(report, "");
  // The first batch is the first transfer pieces that reach 1 MiB: a little more than 1 MiB,
  // never up to the limit, where the torn second batch ended.
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  const auto size = static_cast<std::size_t>(st.st_size);
  EXPECT_GE(size, kBatch);
  EXPECT_LT(size, kLimit);
  std::string got(size, '\0');
  UniqueFd fd(::open(out.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_EQ(::read(fd.get(), got.data(), got.size()), static_cast<ssize_t>(size));
  EXPECT_TRUE(got == big.substr(0, size)) << "the file is not a prefix of the blob";
}

}  // namespace
}  // namespace soyaos::oci
