// The `.soyaignore` matcher (common/ignore.h): gitignore semantics, case by case. The
// expectations follow git-scm.com/docs/gitignore and git's own wildmatch tests.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/ignore.h"
#include "thread_cpu_clock.h"

namespace soyaos {
namespace {

IgnoreRules rules(const std::string& text) {
  IgnoreRules r;
  auto s = r.add(text, ".soyaignore");
  EXPECT_TRUE(s) << text << ": " << s.error().message;
  return r;
}

bool file_out(const std::string& text, const std::string& path) { return rules(text).excluded(path, false); }
bool dir_out(const std::string& text, const std::string& path) { return rules(text).excluded(path, true); }

TEST(Ignore, BlankLinesAndCommentsMatchNothing) {
  const IgnoreRules r = rules("\n# a comment\n   \n\t#not-a-comment-only-at-column-0\n");
  EXPECT_EQ(r.size(), 1U);  // the tab-prefixed line is a pattern
  EXPECT_FALSE(r.excluded("a", false));
  EXPECT_FALSE(r.excluded("# a comment", false));
  EXPECT_TRUE(file_out("\\#hash", "#hash"));
  EXPECT_FALSE(file_out("\\#hash", "\\#hash"));
}

TEST(Ignore, TrailingSpacesAndCrlf) {
  EXPECT_TRUE(file_out("name   \n", "name"));
  EXPECT_FALSE(file_out("name   \n", "name   "));
  EXPECT_TRUE(file_out("name\\ \n", "name "));
  EXPECT_FALSE(file_out("name\\ \n", "name"));
  EXPECT_TRUE(file_out("name\r\n", "name"));
  EXPECT_TRUE(file_out("a b", "a b"));  // inner spaces are part of the name
}

TEST(Ignore, UnanchoredMatchesAtAnyDepthAnchoredOnlyAtTheRoot) {
  EXPECT_TRUE(file_out("foo", "foo"));
  EXPECT_TRUE(file_out("foo", "a/b/foo"));
  EXPECT_TRUE(dir_out("foo", "a/foo"));
  EXPECT_FALSE(file_out("foo", "foobar"));
  EXPECT_FALSE(file_out("foo", "a/foo/bar"));  // only the directory itself matches
  // A leading slash anchors.
  EXPECT_TRUE(file_out("/foo", "foo"));
  EXPECT_FALSE(file_out("/foo", "a/foo"));
  // So does a slash in the middle.
  EXPECT_TRUE(file_out("doc/frotz", "doc/frotz"));
  EXPECT_FALSE(file_out("doc/frotz", "a/doc/frotz"));
  EXPECT_TRUE(file_out("/doc/frotz", "doc/frotz"));
}

TEST(Ignore, TrailingSlashMatchesDirectoriesOnly) {
  EXPECT_TRUE(dir_out("build/", "build"));
  EXPECT_TRUE(dir_out("build/", "src/build"));  // still unanchored: the slash is trailing
  EXPECT_FALSE(file_out("build/", "build"));
  EXPECT_TRUE(dir_out("frotz/", "a/frotz"));
  EXPECT_TRUE(dir_out("/out/", "out"));
  EXPECT_FALSE(dir_out("/out/", "a/out"));
}

TEST(Ignore, NegationLastMatchWins) {
  EXPECT_FALSE(file_out("*.log\n!keep.log\n", "keep.log"));
  EXPECT_TRUE(file_out("*.log\n!keep.log\n", "other.log"));
  EXPECT_TRUE(file_out("!keep.log\n*.log\n", "keep.log"));  // order matters
  EXPECT_TRUE(file_out("\\!important", "!important"));
  EXPECT_FALSE(file_out("\\!important", "important"));
  // Negating a directory-only pattern leaves files alone.
  EXPECT_TRUE(file_out("x\n!x/\n", "x"));
  EXPECT_FALSE(dir_out("x\n!x/\n", "x"));
}

TEST(Ignore, StarAndQuestionMarkDoNotCrossSlashes) {
  EXPECT_TRUE(file_out("*.py[co]", "a/b/c.pyc"));
  EXPECT_TRUE(file_out("*", "anything"));
  EXPECT_TRUE(file_out("/*.c", "cat-file.c"));
  EXPECT_FALSE(file_out("/*.c", "mozilla-sha1/sha1.c"));
  EXPECT_TRUE(file_out("a/*/c", "a/b/c"));
  EXPECT_FALSE(file_out("a/*/c", "a/b/x/c"));
  EXPECT_TRUE(file_out("a?c", "abc"));
  EXPECT_FALSE(file_out("/a?c", "a/c"));
  EXPECT_FALSE(file_out("a?c", "ac"));
  EXPECT_TRUE(file_out("f*o*o", "foo"));
  EXPECT_TRUE(file_out("f*o*o", "fxxoyyo"));
  EXPECT_FALSE(file_out("f*o*o", "fxxoyy"));
  EXPECT_TRUE(file_out(".env*", ".env"));
  EXPECT_TRUE(file_out(".env*", ".env.local"));
  EXPECT_FALSE(file_out(".env*", "x.env"));
}

TEST(Ignore, DoubleStar) {
  // Leading **/: in every directory.
  EXPECT_TRUE(file_out("**/foo", "foo"));
  EXPECT_TRUE(file_out("**/foo", "a/b/foo"));
  EXPECT_TRUE(file_out("**/foo/bar", "foo/bar"));
  EXPECT_TRUE(file_out("**/foo/bar", "x/foo/bar"));
  EXPECT_FALSE(file_out("**/foo/bar", "x/foo/baz"));
  // Trailing /**: everything inside, not the directory itself.
  EXPECT_TRUE(file_out("abc/**", "abc/x"));
  EXPECT_TRUE(file_out("abc/**", "abc/x/y/z"));
  EXPECT_FALSE(dir_out("abc/**", "abc"));
  EXPECT_FALSE(file_out("abc/**", "x/abc/y"));  // anchored
  // /**/: zero or more directories.
  EXPECT_TRUE(file_out("a/**/b", "a/b"));
  EXPECT_TRUE(file_out("a/**/b", "a/x/b"));
  EXPECT_TRUE(file_out("a/**/b", "a/x/y/b"));
  EXPECT_FALSE(file_out("a/**/b", "a/xb"));
  EXPECT_FALSE(file_out("a/**/b", "ab"));
  // A lone ** matches everything; ** elsewhere is a plain *.
  EXPECT_TRUE(file_out("**", "a/b/c"));
  EXPECT_TRUE(file_out("a**b", "axxb"));
  EXPECT_FALSE(file_out("/a**b", "ax/xb"));
  EXPECT_TRUE(file_out("foo/**/*.js", "foo/a/b/x.js"));
  EXPECT_TRUE(file_out("foo/**/*.js", "foo/x.js"));
  EXPECT_FALSE(file_out("foo/**/*.js", "foo/a/x.jsx"));
  EXPECT_TRUE(dir_out("**/node_modules/", "a/node_modules"));
}

TEST(Ignore, CharacterClasses) {
  EXPECT_TRUE(file_out("[abc]", "b"));
  EXPECT_FALSE(file_out("[abc]", "d"));
  EXPECT_TRUE(file_out("[a-c]x", "bx"));
  EXPECT_FALSE(file_out("[a-c]x", "dx"));
  EXPECT_TRUE(file_out("[!a-c]x", "dx"));
  EXPECT_FALSE(file_out("[!a-c]x", "ax"));
  EXPECT_TRUE(file_out("[^a-c]x", "dx"));
  EXPECT_TRUE(file_out("[]]", "]"));    // ']' first is literal
  EXPECT_TRUE(file_out("[!]]", "a"));
  EXPECT_FALSE(file_out("[!]]", "]"));
  EXPECT_TRUE(file_out("[a-]", "-"));   // '-' last is literal
  EXPECT_TRUE(file_out("[\\]]", "]"));  // escaped inside a class
  EXPECT_TRUE(file_out("[[:digit:]][[:alpha:]]", "1a"));
  EXPECT_FALSE(file_out("[[:digit:]][[:alpha:]]", "a1"));
  EXPECT_TRUE(file_out("[[:upper:][:digit:]]", "Z"));
  EXPECT_TRUE(file_out("[[:space:]]", " "));
  EXPECT_TRUE(file_out("[[:punct:]]", "!"));
  EXPECT_TRUE(file_out("[[:xdigit:]]", "f"));
  EXPECT_FALSE(file_out("[[:xdigit:]]", "g"));
  EXPECT_TRUE(file_out("[z-a]x\nzx\n", "zx"));  // a reversed range matches nothing, the next rule does
  EXPECT_FALSE(file_out("[z-a]x", "ax"));
  // A class never matches '/', even negated.
  EXPECT_FALSE(file_out("a[!x]b", "a/b"));
  EXPECT_FALSE(file_out("a[/]b", "a/b"));
  EXPECT_TRUE(file_out("[[]", "["));  // no ":]": a plain '['
}

TEST(Ignore, EscapesMakeSpecialCharactersLiteral) {
  EXPECT_TRUE(file_out("\\*", "*"));
  EXPECT_FALSE(file_out("\\*", "a"));
  EXPECT_TRUE(file_out("\\?", "?"));
  EXPECT_FALSE(file_out("\\?", "a"));
  EXPECT_TRUE(file_out("\\[a]", "[a]"));
  EXPECT_TRUE(file_out("a\\b", "ab"));
}

TEST(Ignore, InvalidPatternsAreErrorsNamingTheLine) {
  for (const char* bad : {"ok\n[abc\n", "ok\nname\\\n", "ok\n[[:nope:]]\n", "ok\n[a-\\\n"}) {
    IgnoreRules r;
    auto s = r.add(bad, ".soyaignore");
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.error().message.rfind(".soyaignore:2: ", 0), 0U) << s.error().message;
    EXPECT_EQ(r.size(), 0U) << "nothing is added on error";
  }
  IgnoreRules r;
  auto s = r.add("[abc", ".soyaignore");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("unterminated character class"), std::string::npos);
}

TEST(Ignore, EmptyPatternsMatchNothing) {
  const IgnoreRules r = rules("!\n/\n//\n");
  EXPECT_EQ(r.size(), 0U);
  EXPECT_FALSE(r.excluded("a", false));
}

TEST(Ignore, DefaultsExcludeGitAndEnvFilesAndCanBeNegated) {
  IgnoreRules d = IgnoreRules::defaults();
  EXPECT_TRUE(d.excluded(".git", true));
  EXPECT_TRUE(d.excluded("vendor/x/.git", true));
  EXPECT_TRUE(d.excluded(".git", false));  // a worktree's .git file names a host path
  EXPECT_TRUE(d.excluded(".env", false));
  EXPECT_TRUE(d.excluded(".env.production", false));
  EXPECT_TRUE(d.excluded("sub/.env", false));
  EXPECT_FALSE(d.excluded("env", false));
  EXPECT_FALSE(d.excluded(".gitignore", false));
  ASSERT_TRUE(d.add("!.env.example\n", ".soyaignore"));
  EXPECT_FALSE(d.excluded(".env.example", false));
  EXPECT_TRUE(d.excluded(".env", false));
}

TEST(Ignore, NoBacktrackingBlowUp) {
  // A pattern that makes a backtracking matcher exponential.
  std::string pat, path;
  for (int i = 0; i < 30; ++i) pat += "*a";
  pat += "*b";
  path.assign(4000, 'a');
  const IgnoreRules r = rules(pat + "\n");
  const auto start = soyaos::testing::ThreadCpuClock::now();  // work, not latency
  EXPECT_FALSE(r.excluded(path, false));
  EXPECT_LT(soyaos::testing::ThreadCpuClock::now() - start, std::chrono::seconds(1));
  std::string dirs = "**/";
  for (int i = 0; i < 30; ++i) dirs += "**/a/";
  EXPECT_FALSE(rules(dirs + "b\n").excluded(std::string(2000, 'a') + "/c", false));
}

}  // namespace
}  // namespace soyaos
