// Hostile input: parse_manifest must answer with a clear error, quickly, without
// crashing, recursing without bound or allocating without bound.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "manifest/manifest.h"
#include "manifest_test_util.h"
#include "thread_cpu_clock.h"

namespace soyaos::manifest::testing {
namespace {

// The bound is the parse's own CPU time: it is about work, not latency.
using Clock = soyaos::testing::ThreadCpuClock;

// Parses `text` and expects exactly one file-level error containing `fragment`, within
// `budget`.
::testing::AssertionResult RefusedWith(const std::string& text, const std::string& fragment, Mark at = {},
                                       std::chrono::milliseconds budget = std::chrono::milliseconds(2000)) {
  const auto start = Clock::now();
  auto r = parse(text);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  if (r.manifest) return ::testing::AssertionFailure() << "accepted";
  if (took > budget) return ::testing::AssertionFailure() << "took " << took.count() << " ms";
  if (r.errors.size() != 1) return ::testing::AssertionFailure() << "expected one error, got:\n" << dump(r);
  if (r.errors[0].message.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks \"" << fragment << "\":\n" << dump(r);
  }
  if (at.line != 0 && !(r.errors[0].mark == at)) {
    return ::testing::AssertionFailure() << "at " << r.errors[0].mark.line << ":" << r.errors[0].mark.column
                                         << ", expected " << at.line << ":" << at.column;
  }
  return ::testing::AssertionSuccess();
}

TEST(ManifestAdversarial, AliasBombFailsFast) {
  // "Billion laughs": 10 levels of 9 aliases each would expand to 9^10 nodes.
  std::string bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    const char p = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) bomb += std::string(i ? ", " : "") + "*" + p;
    bomb += "]\n";
  }
  EXPECT_TRUE(RefusedWith(bomb, "anchors", {1, 4}, std::chrono::milliseconds(200)));
}

TEST(ManifestAdversarial, AliasAloneIsRefused) {
  // yaml-cpp itself refuses an alias to an undefined anchor; a defined one is refused
  // at its anchor.
  EXPECT_TRUE(RefusedWith("name: *x\n", "anchor", {1, 7}));
  EXPECT_TRUE(RefusedWith(with("host: api.example.com", "host: *.example.com"), "must be quoted", {13, 13}));
  EXPECT_TRUE(RefusedWith("egress: *\n", "must be quoted"));
}

TEST(ManifestAdversarial, AnchorOnAnyNodeIsRefused) {
  EXPECT_TRUE(RefusedWith(with("name: demo", "name: &n demo"), "anchors", {2, 7}));
  EXPECT_TRUE(RefusedWith(with("agent:\n", "agent: &ag\n"), "anchors"));
}

TEST(ManifestAdversarial, TagsAreRefused) {
  EXPECT_TRUE(RefusedWith(with("soyapack: v0", "soyapack: !!str v0"), "tags (tag:yaml.org,2002:str)", {1, 11}));
  EXPECT_TRUE(RefusedWith("--- !custom\nname: x\n", "tags (!custom)"));
  EXPECT_TRUE(RefusedWith(with("read: [/workdir]", "read: !!seq [/workdir]"), "tags"));
  EXPECT_TRUE(RefusedWith(with("port: 443", "port: !!int 443"), "tags"));
}

TEST(ManifestAdversarial, DeepBlockNesting) {
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += std::string(static_cast<std::size_t>(i), ' ') + "a:\n";
  EXPECT_TRUE(RefusedWith(deep, "nesting deeper than 64", {65, 65}));
  std::string seq;
  for (int i = 0; i < 200; ++i) seq += std::string(static_cast<std::size_t>(2 * i), ' ') + "- \n";
  EXPECT_TRUE(RefusedWith(seq, "nesting deeper than 64"));
}

TEST(ManifestAdversarial, DeepFlowNesting) {
  EXPECT_TRUE(RefusedWith(std::string(1000, '['), "nesting deeper than 64"));
  EXPECT_TRUE(RefusedWith("a: " + std::string(1000, '{'), "nesting deeper than 64"));
  std::string mixed = "a: ";
  for (int i = 0; i < 100; ++i) mixed += "[{b: ";
  EXPECT_TRUE(RefusedWith(mixed, "nesting deeper than 64"));
  // Longer runs hit the lookahead window first (yaml-cpp scans a whole flow run before
  // reporting its first node).
  EXPECT_TRUE(RefusedWith(std::string(kMaxManifestBytes - 1, '['), "more than 64 KiB", {1, 1}));
  EXPECT_TRUE(RefusedWith("a: " + std::string(100'000, '{'), "more than 64 KiB"));
  std::string lines;
  for (int i = 0; i < 100'000; ++i) lines += "[\n";
  EXPECT_TRUE(RefusedWith(lines, "more than 64 KiB"));
  EXPECT_TRUE(RefusedWith(lines.substr(0, 2000), "nesting deeper than 64"));
}

TEST(ManifestAdversarial, NestingAtTheLimitIsStillParsed) {
  // 63 nested lists under a key: 64 levels with the root mapping -> a type error, not a
  // refusal.
  auto r = parse("name: " + std::string(63, '[') + std::string(63, ']') + "\n");
  ASSERT_FALSE(r.manifest);
  EXPECT_NE(dump(r).find("name: must be a string"), std::string::npos) << dump(r);
}

TEST(ManifestAdversarial, HugeFlowCollectionsAreCutOff) {
  // yaml-cpp would queue ~250 bytes of tokens per input byte for these; the lookahead
  // window refuses them after 64 KiB.
  std::string flat = "[";
  for (int i = 0; i < 400'000; ++i) flat += "a,";
  EXPECT_TRUE(RefusedWith(flat, "more than 64 KiB"));
  std::string long_scalar = "description: \"" + std::string(200'000, 'x') + "\"\n";
  EXPECT_TRUE(RefusedWith(long_scalar, "more than 64 KiB"));
}

TEST(ManifestAdversarial, TooManyNodes) {
  std::string many;
  for (int i = 0; i < 270'000; ++i) many += "- a\n";
  // 1 MB of YAML: the budget only guards against a hang (ASan builds on a loaded 2-CPU
  // machine need several seconds; speed itself is measured in bench/).
  EXPECT_TRUE(RefusedWith(many, "more than 262144 YAML nodes", {}, std::chrono::milliseconds(60000)));
}

TEST(ManifestAdversarial, OversizedTextIsRefusedBeforeParsing) {
  const std::string big(5u << 20, 'a');  // 5 MiB
  EXPECT_TRUE(RefusedWith(big, "larger than 4194304 bytes", {}, std::chrono::milliseconds(100)));
  EXPECT_EQ(parse(big).errors[0].key_path, "");
}

TEST(ManifestAdversarial, InvalidUtf8) {
  EXPECT_TRUE(RefusedWith("name: demo\ndescription: caf\xc3\n", "not valid UTF-8", {2, 17}));
  EXPECT_TRUE(RefusedWith("name: \xff\xfe\n", "not valid UTF-8", {1, 7}));
  EXPECT_TRUE(RefusedWith("name: \xc0\xaf\n", "not valid UTF-8"));          // overlong "/"
  EXPECT_TRUE(RefusedWith("name: \xed\xa0\x80\n", "not valid UTF-8"));      // surrogate
  EXPECT_TRUE(RefusedWith("name: \xf4\x90\x80\x80\n", "not valid UTF-8"));  // > U+10FFFF
  // Valid multi-byte text is fine (and columns count characters).
  auto r = parse(with("version: 1.2.3\n", "version: 1.2.3\ndescription: \"résumé ✓ 𝄞\"\n"));
  ASSERT_TRUE(IsValid(r));
  EXPECT_EQ(r.manifest->description, "résumé ✓ 𝄞");
}

TEST(ManifestAdversarial, NulAndControlBytes) {
  EXPECT_TRUE(RefusedWith(std::string("name: de\0mo\n", 12), "NUL byte", {1, 9}));
  EXPECT_TRUE(RefusedWith("name: de\x01mo\n", "control character U+0001", {1, 9}));
  EXPECT_TRUE(RefusedWith("name: \x1b[31mred\n", "control character U+001B"));
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 7919 + 13) & 0xFF);
  auto r = parse(garbage);
  EXPECT_FALSE(r.manifest);
  EXPECT_FALSE(r.errors.empty());
}

TEST(ManifestAdversarial, DuplicateKeys) {
  auto r = parse(kValid + "name: other\n");
  EXPECT_TRUE(HasError(r, "name", 20, 1, "duplicate key (first defined at 2:1)"));
  EXPECT_TRUE(HasError(parse(with("      port: 443\n", "      port: 443\n      port: 80\n")),
                       "capabilities.egress[0].port", 15, 7, "duplicate key"));
  EXPECT_TRUE(HasError(parse(with("tools:\n", "tools:\n  fetch:\n    kind: custom\n    side_effect: false\n")),
                       "tools.fetch", 11, 3, "duplicate key"));
  EXPECT_TRUE(HasError(parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  env: {A: 1, A: 2}\n")),
                       "agent.env.A", 7, 15, "duplicate key (first defined at 7:9)"));
}

TEST(ManifestAdversarial, MalformedYamlReportsTheMark) {
  auto r = parse("name: [demo\nversion: 1.2.3\n");
  ASSERT_FALSE(r.manifest);
  ASSERT_EQ(r.errors.size(), 1u) << dump(r);
  EXPECT_NE(r.errors[0].message.find("invalid YAML"), std::string::npos);
  EXPECT_GT(r.errors[0].mark.line, 0);
  auto r2 = parse("a: b: c\n");
  ASSERT_EQ(r2.errors.size(), 1u) << dump(r2);
  EXPECT_EQ(r2.errors[0].mark, (Mark{1, 5}));
  EXPECT_EQ(r2.errors[0].format(), "soyapack.yaml:1:5: error: invalid YAML: " + r2.errors[0].message.substr(14));
}

TEST(ManifestAdversarial, RootMustBeAMapping) {
  EXPECT_TRUE(RefusedWith("", "manifest is empty"));
  EXPECT_TRUE(RefusedWith("# only a comment\n", "manifest is empty"));
  EXPECT_TRUE(RefusedWith("- a\n- b\n", "must be a mapping, got a list", {1, 1}));
  EXPECT_TRUE(RefusedWith("hello\n", "must be a mapping, got a scalar", {1, 1}));
  EXPECT_TRUE(RefusedWith("~\n", "must be a mapping"));
}

TEST(ManifestAdversarial, SingleDocumentOnly) {
  EXPECT_TRUE(RefusedWith(kValid + "---\nname: other\n", "single YAML document", {20, 1}));
}

TEST(ManifestAdversarial, NonScalarKeys) {
  auto r = parse(kValid + "? [a, b]\n: 1\n");
  ASSERT_FALSE(r.manifest);
  EXPECT_NE(dump(r).find("20:3: error: keys must be plain strings"), std::string::npos) << dump(r);
}

}  // namespace
}  // namespace soyaos::manifest::testing
