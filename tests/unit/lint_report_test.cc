// Output formats of pack lint (SPEC.md T2) and the rule table as documentation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lint/report.h"

namespace soyaos::lint {
namespace {

Finding err(std::string msg, manifest::Mark m = {3, 5}) {
  return Finding{"SP102", Severity::error, std::move(msg), "capabilities.egress[0]", m, {}};
}
Finding warn(std::string msg) {
  return Finding{"SP105", Severity::warning, std::move(msg), "capabilities.egress[1]", {7, 7}, {}};
}

TEST(LintReport, SummaryPlurals) {
  EXPECT_EQ(summary_line({0, 0}), "0 errors \u00b7 0 warnings");
  EXPECT_EQ(summary_line({1, 0}), "1 error \u00b7 0 warnings");
  EXPECT_EQ(summary_line({2, 1}), "2 errors \u00b7 1 warning");
  EXPECT_EQ(summary_line({0, 12}), "0 errors \u00b7 12 warnings");
}

TEST(LintReport, TextSeedExampleByteForByte) {
  std::vector<Finding> f = {
      err("capabilities.egress declares `api.openai.com:443` but tools.fetch uses `api.anthropic.com:443`")};
  EXPECT_EQ(format_text(f),
            "err   capabilities.egress declares `api.openai.com:443` but tools.fetch uses `api.anthropic.com:443`\n"
            "1 error \xc2\xb7 0 warnings\n");
}

TEST(LintReport, TextSeverityColumnIsSixWide) {
  EXPECT_EQ(format_text({warn("w"), err("e")}), "warn  w\nerr   e\n1 error \u00b7 1 warning\n");
  EXPECT_EQ(format_text({}), "0 errors \u00b7 0 warnings\n");
}

TEST(LintReport, TextColourKeepsTheColumn) {
  std::string t = format_text({err("e"), warn("w")}, true);
  EXPECT_EQ(t, "\x1b[1;31merr\x1b[0m   e\n\x1b[1;33mwarn\x1b[0m  w\n1 error \u00b7 1 warning\n");
}

TEST(LintReport, JsonShape) {
  Finding nopos = warn("w");
  nopos.mark = {};
  auto doc = nlohmann::json::parse(format_json({err("e"), nopos}));
  ASSERT_EQ(doc["findings"].size(), 2u);
  const auto& f = doc["findings"][0];
  EXPECT_EQ(f["rule"], "SP102");
  EXPECT_EQ(f["severity"], "error");
  EXPECT_EQ(f["message"], "e");
  EXPECT_EQ(f["key_path"], "capabilities.egress[0]");
  EXPECT_EQ(f["line"], 3);
  EXPECT_EQ(f["column"], 5);
  EXPECT_TRUE(doc["findings"][1]["line"].is_null());
  EXPECT_EQ(doc["errors"], 1);
  EXPECT_EQ(doc["warnings"], 1);
}

TEST(LintReport, SarifShape) {
  Finding pair = err("pair");
  pair.related.push_back(Related{"tools.fetch.url", {12, 10}});
  auto doc = nlohmann::json::parse(format_sarif({pair, warn("w")}, "packs/a/soyapack.yaml"));
  EXPECT_EQ(doc["version"], "2.1.0");
  EXPECT_EQ(doc["$schema"], "https://json.schemastore.org/sarif-2.1.0.json");
  ASSERT_EQ(doc["runs"].size(), 1u);
  const auto& driver = doc["runs"][0]["tool"]["driver"];
  EXPECT_EQ(driver["name"], "soyaos");
  ASSERT_EQ(driver["rules"].size(), rules().size());
  for (std::size_t i = 0; i < rules().size(); ++i) {
    const auto& r = driver["rules"][i];
    EXPECT_EQ(r["id"], std::string(rules()[i].id));
    EXPECT_EQ(r["shortDescription"]["text"], std::string(rules()[i].summary));
    EXPECT_TRUE(r["help"]["text"].is_string());
    std::string level = r["defaultConfiguration"]["level"];
    EXPECT_TRUE(level == "error" || level == "warning");
  }
  const auto& results = doc["runs"][0]["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["ruleId"], "SP102");
  EXPECT_EQ(results[0]["ruleIndex"], rule_index("SP102"));
  EXPECT_EQ(results[0]["level"], "error");
  EXPECT_EQ(results[1]["level"], "warning");
  EXPECT_EQ(results[0]["message"]["text"], "pair");
  const auto& pl = results[0]["locations"][0]["physicalLocation"];
  EXPECT_EQ(pl["artifactLocation"]["uri"], "packs/a/soyapack.yaml");
  EXPECT_EQ(pl["region"]["startLine"], 3);
  EXPECT_EQ(pl["region"]["startColumn"], 5);
  EXPECT_EQ(results[0]["relatedLocations"][0]["physicalLocation"]["region"]["startLine"], 12);
}

TEST(LintReport, ValidationErrorsBecomeSP100) {
  std::vector<manifest::Diagnostic> d = {{"f.yaml", {2, 7}, "name", "must match ^[a-z]..."}};
  auto f = findings_from_diagnostics(d);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule_id, "SP100");
  EXPECT_EQ(f[0].severity, Severity::error);
  EXPECT_EQ(f[0].message, "name: must match ^[a-z]...");
  EXPECT_EQ(f[0].mark, (manifest::Mark{2, 7}));
}

TEST(LintReport, ExplainNamesWhyAndFix) {
  std::string e = explain(*find_rule("SP110"));
  EXPECT_EQ(e.rfind("SP110 wildcard-host (error, --strict only)\n", 0), 0u) << e;
  EXPECT_NE(e.find("\nWhy:\n  "), std::string::npos);
  EXPECT_NE(e.find("\nHow to fix:\n  "), std::string::npos);
  EXPECT_NE(e.find("\nExample:\n  "), std::string::npos);
}

// docs/lint-rules.md's rules section is rendered from the rule table; regenerate with
// SOYAOS_UPDATE_GOLDEN=1 unit_tests --gtest_filter='LintDocs.*'.
TEST(LintDocs, RulesSectionIsGeneratedFromTheTable) {
  const std::string path = std::string(SOYAOS_SOURCE_DIR) + "/docs/lint-rules.md";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN RULES: generated from src/lint/rules.cc -->\n";
  const std::string end = "<!-- END RULES -->";
  auto b = doc.find(begin);
  auto e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  b += begin.size();
  std::string generated = rules_markdown();
  if (std::getenv("SOYAOS_UPDATE_GOLDEN") != nullptr) {
    doc.replace(b, e - b, generated);
    std::ofstream(path, std::ios::binary) << doc;
    return;
  }
  EXPECT_EQ(doc.substr(b, e - b), generated) << "run with SOYAOS_UPDATE_GOLDEN=1 to regenerate";
}

}  // namespace
}  // namespace soyaos::lint
