// Registry references (src/oci/reference.h) and the pack artifact parsers (src/oci/pack.h).
#include <gtest/gtest.h>

#include <string>

#include "oci/pack.h"
#include "oci/reference.h"

namespace soyaos::oci {
namespace {

const std::string kHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

Reference ok(const std::string& text) {
  std::string why;
  auto r = parse_reference(text, why);
  EXPECT_TRUE(r.has_value()) << text << ": " << why;
  return r.value_or(Reference{});
}

std::string bad(const std::string& text) {
  std::string why;
  auto r = parse_reference(text, why);
  EXPECT_FALSE(r.has_value()) << text << " was accepted";
  EXPECT_FALSE(why.empty());
  return why;
}

TEST(OciReferenceTest, ParsesRegistryRepositoryTagAndDigest) {
  auto r = ok("registry.example.com/team/summarizer:1.4.2");
  EXPECT_EQ(r.registry, "registry.example.com");
  EXPECT_EQ(r.repository, "team/summarizer");
  EXPECT_EQ(r.tag, "1.4.2");
  EXPECT_EQ(r.digest, "");
  EXPECT_EQ(r.target(), "1.4.2");
  EXPECT_EQ(r.scope(), "registry.example.com/team/summarizer");

  r = ok("127.0.0.1:5000/a/b/c@sha256:" + kHex);
  EXPECT_EQ(r.registry, "127.0.0.1:5000");
  EXPECT_EQ(r.repository, "a/b/c");
  EXPECT_EQ(r.tag, "");
  EXPECT_EQ(r.target(), "sha256:" + kHex);
  EXPECT_EQ(r.str(), "127.0.0.1:5000/a/b/c@sha256:" + kHex);

  r = ok("localhost/x");
  EXPECT_EQ(r.tag, "latest");
  EXPECT_EQ(r.str(), "localhost/x:latest");

  r = ok("[::1]:5000/team/x__y.z--w:V_1.0-rc");
  EXPECT_EQ(r.registry, "[::1]:5000");
  EXPECT_EQ(registry_host(r.registry), "::1");
  EXPECT_EQ(r.tag, "V_1.0-rc");

  r = ok("Registry.Example.COM:443/p:t@sha256:" + kHex);  // the host is case-insensitive
  EXPECT_EQ(r.registry, "registry.example.com:443");
  EXPECT_EQ(r.str(), "registry.example.com:443/p:t@sha256:" + kHex);
}

TEST(OciReferenceTest, RefusesPathTraversalAndMalformedReferences) {
  bad("127.0.0.1:5000/../etc/passwd");
  bad("127.0.0.1:5000/team/../../x");
  bad("127.0.0.1:5000/team/./x");
  bad("127.0.0.1:5000//x");
  bad("127.0.0.1:5000/x/");
  bad("127.0.0.1:5000/.hidden");
  bad("127.0.0.1:5000/Upper");
  bad("127.0.0.1:5000/a%2f..");
  bad("127.0.0.1:5000/a b");
  bad("127.0.0.1:5000/a\nb");
  bad("127.0.0.1:5000/a:");
  bad("127.0.0.1:5000/a:.tag");
  bad("127.0.0.1:5000/a:" + std::string(129, 't'));
  bad("127.0.0.1:5000/a@sha256:" + kHex.substr(1));
  bad("127.0.0.1:5000/a@sha512:" + kHex + kHex);
  bad("127.0.0.1:5000/a@sha256:" + std::string(64, 'A'));
  bad("127.0.0.1:0/a");
  bad("127.0.0.1:65536/a");
  bad("127.0.0.1:05000/a");
  bad("-bad.example/a");
  bad("[::1/a");
  bad("[zz::1]:5000/a");
  bad("example.com/" + std::string(250, 'a'));
  EXPECT_NE(bad("team/pack:1").find("registry"), std::string::npos);  // no host called "team"
  bad("hello@1.0.0");
  bad("");
}

TEST(OciReferenceTest, OnlyTextWithASlashLooksRemote) {
  EXPECT_TRUE(looks_remote("registry.example.com/team/x:1"));
  EXPECT_FALSE(looks_remote("hello@1.0.0"));
  EXPECT_FALSE(looks_remote("hello"));
}

std::string manifest_with(const std::string& artifact_type, const std::string& layer_type, int layers = 1) {
  std::string l = R"({"mediaType":")" + layer_type + R"(","digest":"sha256:)" + kHex + R"(","size":2048})";
  std::string all = l;
  for (int i = 1; i < layers; ++i) all += "," + l;
  return R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":")" +
         artifact_type +
         R"(","config":{"mediaType":"application/vnd.soyaos.pack.config.v0+json","digest":"sha256:)" + kHex +
         R"(","size":10},"layers":[)" + all + "]}";
}

TEST(OciPackManifestTest, AcceptsOurArtifactAndRefusesOtherMediaTypes) {
  RemotePack p;
  ASSERT_TRUE(parse_pack_manifest(manifest_with("application/vnd.soyaos.pack.v0", "application/vnd.soyaos.pack.v0.tar"), p));
  EXPECT_EQ(p.layer.size, 2048U);
  auto e = parse_pack_manifest(manifest_with("application/vnd.oci.image.config.v1+json", "application/vnd.soyaos.pack.v0.tar"), p);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("not a SoyaOS pack"), std::string::npos);
  e = parse_pack_manifest(manifest_with("application/vnd.soyaos.pack.v0", "application/vnd.oci.image.layer.v1.tar+gzip"), p);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("layer's mediaType"), std::string::npos);
  EXPECT_FALSE(parse_pack_manifest(manifest_with("application/vnd.soyaos.pack.v0", "application/vnd.soyaos.pack.v0.tar", 2), p));
  EXPECT_FALSE(parse_pack_manifest("{", p));
  EXPECT_FALSE(parse_pack_manifest("[]", p));
}

TEST(OciPackManifestTest, ConfigMustNameAPackAndItsTree) {
  RemotePack p;
  ASSERT_TRUE(parse_pack_config(R"({"name":"hello","version":"1.0.0","tree_digest":"sha256:)" + kHex +
                                    R"(","manifest":{"soyapack":"v0"}})", p));
  EXPECT_EQ(p.name, "hello");
  EXPECT_FALSE(parse_pack_config(R"({"name":"../x","version":"1.0.0","tree_digest":"sha256:)" + kHex +
                                     R"(","manifest":{}})", p));
  EXPECT_FALSE(parse_pack_config(R"({"name":"hello","version":"1.0.0","tree_digest":"md5:1","manifest":{}})", p));
  EXPECT_FALSE(parse_pack_config(R"({"name":"hello","version":"1.0.0","tree_digest":"sha256:)" + kHex + R"("})", p));
}

}  // namespace
}  // namespace soyaos::oci
