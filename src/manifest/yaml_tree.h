// A small, bounded YAML document tree built from yaml-cpp's event API (internal to the
// manifest stage). Unlike YAML::Load it refuses anchors, aliases and tags, bounds nesting
// depth and node count before yaml-cpp recurses further, keeps every key (so duplicates
// can be detected) and records whether a scalar was quoted.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::manifest::detail {

struct YNode {
  enum class Kind { null, scalar, sequence, mapping };
  Kind kind = Kind::null;
  bool quoted = false;       // scalar written quoted (or with the "!" tag): always a string
  std::string value;         // scalar text
  Mark mark;                 // 1-based
  // sequence: the items; mapping: keys and values alternating (key0, value0, key1, ...).
  std::vector<YNode> items;

  [[nodiscard]] std::size_t map_size() const { return items.size() / 2; }
  [[nodiscard]] const YNode& key(std::size_t i) const { return items[2 * i]; }
  [[nodiscard]] const YNode& val(std::size_t i) const { return items[2 * i + 1]; }
};

inline constexpr int kMaxDepth = 64;           // nested mappings/sequences
inline constexpr std::size_t kMaxNodes = 262144;
// How far yaml-cpp may read past the last node it reported: bounds the scanner's token
// queue, and so the longest single scalar or unbroken flow collection.
inline constexpr std::size_t kMaxLookahead = std::size_t{64} * 1024;

struct YamlParse {
  std::optional<YNode> root;         // set when the text is one well-formed document
  std::vector<Diagnostic> errors;
};

// Byte-level checks (NUL, control characters, UTF-8), then the event parse.
YamlParse parse_yaml(std::string_view text, const std::string& file);

// Mark of byte offset `pos` in `text` (1-based line and column, column in characters).
Mark mark_at(std::string_view text, std::size_t pos);

}  // namespace soyaos::manifest::detail
