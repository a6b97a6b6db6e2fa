#include "manifest/manifest_edit.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "common/text.h"
#include "manifest/diagnostic_text.h"
#include "manifest/yaml_tree.h"

namespace soyaos::manifest {
namespace {

using detail::YNode;

// The document being edited: each line remembers which original line it is (-1: added),
// so that the diff is exactly the edit, whatever the lines say.
struct Line {
  std::string text;
  int old = -1;
};

size_t indent_of(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return i;
}

bool blank_or_comment(const std::string& s) {
  const size_t i = indent_of(s);
  return i == s.size() || s[i] == '#';
}

std::string join(const std::vector<Line>& doc) {
  std::string out;
  for (const auto& l : doc) out += l.text + "\n";
  return out;
}

const YNode* value_of(const YNode& map, const std::string& key, const YNode** key_node = nullptr) {
  if (map.kind != YNode::Kind::mapping) return nullptr;
  for (size_t i = 0; i < map.map_size(); ++i) {
    if (map.key(i).kind == YNode::Kind::scalar && map.key(i).value == key) {
      if (key_node != nullptr) *key_node = &map.key(i);
      return &map.val(i);
    }
  }
  return nullptr;
}

// The character a node's mark points at ('[' / '{' for a flow collection), or 0.
char char_at(const std::vector<Line>& doc, const Mark& m) {
  if (m.line < 1 || static_cast<size_t>(m.line) > doc.size() || m.column < 1) return 0;
  const std::string& s = doc[static_cast<size_t>(m.line - 1)].text;
  const auto col = static_cast<size_t>(m.column - 1);
  return col < s.size() ? s[col] : '\0';
}

bool is_flow(const std::vector<Line>& doc, const YNode& n) {
  if (n.kind != YNode::Kind::sequence && n.kind != YNode::Kind::mapping) return false;
  const char c = char_at(doc, n.mark);
  return c == '[' || c == '{';
}

// The last line of the block that starts at `from`: the lines after it that are more
// indented than `indent` (or, when `dashes`, "- " items at exactly `indent`), blank lines
// and comments in between; trailing blank and comment lines are not part of it.
size_t block_end(const std::vector<Line>& doc, size_t from, size_t indent, bool dashes) {
  size_t last = from;
  for (size_t i = from + 1; i < doc.size(); ++i) {
    const std::string& s = doc[i].text;
    if (blank_or_comment(s)) continue;
    const size_t ind = indent_of(s);
    const bool item = dashes && ind == indent && (s.compare(ind, 2, "- ") == 0 || s.size() == ind + 1);
    if (ind <= indent && !item) break;
    last = i;
  }
  return last;
}

// Splits the flow collection starting at `open` in `s` into its top-level items; sets
// `close` to the index of the matching bracket. nullopt when it does not end on this line.
std::optional<std::vector<std::string>> split_flow(const std::string& s, size_t open, size_t* close) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      cur += c;
      if (quote == '"' && c == '\\' && i + 1 < s.size()) {
        cur += s[++i];
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      cur += c;
    } else if (c == '[' || c == '{') {
      if (depth++ > 0) cur += c;
    } else if (c == ']' || c == '}') {
      if (--depth == 0) {
        *close = i;
        if (cur.find_first_not_of(' ') != std::string::npos) items.push_back(cur);
        for (auto& it : items) {
          it.erase(0, it.find_first_not_of(' '));
          it.erase(it.find_last_not_of(' ') + 1);
        }
        return items;
      }
      cur += c;
    } else if (c == ',' && depth == 1) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return std::nullopt;
}

// Rewrites the flow collection `node` (value of the key at `key_mark`) in block style.
Status blockify(std::vector<Line>& doc, const YNode& node, const Mark& key_mark) {
  const auto li = static_cast<size_t>(node.mark.line - 1);
  const auto open = static_cast<size_t>(node.mark.column - 1);
  const std::string s = doc[li].text;
  size_t close = 0;
  auto items = split_flow(s, open, &close);
  if (!items) {
    return make_error("line " + std::to_string(node.mark.line) + ": a flow collection spanning several lines", EINVAL);
  }
  std::string rest = s.substr(close + 1);
  rest.erase(0, rest.find_first_not_of(' '));
  if (!rest.empty() && rest[0] != '#') {
    return make_error("line " + std::to_string(node.mark.line) + ": unexpected text after a flow collection", EINVAL);
  }
  std::string head = s.substr(0, open);
  head.erase(head.find_last_not_of(' ') + 1);
  if (!rest.empty()) head += "  " + rest;
  const std::string ind(static_cast<size_t>(key_mark.column - 1) + 2, ' ');
  std::vector<Line> repl{{head, -1}};
  for (const auto& item : *items) {
    repl.push_back({ind + (node.kind == YNode::Kind::sequence ? "- " : "") + item, -1});
  }
  doc.erase(doc.begin() + static_cast<ptrdiff_t>(li));
  doc.insert(doc.begin() + static_cast<ptrdiff_t>(li), repl.begin(), repl.end());
  return {};
}

std::string item_line(size_t indent, const AddedItem& item) {
  std::string comment = escape_for_terminal(item.comment);
  return std::string(indent, ' ') + "- " + item.yaml + (comment.empty() ? "" : "  # " + comment);
}

void insert_at(std::vector<Line>& doc, size_t pos, const std::vector<std::string>& lines) {
  std::vector<Line> add;
  for (const auto& l : lines) add.push_back({l, -1});
  doc.insert(doc.begin() + static_cast<ptrdiff_t>(std::min(pos, doc.size())), add.begin(), add.end());
}

// After the last line of mapping `map` (whose keys are at column `indent`).
size_t mapping_end(const std::vector<Line>& doc, const YNode& map, size_t indent) {
  const auto& last_key = map.key(map.map_size() - 1);
  return block_end(doc, static_cast<size_t>(last_key.mark.line - 1), indent, false) + 1;
}

// One step towards adding `items` under the key path `path` (capabilities, [fs,] list):
// true when the items were added, false when the structure was changed and the document
// must be parsed again.
Result<bool> step(std::vector<Line>& doc, const std::vector<std::string>& path, const std::vector<AddedItem>& items) {
  auto parsed = detail::parse_yaml(join(doc), "soyapack.yaml");
  if (!parsed.root || parsed.root->kind != YNode::Kind::mapping) {
    return make_error("the edited manifest does not parse", EINVAL);
  }
  const YNode* map = &*parsed.root;
  size_t map_indent = 0;
  for (size_t depth = 0; depth < path.size(); ++depth) {
    const YNode* key = nullptr;
    const YNode* val = value_of(*map, path[depth], &key);
    const bool leaf = depth + 1 == path.size();
    if (val == nullptr) {
      // A missing key: at the end of its mapping, one indent step in.
      std::string ind(map_indent, ' ');
      std::vector<std::string> lines{ind + path[depth] + ":"};
      for (size_t d = depth + 1; d < path.size(); ++d) {
        ind += "  ";
        lines.push_back(ind + path[d] + ":");
      }
      if (leaf || depth + 1 < path.size()) {
        for (const auto& it : items) lines.push_back(item_line(ind.size() + 2, it));
      }
      insert_at(doc, map->map_size() == 0 ? doc.size() : mapping_end(doc, *map, map_indent), lines);
      return true;
    }
    const auto key_col = static_cast<size_t>(key->mark.column - 1);
    if (is_flow(doc, *val)) {
      if (auto s = blockify(doc, *val, key->mark); !s) return s.error();
      return false;
    }
    if (val->kind == YNode::Kind::null || (val->kind == YNode::Kind::scalar && val->value.empty() && !val->quoted)) {
      // `key:` with nothing below: the rest of the path goes right after it.
      std::vector<std::string> lines;
      std::string ind(key_col + 2, ' ');
      for (size_t d = depth + 1; d < path.size(); ++d) {
        lines.push_back(ind + path[d] + ":");
        ind += "  ";
      }
      for (const auto& it : items) lines.push_back(item_line(ind.size(), it));
      insert_at(doc, static_cast<size_t>(key->mark.line), lines);
      return true;
    }
    if (leaf) {
      if (val->kind != YNode::Kind::sequence || val->items.empty()) {
        return make_error(path[depth] + " (line " + std::to_string(key->mark.line) + ") is not a list", EINVAL);
      }
      // The items' dash column: the sequence's mark is its first "- ".
      const auto dash = static_cast<size_t>(val->mark.column - 1);
      if (char_at(doc, val->mark) != '-') {
        return make_error(path[depth] + " (line " + std::to_string(key->mark.line) + "): unexpected list layout", EINVAL);
      }
      const auto last = static_cast<size_t>(val->items.back().mark.line - 1);
      std::vector<std::string> lines;
      for (const auto& it : items) lines.push_back(item_line(dash, it));
      insert_at(doc, block_end(doc, last, dash, true) + 1, lines);
      return true;
    }
    if (val->kind != YNode::Kind::mapping || val->map_size() == 0) {
      return make_error(path[depth] + " (line " + std::to_string(key->mark.line) + ") is not a mapping", EINVAL);
    }
    map = val;
    map_indent = static_cast<size_t>(val->key(0).mark.column - 1);
  }
  return make_error("unreachable", EINVAL);
}

// The end (exclusive) of the scalar starting at byte `at` of `s`, on this line; npos when
// it does not end on it (a quoted scalar continued below). A plain scalar (block context:
// the caller has rewritten flow collections) ends at ` #` or the end of the line, trailing
// blanks excluded; one continued on the next lines is caught by the check after the edit.
size_t scalar_end(const std::string& s, size_t at) {
  if (at >= s.size()) return std::string::npos;
  const char q = s[at];
  if (q == '"' || q == '\'') {
    for (size_t i = at + 1; i < s.size(); ++i) {
      if (q == '"' && s[i] == '\\') {
        ++i;
      } else if (s[i] == q) {
        if (q == '\'' && i + 1 < s.size() && s[i + 1] == '\'') {
          ++i;
          continue;
        }
        return i + 1;
      }
    }
    return std::string::npos;
  }
  size_t end = s.size();
  for (size_t i = at + 1; i < s.size(); ++i) {
    if (s[i] == '#' && (s[i - 1] == ' ' || s[i - 1] == '\t')) {
      end = i;
      break;
    }
  }
  while (end > at && (s[end - 1] == ' ' || s[end - 1] == '\t')) --end;
  return end;
}

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& k : path) out += (out.empty() ? "" : ".") + k;
  return out;
}

// The scalar at `path` in `text`, or nullopt when there is none.
std::optional<std::string> scalar_at(const std::string& text, const std::vector<std::string>& path) {
  auto parsed = detail::parse_yaml(text, "soyapack.yaml");
  if (!parsed.root) return std::nullopt;
  const YNode* n = &*parsed.root;
  for (const auto& k : path) {
    n = value_of(*n, k);
    if (n == nullptr) return std::nullopt;
  }
  if (n->kind != YNode::Kind::scalar) return std::nullopt;
  return n->value;
}

// One step towards replacing the value at `r.path`: true when replaced, false when a flow
// mapping on the way was rewritten and the document must be parsed again.
Result<bool> replace_step(std::vector<Line>& doc, const ReplacedValue& r) {
  auto parsed = detail::parse_yaml(join(doc), "soyapack.yaml");
  if (!parsed.root || parsed.root->kind != YNode::Kind::mapping || is_flow(doc, *parsed.root)) {
    return make_error("the manifest's layout could not be edited", EINVAL);
  }
  const YNode* map = &*parsed.root;
  for (size_t depth = 0; depth < r.path.size(); ++depth) {
    const YNode* key = nullptr;
    const YNode* val = value_of(*map, r.path[depth], &key);
    if (val == nullptr) return make_error(dotted(r.path) + " is missing", EINVAL);
    const std::string where = r.path[depth] + " (line " + std::to_string(key->mark.line) + ")";
    if (depth + 1 == r.path.size()) {
      if (val->kind != YNode::Kind::scalar || val->mark.line < 1 ||
          static_cast<size_t>(val->mark.line) > doc.size() || val->mark.column < 1) {
        return make_error(where + " is not a single value", EINVAL);
      }
      const auto li = static_cast<size_t>(val->mark.line - 1);
      const std::string s = doc[li].text;
      const auto at = static_cast<size_t>(val->mark.column - 1);
      const size_t end = scalar_end(s, at);
      if (end == std::string::npos) return make_error(where + ": a value spanning several lines", EINVAL);
      std::string line = s.substr(0, at) + yaml_scalar(r.value);
      if (r.comment.empty()) {
        line += s.substr(end);
      } else {
        line += "  # " + escape_for_terminal(r.comment);
      }
      doc[li] = {line, -1};
      return true;
    }
    if (is_flow(doc, *val)) {
      if (auto st = blockify(doc, *val, key->mark); !st) return st.error();
      return false;
    }
    if (val->kind != YNode::Kind::mapping || val->map_size() == 0) {
      return make_error(where + " is not a mapping", EINVAL);
    }
    map = val;
  }
  return make_error("an empty key path", EINVAL);
}

Status replace_value(std::vector<Line>& doc, const ReplacedValue& r) {
  for (int i = 0; i < 16; ++i) {
    auto done = replace_step(doc, r);
    if (!done) return done.error();
    if (!*done) continue;
    // The value as parsed again must be the new one (a plain scalar continued on the next
    // line, or a layout the line-based edit misread, would not be).
    if (scalar_at(join(doc), r.path) != r.value) {
      return make_error(dotted(r.path) + ": the value could not be replaced in place", EINVAL);
    }
    return {};
  }
  return make_error("the manifest's layout could not be edited", EINVAL);
}

Status add_items(std::vector<Line>& doc, const std::vector<std::string>& path, const std::vector<AddedItem>& items) {
  if (items.empty()) return {};
  // Each rewrite of a flow collection removes one level of flow style: a handful suffices.
  for (int i = 0; i < 16; ++i) {
    auto done = step(doc, path, items);
    if (!done) return done.error();
    if (*done) return {};
  }
  return make_error("the manifest's layout could not be edited", EINVAL);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

}  // namespace

std::string yaml_scalar(const std::string& value) {
  const bool plain = !value.empty() && value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                               "0123456789/._-+@=~") == std::string::npos &&
                     value[0] != '-' && value[0] != '@' && value[0] != '~' && value != "null" && value != "true" &&
                     value != "false";
  if (plain) return value;
  std::string out = "\"";
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      (void)std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string unified_diff(const std::vector<std::string>& old_lines, const std::vector<std::string>& new_lines,
                         const std::vector<int>& old_index, const std::string& label) {
  // The edit as a sequence of operations: ' ' kept, '-' removed, '+' added (old numbering kept).
  struct Op {
    char kind;
    size_t old_no, new_no;  // 0-based positions before this line in each file
    std::string text;
  };
  std::vector<Op> ops;
  size_t o = 0;
  std::vector<Op> run_del, run_add;
  auto flush = [&] {
    ops.insert(ops.end(), run_del.begin(), run_del.end());
    ops.insert(ops.end(), run_add.begin(), run_add.end());
    run_del.clear();
    run_add.clear();
  };
  for (size_t n = 0; n < new_lines.size(); ++n) {
    if (old_index[n] < 0) {
      run_add.push_back({'+', o, n, new_lines[n]});
      continue;
    }
    const auto want = static_cast<size_t>(old_index[n]);
    while (o < want && o < old_lines.size()) {
      run_del.push_back({'-', o, n, old_lines[o]});
      ++o;
    }
    flush();
    ops.push_back({' ', o, n, new_lines[n]});
    ++o;
  }
  while (o < old_lines.size()) {
    run_del.push_back({'-', o, new_lines.size(), old_lines[o]});
    ++o;
  }
  flush();
  std::string out;
  constexpr size_t kContext = 3;
  size_t i = 0;
  while (i < ops.size()) {
    if (ops[i].kind == ' ') {
      ++i;
      continue;
    }
    // A hunk: from kContext lines before this change to kContext after the last change
    // that is at most 2*kContext kept lines further.
    size_t begin = i >= kContext ? i - kContext : 0;
    while (begin < i && ops[begin].kind != ' ') ++begin;
    size_t end = i;
    size_t kept = 0;
    for (size_t j = i; j < ops.size(); ++j) {
      if (ops[j].kind == ' ') {
        if (++kept > 2 * kContext) break;
      } else {
        kept = 0;
        end = j;
      }
    }
    const size_t stop = std::min(ops.size(), end + 1 + kContext);
    size_t old_count = 0, new_count = 0;
    for (size_t j = begin; j < stop; ++j) {
      if (ops[j].kind != '+') ++old_count;
      if (ops[j].kind != '-') ++new_count;
    }
    const size_t old_start = ops[begin].old_no + (old_count > 0 ? 1 : 0);
    const size_t new_start = ops[begin].new_no + (new_count > 0 ? 1 : 0);
    if (out.empty()) out = "--- a/" + label + "\n+++ b/" + label + "\n";
    out += "@@ -" + std::to_string(old_start) + "," + std::to_string(old_count) + " +" + std::to_string(new_start) +
           "," + std::to_string(new_count) + " @@\n";
    for (size_t j = begin; j < stop; ++j) out += std::string(1, ops[j].kind) + ops[j].text + "\n";
    i = stop;
  }
  return out;
}

Result<ManifestEdit> edit_manifest(const std::string& text, const ManifestAdditions& add, const std::string& label) {
  const auto old_lines = split_lines(text);
  std::vector<Line> doc;
  for (size_t i = 0; i < old_lines.size(); ++i) doc.push_back({old_lines[i], static_cast<int>(i)});
  for (const auto& r : add.values) {
    if (auto s = replace_value(doc, r); !s) return s.error();
  }
  if (auto s = add_items(doc, {"capabilities", "egress"}, add.egress); !s) return s.error();
  if (auto s = add_items(doc, {"capabilities", "fs", "read"}, add.fs_read); !s) return s.error();
  if (auto s = add_items(doc, {"capabilities", "fs", "write"}, add.fs_write); !s) return s.error();
  ManifestEdit out;
  out.text = join(doc);
  std::vector<std::string> new_lines;
  std::vector<int> index;
  for (const auto& l : doc) {
    new_lines.push_back(l.text);
    index.push_back(l.old);
  }
  out.diff = unified_diff(old_lines, new_lines, index, label);
  auto check = parse_manifest(out.text, label);
  if (!check.manifest) {
    // Raw and on one line: an Error is escaped where it is printed (E7), once.
    std::string why = "the edited manifest is not valid:";
    for (size_t i = 0; i < check.errors.size(); ++i) why += (i == 0 ? " " : "; ") + raw_text(check.errors[i]);
    return make_error(why, EINVAL);
  }
  return out;
}

}  // namespace soyaos::manifest
