// libFuzzer target for the `.soyaignore` parser and matcher (common/ignore.h). The input
// is a whole `.soyaignore`; its lines, made into relative paths, are matched against it.
// Invariants checked (violations trap): an error names the line and adds nothing; matching
// is deterministic; a final `*` excludes every path and a final `!*` re-includes every
// path (the last match wins); matching time stays linear (libFuzzer's -timeout catches a
// backtracking blow-up).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ignore.h"

namespace {

// A line as a valid relative path: no empty component, no leading or trailing '/'.
std::string as_path(std::string_view line) {
  std::string out;
  for (char c : line) {
    if (c == '/' && (out.empty() || out.back() == '/')) continue;
    if (c == '\0' || c == '\n') continue;
    out += c;
  }
  while (!out.empty() && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using soyaos::IgnoreRules;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  IgnoreRules rules;
  const auto status = rules.add(text, "fuzz");
  if (!status) {
    if (status.error().message.rfind("fuzz:", 0) != 0 || rules.size() != 0) __builtin_trap();
    return 0;
  }
  std::vector<std::string> paths;
  for (size_t start = 0; start < text.size() && paths.size() < 16;) {
    const size_t nl = text.find('\n', start);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    if (std::string p = as_path(text.substr(start, end - start)); !p.empty() && p.size() <= 4096) paths.push_back(p);
    start = end + 1;
  }
  IgnoreRules all = rules, none = rules;
  if (!all.add("*\n", "fuzz") || !none.add("!*\n", "fuzz")) __builtin_trap();
  for (const auto& p : paths) {
    for (const bool dir : {false, true}) {
      if (rules.excluded(p, dir) != rules.excluded(p, dir)) __builtin_trap();
      if (!all.excluded(p, dir) || none.excluded(p, dir)) __builtin_trap();
    }
  }
  return 0;
}
