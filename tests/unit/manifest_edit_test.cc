// The textual edit `pack learn --write` makes (manifest/manifest_edit.h): entries added with
// their comments, everything else byte for byte, the result valid.
#include <gtest/gtest.h>

#include "manifest/manifest.h"
#include "manifest/manifest_edit.h"

namespace soyaos::manifest {
namespace {

const char* kHead = "# top comment\nsoyapack: v0\nname: p\nversion: 0.1.0\nagent: {runtime: python3, entrypoint: main.py}\n";

std::string with_caps(const std::string& caps) {
  return std::string(kHead) + "capabilities:\n" + caps + "  determinism_tier: read-only  # tier comment\n";
}

ManifestAdditions some() {
  ManifestAdditions a;
  a.egress.push_back({"{host: a.test, port: 443, protocol: https}", "learned: TLS ClientHello, SNI a.test"});
  a.fs_read.push_back({yaml_scalar("/srv/data"), "learned: read /srv/data"});
  a.fs_write.push_back({yaml_scalar("/tmp"), "learned: write /tmp/x"});
  return a;
}

void expect_has_all(const std::string& text) {
  auto m = parse_manifest(text, "soyapack.yaml");
  ASSERT_TRUE(m.manifest) << text;
  const auto& c = m.manifest->capabilities;
  ASSERT_FALSE(c.egress.empty()) << text;
  EXPECT_EQ(c.egress.back().host, "a.test");
  EXPECT_EQ(c.egress.back().port, 443);
  ASSERT_FALSE(c.fs_read.empty()) << text;
  EXPECT_EQ(c.fs_read.back().path, "/srv/data");
  ASSERT_FALSE(c.fs_write.empty()) << text;
  EXPECT_EQ(c.fs_write.back().path, "/tmp");
}

TEST(ManifestEdit, BlockListsGetLinesAppendedWithComments) {
  const std::string text = with_caps(
      "  egress:\n    - host: b.test  # b\n      port: 80\n      protocol: http\n\n  fs:\n    read:\n      - /workdir\n"
      "    write:\n    - /workdir/out\n");
  auto e = edit_manifest(text, some(), "soyapack.yaml");
  ASSERT_TRUE(e) << e.error().describe();
  expect_has_all(e->text);
  EXPECT_NE(e->text.find("      protocol: http\n    - {host: a.test, port: 443, protocol: https}  # learned: TLS "
                         "ClientHello, SNI a.test\n\n  fs:"),
            std::string::npos)
      << e->text;
  EXPECT_NE(e->text.find("      - /workdir\n      - /srv/data  # learned: read /srv/data\n"), std::string::npos) << e->text;
  EXPECT_NE(e->text.find("    - /workdir/out\n    - /tmp  # learned: write /tmp/x\n"), std::string::npos) << e->text;
  EXPECT_EQ(e->text.rfind("# top comment\n", 0), 0U);
  EXPECT_NE(e->text.find("# tier comment"), std::string::npos);
  EXPECT_NE(e->diff.find("--- a/soyapack.yaml\n+++ b/soyapack.yaml\n@@ "), std::string::npos) << e->diff;
  EXPECT_NE(e->diff.find("\n+    - {host: a.test"), std::string::npos) << e->diff;
  EXPECT_EQ(e->diff.find("\n-"), std::string::npos) << e->diff;  // only additions
}

TEST(ManifestEdit, FlowCollectionsAreRewrittenInBlockStyle) {
  const std::string text = with_caps("  egress: []  # none yet\n  fs: {read: [/workdir, \"/a b\"], write: [/workdir/out]}\n");
  auto e = edit_manifest(text, some(), "soyapack.yaml");
  ASSERT_TRUE(e) << e.error().describe();
  expect_has_all(e->text);
  EXPECT_NE(e->text.find("  egress:  # none yet\n    - {host: a.test"), std::string::npos) << e->text;
  EXPECT_NE(e->text.find("  fs:\n    read:\n      - /workdir\n      - \"/a b\"\n      - /srv/data"), std::string::npos)
      << e->text;
  EXPECT_NE(e->diff.find("\n-  egress: []  # none yet\n"), std::string::npos) << e->diff;
  EXPECT_NE(e->diff.find("\n+  egress:  # none yet\n"), std::string::npos) << e->diff;
}

TEST(ManifestEdit, MissingKeysAreAdded) {
  const std::string text = with_caps("  egress: []\n");
  auto e = edit_manifest(text, some(), "soyapack.yaml");
  ASSERT_TRUE(e) << e.error().describe();
  expect_has_all(e->text);
  EXPECT_NE(e->text.find("  fs:\n    read:\n      - /srv/data"), std::string::npos) << e->text;
  EXPECT_NE(e->text.find("    write:\n      - /tmp"), std::string::npos) << e->text;
}

TEST(ManifestEdit, HostileTextIsQuotedAndEscaped) {
  EXPECT_EQ(yaml_scalar("/tmp/a b"), "\"/tmp/a b\"");
  EXPECT_EQ(yaml_scalar("/x#y: z"), "\"/x#y: z\"");
  EXPECT_EQ(yaml_scalar("/a\"b\\c"), "\"/a\\\"b\\\\c\"");
  EXPECT_EQ(yaml_scalar("/plain/path_1.txt"), "/plain/path_1.txt");
  ManifestAdditions a;
  a.fs_read.push_back({yaml_scalar("/tmp/a: b # c"), "learned: read \x1b[31m\n# injected"});
  auto e = edit_manifest(with_caps("  egress: []\n  fs:\n    read: [/workdir]\n"), a, "soyapack.yaml");
  ASSERT_TRUE(e) << e.error().describe();
  auto m = parse_manifest(e->text, "soyapack.yaml");
  ASSERT_TRUE(m.manifest) << e->text;
  ASSERT_EQ(m.manifest->capabilities.fs_read.size(), 2U);
  EXPECT_EQ(m.manifest->capabilities.fs_read[1].path, "/tmp/a: b # c");
  EXPECT_EQ(e->text.find('\x1b'), std::string::npos);
  EXPECT_EQ(e->text.find("\n# injected"), std::string::npos) << e->text;
}

TEST(ManifestEdit, AnEditThatWouldNotParseFails) {
  ManifestAdditions a;
  a.fs_read.push_back({"[unclosed", "x"});
  EXPECT_FALSE(edit_manifest(with_caps("  egress: []\n  fs:\n    read: [/workdir]\n"), a, "soyapack.yaml"));
}


ReplacedValue tier(const std::string& value, const std::string& comment = "learned: SP114") {
  return {{"capabilities", "determinism_tier"}, value, comment};
}

TEST(ManifestEdit, AValueIsReplacedInPlaceKeepingCommentsAndKeyOrder) {
  const std::string text = std::string(kHead) +
                           "capabilities:\n  # the tier\n  determinism_tier: side-effect   # we post results\n"
                           "  egress: []  # none yet\n  fs:\n    read: [/workdir]\nresources: {timeout: 20s}\n";
  ManifestAdditions a;
  a.values.push_back(tier("read-only", "learned (was side-effect): SP114 tier-looser-than-needed"));
  auto e = edit_manifest(text, a, "soyapack.yaml");
  ASSERT_TRUE(e) << e.error().describe();
  // Only the value and its line's comment changed: every other byte is the original's.
  std::string want = text;
  const std::string old_line = "  determinism_tier: side-effect   # we post results\n";
  want.replace(want.find(old_line), old_line.size(),
               "  determinism_tier: read-only  # learned (was side-effect): SP114 tier-looser-than-needed\n");
  EXPECT_EQ(e->text, want);
  auto m = parse_manifest(e->text, "soyapack.yaml");
  ASSERT_TRUE(m.manifest) << e->text;
  EXPECT_EQ(m.manifest->capabilities.tier, Tier::read_only);
  EXPECT_NE(e->diff.find("\n-  determinism_tier: side-effect   # we post results\n+  determinism_tier: read-only  # learned"),
            std::string::npos)
      << e->diff;
  // Without a comment, the line's own comment stays; quoting is the editor's (yaml_scalar).
  ManifestAdditions b;
  b.values.push_back(tier("read-only", ""));
  auto f = edit_manifest(text, b, "soyapack.yaml");
  ASSERT_TRUE(f) << f.error().describe();
  EXPECT_NE(f->text.find("\n  determinism_tier: read-only   # we post results\n"), std::string::npos) << f->text;
}

TEST(ManifestEdit, AReplacedValueAndAdditionsTogether) {
  const std::string text = std::string(kHead) +
                           "capabilities: {egress: [], fs: {read: [/workdir]}, determinism_tier: \"side-effect\"}  # caps\n";
  ManifestAdditions a = some();
  a.values.push_back(tier("read-only"));
  auto e = edit_manifest(text, a, "soyapack.yaml");
  ASSERT_TRUE(e) << e.error().describe();
  expect_has_all(e->text);
  auto m = parse_manifest(e->text, "soyapack.yaml");
  ASSERT_TRUE(m.manifest) << e->text;
  EXPECT_EQ(m.manifest->capabilities.tier, Tier::read_only);
  EXPECT_NE(e->text.find("capabilities:  # caps\n"), std::string::npos) << e->text;
  EXPECT_NE(e->text.find("  determinism_tier: read-only  # learned: SP114\n"), std::string::npos) << e->text;
  EXPECT_EQ(e->text.rfind("# top comment\n", 0), 0U);
}

TEST(ManifestEdit, AValueThatCannotBeReplacedInPlaceFails) {
  // Missing, not a scalar, or continued on the next line: an error, never a guess.
  ManifestAdditions missing;
  missing.values.push_back({{"capabilities", "nothing_here"}, "x", ""});
  auto e = edit_manifest(with_caps("  egress: []\n"), missing, "soyapack.yaml");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().describe().find("capabilities.nothing_here is missing"), std::string::npos) << e.error().describe();
  ManifestAdditions list;
  list.values.push_back({{"capabilities", "egress"}, "x", ""});
  EXPECT_FALSE(edit_manifest(with_caps("  egress: []\n"), list, "soyapack.yaml"));
  ManifestAdditions t;
  t.values.push_back(tier("read-only"));
  const std::string folded = std::string(kHead) + "capabilities:\n  egress: []\n  determinism_tier: \"side-\n    effect\"\n";
  EXPECT_FALSE(edit_manifest(folded, t, "soyapack.yaml"));
  // A value given with control characters or a comment trying to start a line is escaped.
  ManifestAdditions hostile;
  hostile.values.push_back(tier("read-only", "why \x1b[31m\n# injected"));
  auto h = edit_manifest(with_caps("  egress: []\n"), hostile, "soyapack.yaml");
  ASSERT_TRUE(h) << h.error().describe();
  EXPECT_EQ(h->text.find('\x1b'), std::string::npos);
  EXPECT_EQ(h->text.find("\n# injected"), std::string::npos) << h->text;
}

}  // namespace
}  // namespace soyaos::manifest
