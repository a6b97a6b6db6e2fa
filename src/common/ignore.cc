#include "common/ignore.h"

#include <cctype>
#include <optional>

namespace soyaos {
namespace {

// git's trim_trailing_spaces: drop the trailing run of spaces, but not an escaped one.
std::string_view trim_trailing_spaces(std::string_view s) {
  size_t end = s.size();
  std::optional<size_t> last_space;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ') {
      if (!last_space) last_space = i;
    } else if (s[i] == '\\') {
      ++i;  // the escaped character, whatever it is, is kept
      if (i >= s.size()) return s;
      last_space.reset();
    } else {
      last_space.reset();
    }
  }
  if (last_space) end = *last_space;
  return s.substr(0, end);
}

bool in_named_class(std::string_view name, unsigned char c, bool& known) {
  known = true;
  if (name == "alnum") return std::isalnum(c) != 0;
  if (name == "alpha") return std::isalpha(c) != 0;
  if (name == "blank") return c == ' ' || c == '\t';
  if (name == "cntrl") return std::iscntrl(c) != 0;
  if (name == "digit") return std::isdigit(c) != 0;
  if (name == "graph") return std::isgraph(c) != 0;
  if (name == "lower") return std::islower(c) != 0;
  if (name == "print") return std::isprint(c) != 0;
  if (name == "punct") return std::ispunct(c) != 0;
  if (name == "space") return std::isspace(c) != 0;
  if (name == "upper") return std::isupper(c) != 0;
  if (name == "xdigit") return std::isxdigit(c) != 0;
  known = false;
  return false;
}

// A bracket expression starting at p[i] == '['; on success `i` is at its closing ']'.
// Follows git's wildmatch: `!` or `^` negates, a ']' right after the opening (or the
// negation) is literal, `a-z` ranges, `[:name:]` classes, `\` escapes.
Result<std::bitset<256>> parse_class(std::string_view p, size_t& i) {
  std::bitset<256> set;
  ++i;
  bool negated = false;
  if (i < p.size() && (p[i] == '!' || p[i] == '^')) {
    negated = true;
    ++i;
  }
  bool first = true;
  int prev = -1;  // the previous single character, the start of a possible range
  for (;; ++i) {
    if (i >= p.size()) return make_error("unterminated character class '['");
    const auto c = static_cast<unsigned char>(p[i]);
    if (c == ']' && !first) break;
    first = false;
    if (c == '\\') {
      if (++i >= p.size()) return make_error("'\\' at the end of the pattern");
      const auto e = static_cast<unsigned char>(p[i]);
      set.set(e);
      prev = e;
    } else if (c == '-' && prev >= 0 && i + 1 < p.size() && p[i + 1] != ']') {
      ++i;
      auto hi = static_cast<unsigned char>(p[i]);
      if (hi == '\\') {
        if (++i >= p.size()) return make_error("'\\' at the end of the pattern");
        hi = static_cast<unsigned char>(p[i]);
      }
      for (int x = prev; x <= hi; ++x) set.set(static_cast<size_t>(x));  // empty when reversed
      prev = -1;
    } else if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(']', i + 2);
      if (close == std::string_view::npos) return make_error("unterminated character class '['");
      if (close < i + 3 || p[close - 1] != ':') {
        set.set('[');  // no ":]": a plain '['
        prev = '[';
        continue;
      }
      const std::string_view name = p.substr(i + 2, close - 1 - (i + 2));
      bool known = true;
      for (int x = 0; x < 256; ++x) {
        if (in_named_class(name, static_cast<unsigned char>(x), known)) set.set(static_cast<size_t>(x));
        if (!known) return make_error("unknown character class [:" + std::string(name) + ":]");
      }
      i = close;
      prev = -1;
    } else {
      set.set(c);
      prev = c;
    }
  }
  if (negated) set.flip();
  set.reset('/');  // a class never matches a directory separator
  return set;
}

}  // namespace

IgnoreRules IgnoreRules::defaults() {
  IgnoreRules r;
  // Cannot fail: fixed, valid patterns.
  // `.git` also as a file: a git worktree's or submodule's `.git` names a host path.
  (void)r.add(".git\n.env*\n", "default rules");
  return r;
}

Result<IgnoreRules::Rule> IgnoreRules::parse_line(std::string_view line) {
  Rule r;
  if (!line.empty() && line.front() == '!') {
    r.negate = true;
    line.remove_prefix(1);
  }
  if (!line.empty() && line.back() == '/') {
    r.dir_only = true;
    line.remove_suffix(1);
  }
  r.anchored = line.find('/') != std::string_view::npos;
  if (!line.empty() && line.front() == '/') line.remove_prefix(1);
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '*') {
      size_t run = i;
      while (run < line.size() && line[run] == '*') ++run;
      const bool at_start = i == 0 || line[i - 1] == '/';
      const bool at_end = run == line.size();
      if (run - i >= 2 && at_start && at_end) {
        r.tokens.push_back({Op::any});  // "a/**" or a lone "**"
      } else if (run - i >= 2 && at_start && line[run] == '/') {
        r.tokens.push_back({Op::dirs});  // "**/" at the start or "/**/" inside
        ++run;                           // the '/' belongs to it
      } else if (r.tokens.empty() || r.tokens.back().op != Op::star) {
        r.tokens.push_back({Op::star});
      }
      i = run - 1;
    } else if (c == '?') {
      r.tokens.push_back({Op::one});
    } else if (c == '[') {
      auto set = parse_class(line, i);
      if (!set) return set.error();
      if (r.classes.size() >= UINT16_MAX) return make_error("too many character classes");
      r.tokens.push_back({Op::cls, 0, static_cast<uint16_t>(r.classes.size())});
      r.classes.push_back(*set);
    } else if (c == '\\') {
      if (++i >= line.size()) return make_error("'\\' at the end of the pattern");
      r.tokens.push_back({Op::lit, line[i]});
    } else {
      r.tokens.push_back({Op::lit, c});
    }
  }
  // Fast paths for the common shapes: "name", "*.ext", "prefix*".
  size_t stars = 0;
  bool only_lits_and_stars = true;
  for (const auto& t : r.tokens) {
    if (t.op == Op::star) ++stars;
    else if (t.op != Op::lit) only_lits_and_stars = false;
  }
  auto lits = [&](size_t from, size_t to) {
    std::string s;
    for (size_t k = from; k < to; ++k) s += r.tokens[k].c;
    return s;
  };
  if (!only_lits_and_stars || stars > 1) return r;
  if (stars == 0) {
    r.shape = Shape::literal;
    r.text = lits(0, r.tokens.size());
  } else if (r.tokens.front().op == Op::star) {
    r.shape = Shape::suffix;
    r.text = lits(1, r.tokens.size());
  } else if (r.tokens.back().op == Op::star) {
    r.shape = Shape::prefix;
    r.text = lits(0, r.tokens.size() - 1);
  }
  return r;
}

Status IgnoreRules::add(std::string_view text, std::string_view source) {
  std::vector<Rule> added;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.find('\0') != std::string_view::npos) {
      return make_error(std::string(source) + ":" + std::to_string(line_no) + ": a NUL byte in a pattern");
    }
    line = trim_trailing_spaces(line);
    auto rule = parse_line(line);
    if (!rule) return make_error(std::string(source) + ":" + std::to_string(line_no) + ": " + rule.error().message);
    if (rule->tokens.empty()) continue;  // "!", "/" or only spaces: matches nothing
    added.push_back(std::move(rule.value()));
  }
  for (auto& r : added) rules_.push_back(std::move(r));
  return {};
}

bool IgnoreRules::match(const Rule& r, std::string_view s) {
  switch (r.shape) {
    case Shape::literal:
      return s == r.text;
    case Shape::suffix:
      return s.size() >= r.text.size() && s.substr(s.size() - r.text.size()) == r.text &&
             s.substr(0, s.size() - r.text.size()).find('/') == std::string_view::npos;
    case Shape::prefix:
      return s.size() >= r.text.size() && s.substr(0, r.text.size()) == r.text &&
             s.substr(r.text.size()).find('/') == std::string_view::npos;
    case Shape::general:
      break;
  }
  // NFA simulation. at[k]: the first k tokens have matched the text read so far. in[k]
  // (dirs tokens only): inside the "anything ending with '/'" branch of token k.
  const size_t n = r.tokens.size();
  std::vector<uint8_t> at(n + 1), in(n + 1), next_at(n + 1), next_in(n + 1);
  auto close = [&](std::vector<uint8_t>& a) {  // tokens that may match nothing
    for (size_t k = 0; k < n; ++k) {
      const Op op = r.tokens[k].op;
      if (a[k] != 0 && (op == Op::star || op == Op::any || op == Op::dirs)) a[k + 1] = 1;
    }
  };
  at[0] = 1;
  close(at);
  for (const char ch : s) {
    std::fill(next_at.begin(), next_at.end(), 0);
    std::fill(next_in.begin(), next_in.end(), 0);
    bool alive = false;
    for (size_t k = 0; k < n; ++k) {
      const Token& t = r.tokens[k];
      if (in[k] != 0) {  // only ever set for dirs tokens
        next_in[k] = 1;
        if (ch == '/') next_at[k + 1] = 1;
      }
      if (at[k] == 0) continue;
      switch (t.op) {
        case Op::lit:
          if (ch == t.c) next_at[k + 1] = 1;
          break;
        case Op::one:
          if (ch != '/') next_at[k + 1] = 1;
          break;
        case Op::cls:
          if (r.classes[t.cls].test(static_cast<unsigned char>(ch))) next_at[k + 1] = 1;
          break;
        case Op::star:
          if (ch != '/') next_at[k] = 1;
          break;
        case Op::any:
          next_at[k] = 1;
          break;
        case Op::dirs:
          next_in[k] = 1;
          if (ch == '/') next_at[k + 1] = 1;
          break;
      }
    }
    close(next_at);
    at.swap(next_at);
    in.swap(next_in);
    for (size_t k = 0; k <= n && !alive; ++k) alive = at[k] != 0 || in[k] != 0;
    if (!alive) return false;
  }
  return at[n] != 0;
}

bool IgnoreRules::excluded(std::string_view rel, bool is_dir) const {
  const size_t slash = rel.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? rel : rel.substr(slash + 1);
  // The last matching rule decides.
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (it->dir_only && !is_dir) continue;
    if (match(*it, it->anchored ? rel : name)) return !it->negate;
  }
  return false;
}

}  // namespace soyaos
