// A textual edit of soyapack.yaml (`soyaos pack learn --write`, SPEC.md C13): entries are
// added to capabilities.egress, capabilities.fs.read and capabilities.fs.write, each on a line
// of its own with a comment, and scalar values are replaced in place (the tier), while every other byte of the file — comments, key order,
// quoting, blank lines — stays as the author wrote it. It is not a re-dump of the YAML.
//
// A list written in flow style on one line (`read: [/workdir]`, `egress: []`,
// `fs: {read: [/workdir]}`) is rewritten in block style (the same items, one per line) so
// that the new items can carry their comments; a missing `fs`, `read`, `write` or `egress`
// key is added at the end of its mapping. The result is parsed again and must hold the
// new entries and values; otherwise the edit fails (the caller prints the entries instead).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace soyaos::manifest {

struct AddedItem {
  std::string yaml;     // the item as flow YAML: `/tmp/cache` or `{host: a.test, port: 443, protocol: https}`
  std::string comment;  // one line, shown after `# ` (control characters are escaped)
};

// A scalar value replaced in place (`pack learn` proposing `determinism_tier`): the line keeps
// its indentation and key; only the value changes, and — when `comment` is given — the line's
// own trailing comment, which was about the old value, gives way to it (the diff shows the
// old line). Every other line, comments included, stays. A flow mapping on the way is
// rewritten in block style first, as for additions.
struct ReplacedValue {
  std::vector<std::string> path;  // mapping keys from the root: {"capabilities", "determinism_tier"}
  std::string value;              // the new value (written with yaml_scalar)
  std::string comment;            // one line, shown after `# ` (escaped); empty: the line's comment stays
};

struct ManifestAdditions {
  std::vector<AddedItem> egress, fs_read, fs_write;
  std::vector<ReplacedValue> values;
  [[nodiscard]] bool empty() const { return egress.empty() && fs_read.empty() && fs_write.empty() && values.empty(); }
};

struct ManifestEdit {
  std::string text;  // the edited file
  std::string diff;  // unified diff (3 lines of context) from the original to `text`
};

// `label` names the file in the diff's header (`--- a/LABEL`, `+++ b/LABEL`).
Result<ManifestEdit> edit_manifest(const std::string& text, const ManifestAdditions& add, const std::string& label);

// A path as a YAML scalar: plain when that is unambiguous, else double-quoted (JSON escapes).
std::string yaml_scalar(const std::string& value);

// A unified diff of two texts, line by line (old lines kept in order; `old_index[i]` is the
// original line of new line i, or -1 for an added one).
std::string unified_diff(const std::vector<std::string>& old_lines, const std::vector<std::string>& new_lines,
                         const std::vector<int>& old_index, const std::string& label);

}  // namespace soyaos::manifest
