// libFuzzer target for the textual manifest editor (`pack learn --write`, manifest_edit.h).
// Input: a soyapack.yaml text, optionally followed by a NUL and the added items, one per
// line ("e HOST PORT PROTOCOL", "r PATH", "w PATH", "v KEY.PATH VALUE": a value replaced in
// place; none given: one of each, the tier replaced). Whatever the text, edit_manifest must
// not crash, throw or hang, and when it succeeds:
//   - the result parses as a manifest holding every added entry and every original one;
//   - every replaced value reads back as given;
//   - every full-line comment of the original is still there, in the same order;
//   - the top-level keys keep their order (a missing `capabilities` may only be appended);
//   - the diff only adds lines, except the lines of flow collections rewritten in block style
//     and at most one line per replaced value.
// Invariant violations trap.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "manifest/manifest.h"
#include "manifest/manifest_edit.h"
#include "manifest/rules.h"
#include "manifest/yaml_tree.h"

namespace {

using namespace soyaos::manifest;

constexpr size_t kMaxItems = 8;  // bounds the work per input (each item is one edit step)

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line(text.substr(start, nl - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
    start = nl + 1;
  }
  return out;
}

bool full_line_comment(const std::string& line) {
  const size_t i = line.find_first_not_of(' ');
  return i != std::string::npos && line[i] == '#';
}

std::vector<std::string> top_keys(std::string_view text) {
  std::vector<std::string> keys;
  auto parsed = detail::parse_yaml(text, "fuzz/soyapack.yaml");
  if (!parsed.root || parsed.root->kind != detail::YNode::Kind::mapping) return keys;
  for (size_t i = 0; i < parsed.root->map_size(); ++i) keys.push_back(parsed.root->key(i).value);
  return keys;
}

struct Wanted {
  std::vector<EgressEntry> egress;
  std::vector<std::string> read, write;
  std::vector<ReplacedValue> values;
};

std::vector<std::string> split_path(const std::string& dotted) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= dotted.size()) {
    size_t dot = dotted.find('.', start);
    if (dot == std::string::npos) dot = dotted.size();
    out.push_back(dotted.substr(start, dot - start));
    start = dot + 1;
  }
  return out;
}

// Whether the scalar at `r.path` of `text`, parsed again, is `r.value`.
bool reads_back(std::string_view text, const ReplacedValue& r) {
  auto parsed = detail::parse_yaml(text, "fuzz/soyapack.yaml");
  if (!parsed.root) return false;
  const detail::YNode* n = &*parsed.root;
  for (const auto& k : r.path) {
    if (n->kind != detail::YNode::Kind::mapping) return false;
    const detail::YNode* next = nullptr;
    for (size_t i = 0; i < n->map_size() && next == nullptr; ++i) {
      if (n->key(i).kind == detail::YNode::Kind::scalar && n->key(i).value == k) next = &n->val(i);
    }
    if (next == nullptr) return false;
    n = next;
  }
  return n->kind == detail::YNode::Kind::scalar && n->value == r.value;
}

// The items to add, from the text after the NUL.
ManifestAdditions additions(std::string_view spec, Wanted& want) {
  ManifestAdditions add;
  if (spec.empty()) spec = "e a.test 443 https\nr /srv/data\nw /tmp/x\nv capabilities.determinism_tier side-effect";
  size_t n = 0;
  for (const auto& line : lines_of(spec)) {
    if (n++ == kMaxItems || line.size() < 3 || line[1] != ' ') continue;
    const std::string rest = line.substr(2);
    if (line[0] == 'e') {
      const size_t a = rest.find(' ');
      const size_t b = a == std::string::npos ? a : rest.find(' ', a + 1);
      if (b == std::string::npos) continue;
      EgressEntry e;
      const std::string host = rest.substr(0, a);
      // The manifest holds the host as the parser normalises it (A.Test -> a.test, [::1] -> ::1):
      // that is the form the edited manifest must contain. A host it refuses fails the edit.
      const auto normal = detail::normalise_host(host, /*allow_wildcard=*/true);
      const std::string port = rest.substr(a + 1, b - a - 1);
      auto proto = protocol_from_string(rest.substr(b + 1));
      if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || !proto) {
        continue;
      }
      const unsigned long p = std::stoul(port);
      if (p == 0 || p > 65535) continue;
      e.port = static_cast<uint16_t>(p);
      e.protocol = *proto;
      e.host = normal ? *normal : host;
      add.egress.push_back({"{host: " + yaml_scalar(host) + ", port: " + port + ", protocol: " +
                                to_string(e.protocol) + "}",
                            "fuzz: " + rest});
      want.egress.push_back(e);
    } else if (line[0] == 'v') {
      const size_t sp = rest.find(' ');
      if (sp == std::string::npos) continue;
      ReplacedValue r{split_path(rest.substr(0, sp)), rest.substr(sp + 1), "fuzz: " + rest};
      add.values.push_back(r);
      want.values.push_back(r);
    } else if (line[0] == 'r' || line[0] == 'w') {
      (line[0] == 'r' ? add.fs_read : add.fs_write).push_back({yaml_scalar(rest), "fuzz: " + line});
      (line[0] == 'r' ? want.read : want.write).push_back(rest);
    }
  }
  return add;
}

bool has_path(const std::vector<FsPath>& list, const std::string& path) {
  for (const auto& f : list) {
    if (f.path == path) return true;
  }
  return false;
}

bool has_egress(const std::vector<EgressEntry>& list, const EgressEntry& e) {
  for (const auto& d : list) {
    if (d.host == e.host && d.port == e.port && d.protocol == e.protocol) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view spec = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  Wanted want;
  const ManifestAdditions add = additions(spec, want);
  auto edit = edit_manifest(std::string(text), add, "soyapack.yaml");
  if (!edit) {
    if (edit.error().describe().empty()) __builtin_trap();
    return 0;
  }

  // The result parses, with the added entries.
  const LoadResult result = parse_manifest(edit->text, "fuzz/soyapack.yaml");
  if (!result.manifest) __builtin_trap();
  const Capabilities& caps = result.manifest->capabilities;
  for (const auto& e : want.egress) {
    if (!caps.egress_any && !has_egress(caps.egress, e)) __builtin_trap();
  }
  for (const auto& p : want.read) {
    if (!has_path(caps.fs_read, p)) __builtin_trap();
  }
  for (const auto& p : want.write) {
    if (!has_path(caps.fs_write, p)) __builtin_trap();
  }
  for (const auto& r : want.values) {
    if (!reads_back(edit->text, r)) __builtin_trap();
  }
  // ... and the original ones, when the original was a manifest.
  const LoadResult original = parse_manifest(text, "fuzz/soyapack.yaml");
  if (original.manifest) {
    const Manifest& o = *original.manifest;
    if (o.name != result.manifest->name || o.version != result.manifest->version) __builtin_trap();
    for (const auto& f : o.capabilities.fs_read) {
      if (!has_path(caps.fs_read, f.path)) __builtin_trap();
    }
    for (const auto& f : o.capabilities.fs_write) {
      if (!has_path(caps.fs_write, f.path)) __builtin_trap();
    }
    for (const auto& e : o.capabilities.egress) {
      if (!has_egress(caps.egress, e)) __builtin_trap();
    }
  }

  // Comments kept, in order.
  const auto old_lines = lines_of(text);
  const auto new_lines = lines_of(edit->text);
  size_t at = 0;
  for (const auto& line : old_lines) {
    if (!full_line_comment(line)) continue;
    while (at < new_lines.size() && new_lines[at] != line) ++at;
    if (at == new_lines.size()) __builtin_trap();
    ++at;
  }

  // Key order kept; `capabilities` may only be appended.
  auto before = top_keys(text);
  auto after = top_keys(edit->text);
  if (after.size() == before.size() + 1 && after.back() == "capabilities") after.pop_back();
  if (before != after) __builtin_trap();

  // The diff removes only lines that held a flow collection (`[` or `{`), and one line per
  // replaced value.
  size_t removed = 0;
  for (const auto& line : lines_of(edit->diff)) {
    if (line.size() >= 1 && line[0] == '-' && line.rfind("--- ", 0) != 0 &&
        line.find_first_of("[{") == std::string::npos) {
      ++removed;
    }
  }
  if (removed > add.values.size()) __builtin_trap();
  return 0;
}
