// `.soyaignore`: which paths of a pack are not part of it (SPEC.md T6), in gitignore
// syntax (git-scm.com/docs/gitignore):
//   - blank lines and lines starting with `#` are skipped; `\#` and `\!` start a literal;
//   - trailing spaces are dropped unless escaped (`\ `); a trailing `\r` is dropped too;
//   - `!pattern` re-includes what an earlier pattern excluded (the last match wins), but
//     nothing below an excluded directory can be re-included (it is never looked at);
//   - a trailing `/` matches directories only;
//   - a `/` at the start or in the middle anchors the pattern at the pack root; without
//     one it matches the name at any depth;
//   - `*` any run of characters but `/`, `?` one character but `/`, `[a-z]`, `[!0-9]`,
//     `[^…]`, `[[:alpha:]]` classes (never `/`), `\x` the character x;
//   - `**/` at the start or `/**/` inside: zero or more directories; a trailing `/**`:
//     everything inside; `**` anywhere else is `*`.
// Unlike git, a pattern git would silently never match (an unterminated `[`, an unknown
// `[:class:]`, a trailing `\`) is an error naming the line: a mistyped exclusion in a
// security tool must not pass unseen.
//
// Matching is an NFA simulation, linear in (pattern length x path length) whatever the
// pattern: no backtracking blow-up on `*a*a*a*…`.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace soyaos {

class IgnoreRules {
 public:
  // The rules every pack starts with, before its `.soyaignore`: `.git` (the directory, or
  // the file of a git worktree) and `.env*` (a `.soyaignore` may re-include with
  // `!.env.example`).
  static IgnoreRules defaults();

  // Appends the patterns of a gitignore-syntax text. `source` names it in errors, which
  // read "SOURCE:LINE: why". On error nothing is appended.
  Status add(std::string_view text, std::string_view source);

  // Whether the rules exclude `rel` (relative, '/'-separated, no leading or trailing '/',
  // no empty component). Only this path's own match counts: the caller does not look
  // below an excluded directory.
  [[nodiscard]] bool excluded(std::string_view rel, bool is_dir) const;

  [[nodiscard]] size_t size() const { return rules_.size(); }

 private:
  enum class Op : uint8_t {
    lit,       // one given character
    one,       // `?`: any character but '/'
    cls,       // `[...]`: a character of the set (never '/')
    star,      // `*`: any run of characters but '/'
    any,       // trailing `/**` or a lone `**`: any run of characters
    dirs,      // `**/`: empty, or any run of characters ending with '/'
  };
  struct Token {
    Op op = Op::lit;
    char c = 0;
    uint16_t cls = 0;  // index into Rule::classes
  };
  enum class Shape : uint8_t { general, literal, suffix, prefix };
  struct Rule {
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;  // matched against the whole path, else against its last name
    Shape shape = Shape::general;
    std::string text;       // the literal part for literal/suffix/prefix shapes
    std::vector<Token> tokens;
    std::vector<std::bitset<256>> classes;
  };
  static Result<Rule> parse_line(std::string_view line);
  static bool match(const Rule& r, std::string_view s);

  std::vector<Rule> rules_;
};

}  // namespace soyaos
