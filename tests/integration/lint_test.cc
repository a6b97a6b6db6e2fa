// `soyaos pack lint` end to end (SPEC.md T2): the real binary on the golden fixture packs
// of tests/golden/lint/<case>/ (soyapack.yaml, optional `args` with extra arguments,
// expected.txt / expected.json / expected.sarif, and expected.stderr for invalid packs),
// compared byte for byte. The binary runs in the source root with the relative path of
// the case, so that diagnostics and SARIF uris are stable.
// Regenerate after an intended change: SOYAOS_UPDATE_GOLDEN=1 integration_tests --gtest_filter='*LintGolden*'
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

const char* const kCases = "tests/golden/lint";

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(source_path(kCases))) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> extra_args(const fs::path& dir) {
  std::vector<std::string> args;
  if (!fs::exists(dir / "args")) return args;
  std::istringstream in(read_file(dir / "args"));
  for (std::string a; in >> a;) args.push_back(a);
  return args;
}

bool updating() { return std::getenv("SOYAOS_UPDATE_GOLDEN") != nullptr; }

void compare_or_update(const fs::path& expected_file, const std::string& actual) {
  if (updating()) {
    std::ofstream(expected_file, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(fs::exists(expected_file)) << expected_file << " missing (run with SOYAOS_UPDATE_GOLDEN=1)";
  EXPECT_EQ(read_file(expected_file), actual) << "differs from " << expected_file;
}

class LintGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LintGolden, MatchesExpectedOutput) {
  const std::string rel = std::string(kCases) + "/" + GetParam();
  const fs::path dir = source_path(rel);
  const fs::path root = source_path(".");
  struct Format {
    const char* name;
    const char* file;
  };
  int exit_code = -1;
  for (const Format& f : {Format{"text", "expected.txt"}, Format{"json", "expected.json"},
                          Format{"sarif", "expected.sarif"}}) {
    std::vector<std::string> args = {"pack", "lint", rel, "--format", f.name};
    for (auto& a : extra_args(dir)) args.push_back(a);
    RunOutput r = run_soyaos(args, {{"NO_COLOR", "1"}}, root);
    SCOPED_TRACE(std::string(f.name));
    compare_or_update(dir / f.file, r.out);
    if (std::string(f.name) == "text") {
      // Validation errors of an invalid manifest; nothing else is printed on stderr.
      if (fs::exists(dir / "expected.stderr") || !r.err.empty()) compare_or_update(dir / "expected.stderr", r.err);
      exit_code = r.exit_code;
    } else {
      EXPECT_EQ(r.exit_code, exit_code) << "exit status differs between formats";
    }
    if (std::string(f.name) == "json") {
      auto doc = nlohmann::json::parse(r.out);
      EXPECT_EQ(r.exit_code, doc["errors"].get<int>() > 0 ? 1 : 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LintGolden, ::testing::ValuesIn(case_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// T2's seed example, spelled out here as well as in its golden file.
TEST(LintCli, SeedExampleByteForByte) {
  TempDir d;
  d.write("main.py", "print('hi')\n");
  d.write("soyapack.yaml",
          "soyapack: v0\nname: seed\nversion: 1.0.0\nagent:\n  runtime: python3\n  entrypoint: main.py\n"
          "tools:\n  fetch:\n    kind: builtin.http_get\n    url: https://api.anthropic.com/v1/messages\n"
          "capabilities:\n  egress:\n    - host: api.openai.com\n      port: 443\n      protocol: https\n"
          "  determinism_tier: read-only\n");
  auto r = run_soyaos({"pack", "lint", d.path().string()}, {{"NO_COLOR", "1"}});
  EXPECT_EQ(r.out,
            "err   capabilities.egress declares `api.openai.com:443` but tools.fetch uses `api.anthropic.com:443`\n"
            "1 error \u00b7 0 warnings\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.exit_code, 1);
}

TEST(LintCli, JsonCarriesRuleAndPosition) {
  TempDir d;
  d.write("main.py", "");
  d.write("soyapack.yaml",
          "soyapack: v0\nname: j\nversion: 1.0.0\nagent:\n  runtime: python3\n  entrypoint: main.py\n"
          "capabilities:\n  egress:\n    - host: api.example.com\n      port: 443\n      protocol: https\n"
          "  determinism_tier: read-only\n");
  auto r = run_soyaos({"pack", "lint", d.path().string(), "--format", "json"});
  EXPECT_EQ(r.exit_code, 0);  // warnings only
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["findings"].size(), 1u);
  const auto& f = doc["findings"][0];
  EXPECT_EQ(f["rule"], "SP105");
  EXPECT_EQ(f["severity"], "warning");
  EXPECT_EQ(f["key_path"], "capabilities.egress[0]");
  EXPECT_EQ(f["line"], 9);
  EXPECT_EQ(f["column"], 7);
  EXPECT_EQ(doc["errors"], 0);
  EXPECT_EQ(doc["warnings"], 1);
}

TEST(LintCli, DefaultsToCurrentDirectory) {
  auto r = run_soyaos({"pack", "lint"}, {{"NO_COLOR", "1"}}, source_path("tests/golden/lint/clean"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "0 errors \u00b7 0 warnings\n");
}

TEST(LintCli, ExplainKnownRule) {
  auto r = run_soyaos({"pack", "lint", "--explain", "SP102"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("SP102 egress-mismatch (error)\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("How to fix:"), std::string::npos);
  EXPECT_EQ(run_soyaos({"pack", "lint", "--explain", "sp110"}).exit_code, 0);
}

TEST(LintCli, ExplainUnknownRuleIsUsageError) {
  auto r = run_soyaos({"pack", "lint", "--explain", "SP999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("SP999"), std::string::npos);
}

TEST(LintCli, UsageErrors) {
  EXPECT_EQ(run_soyaos({"pack", "lint", source_path("tests/golden/lint/clean").string(), "--format", "xml"}).exit_code,
            2);
  EXPECT_EQ(run_soyaos({"pack", "lint", "--bogus"}).exit_code, 2);
}

TEST(LintCli, MissingDirectoryIsBadInputLikeValidate) {
  // Not a usage error: the same exit status and message as `pack validate` (T1).
  auto lint = run_soyaos({"pack", "lint", "/nonexistent/pack/dir"});
  auto validate = run_soyaos({"pack", "validate", "/nonexistent/pack/dir"});
  EXPECT_EQ(lint.exit_code, 1);
  EXPECT_EQ(validate.exit_code, 1);
  EXPECT_EQ(lint.err, validate.err);
}

TEST(LintCli, InvalidManifestPrintsValidationErrorsAndExits1) {
  TempDir d;
  d.write("soyapack.yaml", "soyapack: v0\nname: Bad Name\n");
  auto r = run_soyaos({"pack", "lint", d.path().string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("soyapack.yaml:"), std::string::npos) << r.err;
  auto v = run_soyaos({"pack", "validate", d.path().string()});
  EXPECT_EQ(r.err, v.err) << "lint prints the validation errors as validate does";
  auto j = run_soyaos({"pack", "lint", d.path().string(), "--format", "json"});
  EXPECT_EQ(j.exit_code, 1);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_GT(doc["errors"].get<int>(), 0);
  EXPECT_EQ(doc["findings"][0]["rule"], "SP100");
}

TEST(LintCli, StrictAddsFindings) {
  const std::string dir = source_path("tests/golden/lint/not-strict").string();
  EXPECT_EQ(run_soyaos({"pack", "lint", dir}).exit_code, 0);
  EXPECT_EQ(run_soyaos({"pack", "lint", dir, "--strict"}).exit_code, 1);
}

TEST(LintCli, SarifShapeForCodeScanning) {
  auto r = run_soyaos({"pack", "lint", "tests/golden/lint/seed-mismatch", "--format", "sarif"}, {},
                      source_path("."));
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["version"], "2.1.0");
  EXPECT_TRUE(doc.contains("$schema"));
  const auto& run = doc["runs"][0];
  const auto& driver = run["tool"]["driver"];
  EXPECT_EQ(driver["name"], "soyaos");
  const auto& res = run["results"][0];
  EXPECT_EQ(res["ruleId"], "SP102");
  const auto& rule = driver["rules"][res["ruleIndex"].get<std::size_t>()];
  EXPECT_EQ(rule["id"], "SP102");
  for (const char* k : {"name", "shortDescription", "fullDescription", "help", "defaultConfiguration"}) {
    EXPECT_TRUE(rule.contains(k)) << k;
  }
  EXPECT_EQ(res["level"], "error");
  const auto& loc = res["locations"][0]["physicalLocation"];
  EXPECT_EQ(loc["artifactLocation"]["uri"], "tests/golden/lint/seed-mismatch/soyapack.yaml");
  EXPECT_EQ(loc["region"]["startLine"], 14);
  EXPECT_EQ(loc["region"]["startColumn"], 7);
}

TEST(LintCli, HelpListsOptions) {
  auto r = run_soyaos({"pack", "lint", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* opt : {"--strict", "--format", "--explain"}) EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

}  // namespace
}  // namespace soyaos::testing
