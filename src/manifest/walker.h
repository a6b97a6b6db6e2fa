// The schema walker shared by the manifest's parsers (parser.cc, parser_secrets.cc):
// a checked view of YAML mappings that reports unknown, duplicate and mistyped keys as
// Diagnostics with the node's line:column and key path. Internal to the manifest stage.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "manifest/manifest.h"
#include "manifest/yaml_tree.h"

namespace soyaos::manifest::detail {

using Kind = YNode::Kind;

inline const char* describe(const YNode& n) {
  switch (n.kind) {
    case Kind::null: return "nothing (null)";
    case Kind::scalar: return "a scalar";
    case Kind::sequence: return "a list";
    case Kind::mapping: return "a mapping";
  }
  return "?";
}

inline std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 80)) out += c;
  if (s.size() > 80) out += "...";
  return out + "\"";
}

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  if (a.size() > 64 || b.size() > 64) return 99;
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

inline std::string join(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

inline std::string index(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

// A checked mapping: key -> value node, in file order.
struct Fields {
  const YNode* node = nullptr;
  std::string path;
  std::vector<std::pair<std::string, const YNode*>> entries;

  [[nodiscard]] const YNode* get(std::string_view key) const {
    for (const auto& [k, v] : entries) {
      if (k == key) return v;
    }
    return nullptr;
  }
};

class Walker {
 public:
  Walker(const std::string& file, std::vector<Diagnostic>& errors) : file_(file), errors_(errors) {}

  void error(const Mark& mark, std::string key_path, std::string message) {
    errors_.push_back(Diagnostic{file_, mark, std::move(key_path), std::move(message)});
  }
  void error(const YNode& n, std::string key_path, std::string message) {
    error(n.mark, std::move(key_path), std::move(message));
  }

  // Checks that `n` is a mapping with string keys, no duplicates and (when `allowed` is
  // non-empty) only allowed keys. Returns nullopt (after reporting) when not a mapping.
  std::optional<Fields> fields(const YNode& n, const std::string& path,
                               std::initializer_list<std::string_view> allowed, bool any_keys = false) {
    if (n.kind != Kind::mapping) {
      error(n, path, std::string("must be a mapping, got ") + describe(n));
      return std::nullopt;
    }
    Fields f{&n, path, {}};
    std::map<std::string, Mark> first_mark;  // every key seen, valid or not
    for (std::size_t i = 0; i < n.map_size(); ++i) {
      const YNode& k = n.key(i);
      if (k.kind != Kind::scalar) {
        error(k, path, std::string("keys must be plain strings, got ") + describe(k));
        continue;
      }
      const std::string key_path = join(path, k.value);
      if (const auto seen = first_mark.find(k.value); seen != first_mark.end()) {
        error(k, key_path,
              "duplicate key (first defined at " + std::to_string(seen->second.line) + ":" +
                  std::to_string(seen->second.column) + ")");
        continue;
      }
      first_mark.emplace(k.value, k.mark);
      if (!any_keys && std::find(allowed.begin(), allowed.end(), k.value) == allowed.end()) {
        std::string msg = "unknown key";
        std::string_view best;
        std::size_t best_d = 3;
        for (std::string_view a : allowed) {
          const std::size_t d = edit_distance(k.value, a);
          if (d < best_d) best_d = d, best = a;
        }
        if (best.empty()) {  // a truncated key: "proto" for "protocol"
          for (std::string_view a : allowed) {
            if (k.value.size() >= 3 && a.substr(0, k.value.size()) == k.value) best = a;
          }
        }
        if (!best.empty()) {
          msg += " (did you mean \"" + std::string(best) + "\"?)";
        } else {
          msg += " (allowed:";
          for (std::string_view a : allowed) msg += " " + std::string(a);
          msg += ")";
        }
        error(k, key_path, msg);
        continue;
      }
      f.entries.emplace_back(k.value, &n.val(i));
    }
    return f;
  }

  const YNode* required(const Fields& f, std::string_view key) {
    const YNode* v = f.get(key);
    if (v == nullptr) error(f.node->mark, join(f.path, key), "required key is missing");
    return v;
  }

  std::optional<std::string> string(const YNode& n, const std::string& path) {
    if (n.kind != Kind::scalar) {
      error(n, path, std::string("must be a string, got ") + describe(n));
      return std::nullopt;
    }
    return n.value;
  }

  std::optional<int64_t> integer(const YNode& n, const std::string& path, int64_t lo, int64_t hi) {
    const std::string msg = "must be an integer " + std::to_string(lo) + ".." + std::to_string(hi);
    if (n.kind != Kind::scalar || n.quoted) {
      error(n, path, msg);
      return std::nullopt;
    }
    std::string_view s = n.value;
    bool negative = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) negative = s[0] == '-', s.remove_prefix(1);
    if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      error(n, path, msg);
      return std::nullopt;
    }
    int64_t v = std::stoll(std::string(s));
    if (negative) v = -v;
    if (v < lo || v > hi) {
      error(n, path, msg);
      return std::nullopt;
    }
    return v;
  }

  std::optional<bool> boolean(const YNode& n, const std::string& path) {
    if (n.kind == Kind::scalar && !n.quoted) {
      if (n.value == "true" || n.value == "True" || n.value == "TRUE") return true;
      if (n.value == "false" || n.value == "False" || n.value == "FALSE") return false;
    }
    error(n, path, "must be true or false");
    return std::nullopt;
  }

  // `marks`, when given, receives the mark of each string kept.
  std::vector<std::string> string_list(const YNode& n, const std::string& path, std::vector<Mark>* marks = nullptr) {
    std::vector<std::string> out;
    if (n.kind != Kind::sequence) {
      error(n, path, std::string("must be a list of strings, got ") + describe(n));
      return out;
    }
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      if (auto s = string(n.items[i], index(path, i))) {
        out.push_back(std::move(*s));
        if (marks != nullptr) marks->push_back(n.items[i].mark);
      }
    }
    return out;
  }

 private:
  const std::string& file_;
  std::vector<Diagnostic>& errors_;
};

}  // namespace soyaos::manifest::detail
