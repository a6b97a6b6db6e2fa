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
