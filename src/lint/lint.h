// `soyaos pack lint` (SPEC.md T2): coherence between a manifest's capabilities, its tools
// and its examples. A pure function over a validated Manifest: no I/O, no printing.
// Every rule has a stable id and is described once, in kRules (rules.cc): the single
// source for `--explain`, the SARIF rule list and docs/lint-rules.md.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::lint {

enum class Severity { error, warning };
// "error" / "warning" (json, sarif).
const char* to_string(Severity);

struct LintOptions {
  bool strict = false;  // --strict: the least-privilege rules (SP11x) too
};

// A secondary location of a finding (the other half of a mismatch pair).
struct Related {
  std::string key_path;
  manifest::Mark mark;
};

struct Finding {
  std::string rule_id;   // "SP102"
  Severity severity = Severity::error;
  std::string message;   // the text-mode line after the severity column
  std::string key_path;  // the manifest node the finding is about ("capabilities.egress[0]")
  manifest::Mark mark;   // its position ({0,0} when unknown)
  std::vector<Related> related;
};

// Runs every rule (the strict ones only with options.strict). Findings are ordered by
// position in the file (line, column), then rule id: stable across runs.
// Near-linear in the size of the manifest: entries are indexed in hash maps, tool
// targets are looked up by (host, port, protocol), wildcard entries by each suffix of the
// host, fs prefixes by walking the ancestors of a tool's path; every candidate is then
// confirmed with manifest::host_matches / path_covers, the functions enforcement uses.
std::vector<Finding> lint(const manifest::Manifest& m, const LintOptions& options = {});

// The tier a manifest needs, by the rule of SP114 / SP115 (one rule set: lint reports it,
// `pack learn` proposes it): unrestricted with egress "*"; else side-effect with a tool
// that has a side effect (M3) or an fs.write path outside /workdir/out that is not private
// scratch; else read-only. `because` names what decided it ("tools.notify (builtin.http_post)
// has a side effect", "capabilities.fs.write[1] `/workdir/cache` is outside /workdir/out and
// not private scratch", "no tool has a side effect and ..." for read-only).
struct TierNeed {
  manifest::Tier tier = manifest::Tier::read_only;
  std::string because;
};
TierNeed needed_tier(const manifest::Manifest& m);

// What `soyaos pack learn` proposes for determinism_tier once it has learned `learned`
// (the manifest with the learned entries added, its tier still the declared one):
//   - narrower when needed_tier() is narrower than the declared tier (SP114's finding);
//   - wider only when lint refuses `learned` at the declared tier (an SP107 / SP108 error),
//     to the tier needed_tier() names;
//   - nullopt otherwise (the declared tier is the needed one, or it is stricter than needed
//     without lint refusing it: never loosened on a guess).
struct TierChange {
  manifest::Tier from = manifest::Tier::read_only, to = manifest::Tier::read_only;
  std::string rule;  // "SP114", "SP107", "SP108"
  std::string why;   // one line: the rule's name and what decided it
};
std::optional<TierChange> propose_tier(const manifest::Manifest& learned);

// SP121's heuristics (docs/lint-rules.md): why `text` looks like a credential ("an
// Anthropic API key (sk-ant-...)", "a high-entropy token ..."), or nullopt. Known key
// prefixes at a word boundary with a long enough tail, PEM private keys, JSON Web Tokens,
// URLs with a password, and tokens of at least kCredentialMinLength characters of
// [A-Za-z0-9+/_=-] with letters and digits, at least kCredentialMinEntropy bits of Shannon
// entropy per character and at least kCredentialMinClassChanges of their adjacent
// letter/digit pairs changing class (upper, lower, digit).
inline constexpr std::size_t kCredentialMinLength = 20;
inline constexpr double kCredentialMinEntropy = 4.0;
inline constexpr double kCredentialMinClassChanges = 0.3;
std::optional<std::string> looks_like_credential(std::string_view text);

// ---- the rule table --------------------------------------------------------------------

struct RuleInfo {
  std::string_view id;       // "SP102"
  std::string_view name;     // "egress-mismatch"
  Severity severity;         // severity of its findings
  bool strict;               // only with --strict
  std::string_view summary;  // one line
  std::string_view why;      // why it matters
  std::string_view fix;      // how to fix it
  std::string_view example;  // a manifest fragment that triggers it and the finding
};

// Every rule, in id order. A rule's index in this span is its SARIF ruleIndex.
std::span<const RuleInfo> rules();
// nullptr when `id` names no rule (ids are matched case-insensitively: "sp102" works).
const RuleInfo* find_rule(std::string_view id);
// Position of a rule in rules(); -1 when unknown.
int rule_index(std::string_view id);

}  // namespace soyaos::lint
