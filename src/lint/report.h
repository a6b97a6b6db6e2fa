// Rendering lint findings: text (T2's exact form), json, SARIF 2.1.0, `--explain`, and the
// rules section of docs/lint-rules.md. Pure functions returning strings; the CLI prints.
#pragma once

#include <string>
#include <vector>

#include "lint/lint.h"
#include "manifest/manifest.h"

namespace soyaos::lint {

struct Counts {
  int errors = 0;
  int warnings = 0;
};
Counts count(const std::vector<Finding>& findings);

// "1 error · 0 warnings" (U+00B7 between, singular for exactly 1).
std::string summary_line(Counts counts);

// One line a finding, "err   MESSAGE" / "warn  MESSAGE" (severity in a 6-wide column),
// then the summary line. With `color`, the severity word is coloured (padding kept).
// Positions are not shown here (the line stays exactly T2's form); json and sarif carry
// them.
std::string format_text(const std::vector<Finding>& findings, bool color = false);

// {"findings":[{"rule","severity","message","key_path","line","column"}],"errors":N,"warnings":N}
// line/column are null when unknown. Pretty-printed, 2 spaces, trailing newline.
std::string format_json(const std::vector<Finding>& findings);

// SARIF 2.1.0 for GitHub code scanning. `artifact_uri` names soyapack.yaml, relative to
// the repository root (the current directory) when possible.
std::string format_sarif(const std::vector<Finding>& findings, const std::string& artifact_uri);

// Validation errors as findings of rule SP100 (for json and sarif output).
std::vector<Finding> findings_from_diagnostics(const std::vector<manifest::Diagnostic>& errors);

// `--explain ID`: the rule's id, name, severity, summary, why, how to fix, example.
std::string explain(const RuleInfo& rule);

// The rules section of docs/lint-rules.md, generated from the table.
std::string rules_markdown();

}  // namespace soyaos::lint
