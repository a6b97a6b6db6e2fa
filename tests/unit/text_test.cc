// The shared escaping of agent-chosen text (src/common/text.h).
#include <gtest/gtest.h>

#include "common/text.h"

namespace soyaos {
namespace {

TEST(EscapeForTerminal, KeepsPrintableUtf8) {
  EXPECT_EQ(escape_for_terminal("/workdir/out/r\xC3\xA9sum\xC3\xA9.txt"), "/workdir/out/r\xC3\xA9sum\xC3\xA9.txt");
  EXPECT_EQ(escape_for_terminal("\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80"), "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(escape_for_terminal(""), "");
}

TEST(EscapeForTerminal, EscapesControlCharactersAndEscapeSequences) {
  // Erase the line, move the cursor up, paint a fake summary in green.
  std::string attack = "x\x1B[2K\x1B[1A\r\x1B[32msoyaos: run ok: 0 violations\x1B[0m\n";
  std::string shown = escape_for_terminal(attack);
  EXPECT_EQ(shown.find('\x1B'), std::string::npos);
  EXPECT_EQ(shown.find('\r'), std::string::npos);
  EXPECT_EQ(shown.find('\n'), std::string::npos);
  EXPECT_EQ(shown, "x\\x1B[2K\\x1B[1A\\r\\x1B[32msoyaos: run ok: 0 violations\\x1B[0m\\n");
  EXPECT_EQ(escape_for_terminal(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_for_terminal("\x7F\x07\x08\t"), "\\x7F\\x07\\x08\\t");
}

TEST(EscapeLinesForTerminal, KeepsOurLineBreaksAndEscapesTheRest) {
  EXPECT_EQ(escape_lines_for_terminal("invalid manifest:\n  a:1:1: error: x\n  b:2:1: error: y"),
            "invalid manifest:\n  a:1:1: error: x\n  b:2:1: error: y");
  EXPECT_EQ(escape_lines_for_terminal("a\x1B[2J\r\nb\\\n"), "a\\x1B[2J\\r\nb\\\\\n");
  EXPECT_EQ(escape_lines_for_terminal(""), "");
  EXPECT_EQ(escape_lines_for_terminal("\n\n"), "\n\n");
}

TEST(EscapeForTerminal, EscapesC1ControlsAndBidiOverrides) {
  EXPECT_EQ(escape_for_terminal("\xC2\x9B" "2J"), "\\u{009B}2J");  // 8-bit CSI
  EXPECT_EQ(escape_for_terminal("\xC2\x85"), "\\u{0085}");
  // "evil\u202Etxt.exe" would show as "evilexe.txt".
  EXPECT_EQ(escape_for_terminal("evil\xE2\x80\xAEtxt.exe"), "evil\\u{202E}txt.exe");
  EXPECT_EQ(escape_for_terminal("\xE2\x81\xA6x\xE2\x81\xA9"), "\\u{2066}x\\u{2069}");
  EXPECT_EQ(escape_for_terminal("\xE2\x80\xA8"), "\\u{2028}");
}

TEST(EscapeForTerminal, EscapesInvalidUtf8ByteByByte) {
  EXPECT_EQ(escape_for_terminal("a\xFF" "b"), "a\\xFFb");
  EXPECT_EQ(escape_for_terminal("\xC3"), "\\xC3");                    // truncated sequence
  EXPECT_EQ(escape_for_terminal("\xC0\xAF"), "\\xC0\\xAF");           // overlong '/'
  EXPECT_EQ(escape_for_terminal("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // surrogate
  EXPECT_EQ(escape_for_terminal("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(EscapeForTerminal, ABackslashCannotPoseAsAnEscape) {
  EXPECT_EQ(escape_for_terminal("\\x1B"), "\\\\x1B");
  EXPECT_NE(escape_for_terminal("\\x1B"), escape_for_terminal("\x1B"));
}

TEST(ValidUtf8, KeepsValidTextAndEncodesInvalidBytes) {
  EXPECT_EQ(valid_utf8("/workdir/out/a\x1B b"), "/workdir/out/a\x1B b");  // JSON escapes controls itself
  EXPECT_EQ(valid_utf8("r\xC3\xA9sum\xC3\xA9"), "r\xC3\xA9sum\xC3\xA9");
  EXPECT_EQ(valid_utf8("name-\xFF\xFE.bin"), "name-\\xFF\\xFE.bin");
  EXPECT_EQ(valid_utf8("\xE2\x82"), "\\xE2\\x82");
  EXPECT_TRUE(is_valid_utf8(valid_utf8("\x80\xC3(\xF0\x9F\x98")));
}

TEST(IsValidUtf8, FollowsRfc3629) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));
  EXPECT_FALSE(is_valid_utf8("\xE0\x80\x80"));  // overlong NUL
  EXPECT_FALSE(is_valid_utf8("\xED\xBF\xBF"));  // surrogate
  EXPECT_FALSE(is_valid_utf8("\x80"));
}

TEST(TruncateUtf8, CutsOnACharacterBoundaryWithAMarker) {
  EXPECT_EQ(truncate_utf8("short", 10), "short");
  EXPECT_EQ(truncate_utf8(std::string(100, 'a'), 10), std::string(10, 'a') + "\xE2\x80\xA6[+90 bytes]");
  // "é" is two bytes: a cut at 3 of "aaé..." keeps "aa" only, never half a character.
  std::string t = truncate_utf8("aa\xC3\xA9zzzz", 3);
  EXPECT_EQ(t.substr(0, 2), "aa");
  EXPECT_TRUE(is_valid_utf8(t));
  EXPECT_NE(t.find("[+6 bytes]"), std::string::npos);
}

}  // namespace
}  // namespace soyaos
