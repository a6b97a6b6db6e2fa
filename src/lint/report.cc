// Output formats of `soyaos pack lint` (SPEC.md T2). nlohmann::ordered_json keeps the
// keys in the documented order so that golden files stay readable and stable.
#include "lint/report.h"

#include <fmt/format.h>

#include <cctype>

#include <nlohmann/json.hpp>

namespace soyaos::lint {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kSarifSchema = "https://json.schemastore.org/sarif-2.1.0.json";

const char* sarif_level(Severity s) { return s == Severity::error ? "error" : "warning"; }

Json position(const manifest::Mark& m, Json& obj) {
  obj["line"] = m.line > 0 ? Json(m.line) : Json(nullptr);
  obj["column"] = m.line > 0 ? Json(m.column) : Json(nullptr);
  return obj;
}

Json physical_location(const std::string& uri, const manifest::Mark& m) {
  Json region = Json::object();
  region["startLine"] = m.line > 0 ? m.line : 1;
  if (m.line > 0 && m.column > 0) region["startColumn"] = m.column;
  Json loc = Json::object();
  loc["artifactLocation"] = Json{{"uri", uri}};
  loc["region"] = region;
  return loc;
}

// GitHub's anchor for a "### SP101" heading.
std::string anchor(std::string_view id) {
  std::string a(id);
  for (char& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return a;
}

std::string lines(std::string_view text, std::string_view indent) {
  std::string out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out += indent;
    out += text.substr(start, end - start);
    out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace

Counts count(const std::vector<Finding>& findings) {
  Counts c;
  for (const auto& f : findings) (f.severity == Severity::error ? c.errors : c.warnings)++;
  return c;
}

std::string summary_line(Counts c) {
  return fmt::format("{} error{} \u00b7 {} warning{}", c.errors, c.errors == 1 ? "" : "s", c.warnings,
                     c.warnings == 1 ? "" : "s");
}

std::string format_text(const std::vector<Finding>& findings, bool color) {
  std::string out;
  for (const auto& f : findings) {
    bool err = f.severity == Severity::error;
    const char* word = err ? "err" : "warn";
    if (color) {
      out += fmt::format("\x1b[{}m{}\x1b[0m{:<{}}", err ? "1;31" : "1;33", word, "", 6 - std::string_view(word).size());
    } else {
      out += fmt::format("{:<6}", word);
    }
    out += f.message;
    out += '\n';
  }
  out += summary_line(count(findings));
  out += '\n';
  return out;
}

std::string format_json(const std::vector<Finding>& findings) {
  Json list = Json::array();
  for (const auto& f : findings) {
    Json o = Json::object();
    o["rule"] = f.rule_id;
    o["severity"] = to_string(f.severity);
    o["message"] = f.message;
    o["key_path"] = f.key_path;
    position(f.mark, o);
    list.push_back(std::move(o));
  }
  Counts c = count(findings);
  Json doc = Json::object();
  doc["findings"] = std::move(list);
  doc["errors"] = c.errors;
  doc["warnings"] = c.warnings;
  return doc.dump(2) + "\n";
}

std::string format_sarif(const std::vector<Finding>& findings, const std::string& artifact_uri) {
  Json rule_list = Json::array();
  for (const RuleInfo& r : rules()) {
    Json rule = Json::object();
    rule["id"] = r.id;
    rule["name"] = r.name;
    rule["shortDescription"] = Json{{"text", r.summary}};
    rule["fullDescription"] = Json{{"text", fmt::format("{} {}", r.summary, r.why)}};
    rule["help"] = Json{{"text", fmt::format("{}\n\nWhy: {}\n\nHow to fix: {}\n\nExample:\n{}", r.summary, r.why,
                                             r.fix, r.example)}};
    rule["defaultConfiguration"] = Json{{"level", sarif_level(r.severity)}};
    rule["properties"] = Json{{"tags", Json::array({"security", r.strict ? "strict" : "default"})}};
    rule_list.push_back(std::move(rule));
  }
  Json results = Json::array();
  for (const auto& f : findings) {
    Json res = Json::object();
    res["ruleId"] = f.rule_id;
    res["ruleIndex"] = rule_index(f.rule_id);
    res["level"] = sarif_level(f.severity);
    res["message"] = Json{{"text", f.message}};
    Json loc = Json::object();
    loc["physicalLocation"] = physical_location(artifact_uri, f.mark);
    if (!f.key_path.empty()) {
      loc["logicalLocations"] = Json::array({Json{{"fullyQualifiedName", f.key_path}, {"kind", "member"}}});
    }
    res["locations"] = Json::array({std::move(loc)});
    if (!f.related.empty()) {
      Json rel = Json::array();
      int id = 1;
      for (const auto& r : f.related) {
        Json o = Json::object();
        o["id"] = id++;
        o["physicalLocation"] = physical_location(artifact_uri, r.mark);
        o["message"] = Json{{"text", r.key_path}};
        rel.push_back(std::move(o));
      }
      res["relatedLocations"] = std::move(rel);
    }
    results.push_back(std::move(res));
  }
  Json driver = Json::object();
  driver["name"] = "soyaos";
  driver["rules"] = std::move(rule_list);
  Json run = Json::object();
  run["tool"] = Json{{"driver", std::move(driver)}};
  run["results"] = std::move(results);
  Json doc = Json::object();
  doc["$schema"] = kSarifSchema;
  doc["version"] = "2.1.0";
  doc["runs"] = Json::array({std::move(run)});
  return doc.dump(2) + "\n";
}

std::vector<Finding> findings_from_diagnostics(const std::vector<manifest::Diagnostic>& errors) {
  std::vector<Finding> out;
  out.reserve(errors.size());
  for (const auto& d : errors) {
    std::string message = d.key_path.empty() ? d.message : d.key_path + ": " + d.message;
    out.push_back(Finding{"SP100", Severity::error, std::move(message), d.key_path, d.mark, {}});
  }
  return out;
}

std::string explain(const RuleInfo& r) {
  std::string out = fmt::format("{} {} ({}{})\n{}\n\nWhy:\n", r.id, r.name, r.severity == Severity::error ? "error" : "warning",
                                r.strict ? ", --strict only" : "", r.summary);
  out += lines(r.why, "  ");
  out += "\nHow to fix:\n";
  out += lines(r.fix, "  ");
  out += "\nExample:\n";
  out += lines(r.example, "  ");
  return out;
}

std::string rules_markdown() {
  std::string out = "| id | name | severity | mode | description |\n|---|---|---|---|---|\n";
  for (const RuleInfo& r : rules()) {
    out += fmt::format("| [{}](#{}) | `{}` | {} | {} | {} |\n", r.id, anchor(r.id), r.name,
                       r.severity == Severity::error ? "err" : "warn", r.strict ? "--strict" : "normal", r.summary);
  }
  for (const RuleInfo& r : rules()) {
    out += fmt::format("\n### {}\n\n`{}` — {}, {}.\n\n{}\n\n**Why.** {}\n\n**How to fix.** {}\n\n**Example.**\n\n```yaml\n{}\n```\n",
                       r.id, r.name, r.severity == Severity::error ? "err" : "warn",
                       r.strict ? "only with `--strict`" : "always", r.summary, r.why, r.fix, r.example);
  }
  return out;
}

}  // namespace soyaos::lint
