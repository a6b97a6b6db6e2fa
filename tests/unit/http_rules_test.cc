// HTTP rules (policy/http_rules.h, SPEC.md M8): every normalisation and traversal trick, and
// method + path matching on whole segments.
#include "policy/http_rules.h"

#include <gtest/gtest.h>

namespace soyaos::policy {
namespace {

std::string norm(std::string_view p) {
  const NormalisedPath n = normalise_http_path(p);
  return n.ok() ? n.path : "REFUSED: " + n.reason;
}

bool refused(std::string_view p) { return !normalise_http_path(p).ok(); }

TEST(HttpPath, PlainPathsAreUnchanged) {
  EXPECT_EQ(norm("/"), "/");
  EXPECT_EQ(norm("/v1/messages"), "/v1/messages");
  EXPECT_EQ(norm("/v1/models/"), "/v1/models/");
  EXPECT_EQ(norm("/v1/a%20b"), "/v1/a%20b");
}

TEST(HttpPath, DotSegmentsAreResolved) {
  EXPECT_EQ(norm("/v1/../admin"), "/admin");
  EXPECT_EQ(norm("/v1/./models"), "/v1/models");
  EXPECT_EQ(norm("/v1/models/.."), "/v1/");
  EXPECT_EQ(norm("/v1/models/."), "/v1/models/");
  EXPECT_EQ(norm("/v1/a/b/../../c"), "/v1/c");
  EXPECT_EQ(norm("/..."), "/...");  // not a dot segment: a name
  EXPECT_EQ(norm("/a..b/.c"), "/a..b/.c");
}

TEST(HttpPath, EncodedDotsAreDotsToo) {
  EXPECT_EQ(norm("/v1/%2e%2e/admin"), "/admin");
  EXPECT_EQ(norm("/v1/%2E%2E/admin"), "/admin");
  EXPECT_EQ(norm("/v1/.%2e/admin"), "/admin");
  EXPECT_EQ(norm("/v1/%2e./admin"), "/admin");
  EXPECT_EQ(norm("/v1/%2e/models"), "/v1/models");
}

TEST(HttpPath, EmptySegmentsCollapse) {
  EXPECT_EQ(norm("/v1//models"), "/v1/models");
  EXPECT_EQ(norm("//v1///models//"), "/v1/models/");
  EXPECT_EQ(norm("//"), "/");
}

TEST(HttpPath, EscapeAboveTheRootIsRefused) {
  EXPECT_TRUE(refused("/.."));
  EXPECT_TRUE(refused("/../etc/passwd"));
  EXPECT_TRUE(refused("/v1/../../admin"));
  EXPECT_TRUE(refused("/v1/%2e%2e/%2e%2e/admin"));
  EXPECT_TRUE(refused("/a/..//../b"));
}

TEST(HttpPath, EncodedSlashNulAndBackslashAreRefused) {
  EXPECT_TRUE(refused("/v1/models%2Fadmin"));
  EXPECT_TRUE(refused("/v1/models%2fadmin"));
  EXPECT_TRUE(refused("/v1/%2e%2e%2fadmin"));
  EXPECT_TRUE(refused("/v1/a%00b"));
  EXPECT_TRUE(refused("/v1\\..\\admin"));
  EXPECT_TRUE(refused("/v1/%5c../admin"));
  EXPECT_TRUE(refused("/v1/%5C"));
}

TEST(HttpPath, MalformedEscapesAreRefused) {
  EXPECT_TRUE(refused("/v1/%"));
  EXPECT_TRUE(refused("/v1/%2"));
  EXPECT_TRUE(refused("/v1/%zz"));
  EXPECT_TRUE(refused("/v1/%-1"));
}

TEST(HttpPath, UnreservedEscapesAreDecodedOthersUpperCased) {
  EXPECT_EQ(norm("/v1/%6d%6F%64%65%6c%73"), "/v1/models");  // mixed-case escapes of letters
  EXPECT_EQ(norm("/%7euser/a%2Db%5fc"), "/~user/a-b_c");
  EXPECT_EQ(norm("/a%2ab"), "/a%2Ab");
  EXPECT_EQ(norm("/a%2Ab"), "/a%2Ab");
  EXPECT_EQ(norm("/a%3fb%23c"), "/a%3Fb%23c");
  EXPECT_EQ(norm("/%e2%82%ac"), "/%E2%82%AC");
  EXPECT_EQ(norm("/a%25b"), "/a%25b");    // an encoded `%` not followed by hex stays encoded
  EXPECT_EQ(norm("/a%25zz"), "/a%25zz");
  EXPECT_EQ(norm("/a%25"), "/a%25");
  EXPECT_EQ(norm("/a%25e"), "/a%25e");    // one hex digit: not an escape a second decoding makes
}

// Review R1 F6: encodings that only a second decoding (or `;`-stripping after decoding) turns
// into `..` are refused; their single-encoded neighbours are not.
TEST(HttpPath, DoubleEncodedEscapesAreRefused) {
  EXPECT_EQ(norm("/public/%252e%252e/%252e%252e/admin"),
            "REFUSED: a double-encoded escape (`%252e`) in the path");
  EXPECT_TRUE(refused("/public/..%252f..%252fadmin"));
  EXPECT_TRUE(refused("/a%252e%252e"));
  EXPECT_TRUE(refused("/a%2541"));    // any `%25XX`, not only dots and slashes
  EXPECT_TRUE(refused("/a%25Fe"));
  // `%25` then escapes of `2` and `e`: forwarded as `%252e` after the first decoding.
  EXPECT_EQ(norm("/x/%25%32%65%25%32%65/admin"), "REFUSED: a double-encoded escape (`%252e`) in the path");
  EXPECT_TRUE(refused("/x/%25%32F"));
  EXPECT_EQ(norm("/public/%2e%2e/public/x"), "/public/x");  // single-encoded dots: resolved, not refused
  EXPECT_EQ(norm("/public/a%20b"), "/public/a%20b");
}

TEST(HttpPath, DotSegmentsWithEncodedParametersAreRefused) {
  EXPECT_TRUE(refused("/public/..%3B/..%3B/admin"));
  EXPECT_TRUE(refused("/public/..%3b/admin"));
  EXPECT_TRUE(refused("/public/%2e%2e%3bx/admin"));
  EXPECT_TRUE(refused("/public/.%3B/admin"));
  EXPECT_TRUE(refused("/public/%2E%3Bjsessionid=1/admin"));
  EXPECT_EQ(norm("/public/..%3B/admin"), "REFUSED: a dot segment with `;` parameters in the path (`..%3B`)");
  // Neighbours: an encoded `;` in a name, and a name that merely starts with dots.
  EXPECT_EQ(norm("/public/a%3Bb/x"), "/public/a%3Bb/x");
  EXPECT_EQ(norm("/public/...%3B/x"), "/public/...%3B/x");
  EXPECT_EQ(norm("/public/%3B/x"), "/public/%3B/x");
  EXPECT_EQ(norm("/public/..a%3B/x"), "/public/..a%3B/x");
}

TEST(HttpPath, FullwidthDotsAreANameNotADotSegment) {
  // U+FF0E (`．`, UTF-8 EF BC 8E): IIS-style Unicode folding would read `．．` as `..`. Not
  // refused (no RFC decoding makes it a dot; docs/http-rules.md lists it as a residual): it is
  // matched and forwarded as the name it is, so `/public/**` allows it.
  EXPECT_EQ(norm("/public/%EF%BC%8E%EF%BC%8E/admin"), "/public/%EF%BC%8E%EF%BC%8E/admin");
}

TEST(HttpPath, SemicolonParameters) {
  // A parameter on a name is part of that segment (whole-segment matching keeps it apart)...
  EXPECT_EQ(norm("/v1/models;v=2"), "/v1/models;v=2");
  // ...but a dot segment with parameters is what Tomcat-style servers resolve as `..`.
  EXPECT_TRUE(refused("/v1/..;/admin"));
  EXPECT_TRUE(refused("/v1/.;x/admin"));
  EXPECT_TRUE(refused("/v1/%2e%2e;/admin"));
  // An encoded `;` too: servers that strip parameters after decoding resolve `..%3B` as `..`.
  EXPECT_TRUE(refused("/v1/..%3B/admin"));
  EXPECT_EQ(norm("/v1/models%3Bv=2"), "/v1/models%3Bv=2");
}

TEST(HttpPath, MustStartWithSlash) {
  EXPECT_TRUE(refused(""));
  EXPECT_TRUE(refused("v1/models"));
  EXPECT_TRUE(refused("*"));
}

TEST(HttpPath, NormalisingIsIdempotent) {
  for (const char* p : {"/v1/../admin", "/%7e/%41/", "/a//b/./c/..", "/x%2a;y", "/v1/a%3B/..", "/a%25zz"}) {
    const std::string once = norm(p);
    ASSERT_EQ(once.rfind("REFUSED", 0), std::string::npos) << p;
    EXPECT_EQ(norm(once), once) << p;
  }
}

TEST(HttpTarget, QueryIsSplitOff) {
  auto t = split_target("/v1/models?key=x&b=/../");
  EXPECT_EQ(t.path, "/v1/models");
  EXPECT_EQ(t.query, "key=x&b=/../");
  EXPECT_TRUE(t.has_query);
  t = split_target("/v1");
  EXPECT_EQ(t.path, "/v1");
  EXPECT_FALSE(t.has_query);
  t = split_target("/v1?");
  EXPECT_TRUE(t.has_query);
  EXPECT_EQ(t.query, "");
}

TEST(HttpPattern, Validation) {
  EXPECT_EQ(http_pattern_error("/v1/messages"), "");
  EXPECT_EQ(http_pattern_error("/v1/models/*"), "");
  EXPECT_EQ(http_pattern_error("/repos/*/*/**"), "");
  EXPECT_EQ(http_pattern_error("/**"), "");
  EXPECT_EQ(http_pattern_error("/"), "");
  EXPECT_NE(http_pattern_error("v1"), "");
  EXPECT_EQ(http_pattern_error("/v1/"), "");
  EXPECT_NE(http_pattern_error("/v1/mod*"), "");
  EXPECT_NE(http_pattern_error("/v1/**/x"), "");
  EXPECT_NE(http_pattern_error("/v1/../x"), "");
  EXPECT_NE(http_pattern_error("/v1//x"), "");
  EXPECT_NE(http_pattern_error("/v1/%7ex"), "");  // write `~`
  EXPECT_NE(http_pattern_error("/v1?x=1"), "");
  EXPECT_NE(http_pattern_error("/a%2Fb"), "");
}

TEST(HttpPattern, WholeSegmentMatching) {
  EXPECT_TRUE(http_path_matches("/v1/messages", "/v1/messages"));
  EXPECT_FALSE(http_path_matches("/v1/messages", "/v1/messages/"));  // a trailing `/` is significant
  EXPECT_TRUE(http_path_matches("/v1/messages/", "/v1/messages/"));
  EXPECT_FALSE(http_path_matches("/v1/messages/", "/v1/messages"));
  EXPECT_FALSE(http_path_matches("/v1/messages", "/v1/messagesX"));
  EXPECT_FALSE(http_path_matches("/v1/messages", "/v1/messages/x"));
  EXPECT_FALSE(http_path_matches("/v1/messages", "/v1"));
  EXPECT_FALSE(http_path_matches("/v1/models", "/v1/models;x"));
  EXPECT_FALSE(http_path_matches("/v1/Messages", "/v1/messages"));  // paths are case-sensitive
}

TEST(HttpPattern, StarIsOneSegment) {
  EXPECT_TRUE(http_path_matches("/v1/models/*", "/v1/models/gpt-4"));
  EXPECT_FALSE(http_path_matches("/v1/models/*", "/v1/models"));
  EXPECT_FALSE(http_path_matches("/v1/models/*", "/v1/models/"));
  EXPECT_FALSE(http_path_matches("/v1/models/*", "/v1/models/a/b"));
  EXPECT_TRUE(http_path_matches("/repos/*/*/issues", "/repos/o/r/issues"));
  EXPECT_FALSE(http_path_matches("/repos/*/*/issues", "/repos/o/issues"));
}

TEST(HttpPattern, TrailingDoubleStarIsTheRest) {
  EXPECT_TRUE(http_path_matches("/v1/**", "/v1"));
  EXPECT_TRUE(http_path_matches("/v1/**", "/v1/"));
  EXPECT_TRUE(http_path_matches("/v1/**", "/v1/a"));
  EXPECT_TRUE(http_path_matches("/v1/**", "/v1/a/b/c"));
  EXPECT_FALSE(http_path_matches("/v1/**", "/v10/a"));
  EXPECT_FALSE(http_path_matches("/v1/**", "/"));
  EXPECT_TRUE(http_path_matches("/**", "/"));
  EXPECT_TRUE(http_path_matches("/**", "/anything/at/all"));
  EXPECT_TRUE(http_path_matches("/", "/"));
  EXPECT_FALSE(http_path_matches("/", "/a"));
}

std::vector<manifest::HttpRule> rules() {
  return {{"POST", "/v1/messages", "capabilities.egress[0].http[0]", {}},
          {"GET", "/v1/models/*", "capabilities.egress[0].http[1]", {}},
          {"*", "/v1/files/**", "capabilities.egress[0].http[2]", {}}};
}

TEST(HttpRules, FirstMatchingRuleIsNamed) {
  auto m = match_http_rules("POST", "/v1/messages", rules(), "capabilities.egress[0]");
  EXPECT_TRUE(m.allowed);
  EXPECT_EQ(m.rule, "capabilities.egress[0].http[0]");
  m = match_http_rules("DELETE", "/v1/files/a/b", rules(), "capabilities.egress[0]");
  EXPECT_TRUE(m.allowed);
  EXPECT_EQ(m.rule, "capabilities.egress[0].http[2]");
}

TEST(HttpRules, WrongMethodNamesTheRuleWhosePathMatched) {
  auto m = match_http_rules("GET", "/v1/messages", rules(), "capabilities.egress[0]");
  EXPECT_FALSE(m.allowed);
  EXPECT_EQ(m.rule, "capabilities.egress[0].http[0]");
  EXPECT_NE(m.reason.find("POST /v1/messages"), std::string::npos) << m.reason;
  m = match_http_rules("post", "/v1/messages", rules(), "capabilities.egress[0]");  // methods are case-sensitive
  EXPECT_FALSE(m.allowed);
  m = match_http_rules("HEAD", "/v1/models/x", rules(), "capabilities.egress[0]");  // HEAD is not GET
  EXPECT_FALSE(m.allowed);
}

TEST(HttpRules, WrongPathNamesTheEntry) {
  auto m = match_http_rules("POST", "/admin", rules(), "capabilities.egress[0]");
  EXPECT_FALSE(m.allowed);
  EXPECT_EQ(m.rule, "capabilities.egress[0]");
  EXPECT_NE(m.reason.find("POST /admin"), std::string::npos);
}

TEST(HttpRules, PatternsAreComparedNormalised) {
  const std::vector<manifest::HttpRule> r = {{"GET", "/%7euser//files", "k0", {}}};
  EXPECT_TRUE(match_http_rules("GET", "/~user/files", r, "e").allowed);
  EXPECT_FALSE(match_http_rules("GET", "/~user/other", r, "e").allowed);
}

TEST(HttpRules, NoRulesAllowsEverything) {
  auto m = match_http_rules("DELETE", "/anything", {}, "capabilities.egress[3]");
  EXPECT_TRUE(m.allowed);
  EXPECT_EQ(m.rule, "capabilities.egress[3]");
}

TEST(HttpRules, TraversalThroughNormalisationCannotReachAnotherRule) {
  for (const char* p : {"/v1/messages/../admin", "/v1/messages/%2e%2e/admin", "/v1/models/x/../../../admin"}) {
    const NormalisedPath n = normalise_http_path(p);
    ASSERT_TRUE(n.ok()) << p;
    EXPECT_FALSE(match_http_rules("POST", n.path, rules(), "e").allowed) << p << " -> " << n.path;
  }
}

}  // namespace
}  // namespace soyaos::policy
