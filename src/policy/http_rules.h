// HTTP rules (SPEC.md M8, C11): the path normalisation every intercepted request goes
// through before it is matched, and the method + path matching against an egress entry's
// `http:` list. Pure functions (no I/O), bounded by the input's size; the gateway forwards the
// normalised path, so what was matched is what the upstream receives. docs/secrets.md ("HTTP
// rules") is the user's description of the same choices.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::policy {

struct NormalisedPath {
  std::string path;    // ok: the normalised path ("/v1/models"), never with "//", "/./" or "/../"
  std::string reason;  // refused: why ("the path escapes `/`", "an encoded `/` (%2F)", ...)
  [[nodiscard]] bool ok() const { return reason.empty(); }
};

// Normalises an origin-form path (the request target up to its `?`, query not included):
//   - percent-escapes of unreserved characters (ALPHA DIGIT - . _ ~) are decoded, other
//     escapes are kept with upper-case hex (`%2a` -> `%2A`);
//   - `.` segments are dropped and `..` segments remove the one before (also when spelled
//     `%2e`, `.%2E`, ...); `//` (empty segments) collapse to `/`; a trailing `/` is kept;
// and refuses: a path that does not start with `/`, a `..` above the root, an encoded `/`
// (`%2F`/`%2f`), an encoded NUL (`%00`), a backslash (raw or `%5C`), a malformed escape, a
// double-encoded escape (`%25` + two hex digits: `%252e` is `.` to a server that decodes
// twice), and a dot segment carrying `;` parameters, also once its escapes are decoded
// (`..;`, `..%3B`, `%2e%2e%3bx`: servers that strip parameters resolve them as `..`).
// Idempotent: normalising a normalised path returns it unchanged.
NormalisedPath normalise_http_path(std::string_view path);

// The request target split at its first `?` (a query never takes part in matching and never
// appears in events).
struct TargetParts {
  std::string_view path, query;  // query without the `?`
  bool has_query = false;
};
TargetParts split_target(std::string_view target);

// Why a rule's path pattern is not valid, or "" (M8: starts with `/`, normalised, `*` only as a
// whole segment, `**` only as the whole last segment). For manifest validation and the matcher.
std::string http_pattern_error(std::string_view pattern);

// Whether a normalised path matches a pattern: whole segments, `*` = exactly one non-empty
// segment, a trailing `/**` = any number of further segments (zero included: `/v1/**` covers
// `/v1` and `/v1/`). A trailing `/` is significant (docs/manifest.md): `/dir/` is not `/dir`.
bool http_path_matches(std::string_view pattern, std::string_view normalised_path);

struct HttpRuleMatch {
  bool allowed = false;
  std::string rule;    // allowed: the matching rule's key path; refused: the closest rule (one
                       // whose path matched but not its method) or the entry's key path
  std::string reason;  // refused: in words, for the 403 body and the violation
};

// The first rule whose method (`*` = any; otherwise exact, methods are case-sensitive) and
// path match. An empty rule list allows every request (M8). `entry_key` names the entry
// ("capabilities.egress[0]") when nothing came close.
HttpRuleMatch match_http_rules(std::string_view method, std::string_view normalised_path,
                               const std::vector<manifest::HttpRule>& rules, std::string_view entry_key);

}  // namespace soyaos::policy
