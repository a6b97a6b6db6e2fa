// `soyaos pack lint [DIR] [--strict] [--format text|json|sarif] [--explain ID]` (SPEC.md T2).
// Exit 0 no errors, 1 errors (lint errors or an invalid manifest), 2 usage error.
// Text goes to stdout (findings and summary); validation errors of an invalid manifest go
// to stderr as `pack validate` prints them; json/sarif documents always go to stdout, with
// validation errors as SP100 findings so that CI always gets a well-formed document.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "lint/lint.h"
#include "lint/report.h"
#include "manifest/manifest.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

struct LintArgs {
  std::string dir = ".";
  bool strict = false;
  std::string format = "text";
  std::string explain;
};

// soyapack.yaml's path relative to the current directory (GitHub code scanning wants
// paths relative to the repository root, where CI runs); absolute when outside it.
std::string artifact_uri(const fs::path& dir) {
  std::error_code ec;
  fs::path file = fs::weakly_canonical(fs::absolute(dir / "soyapack.yaml", ec), ec);
  fs::path cwd = fs::current_path(ec);
  fs::path rel = file.lexically_relative(cwd);
  if (!ec && !rel.empty() && *rel.begin() != "..") return rel.generic_string();
  return "file://" + file.generic_string();
}

// False when the output could not be written (closed pipe, full disk).
bool print(const std::string& s, std::FILE* f) {
  return std::fwrite(s.data(), 1, s.size(), f) == s.size() && std::fflush(f) == 0;
}

int write_failed() {
  std::fprintf(stderr, "soyaos pack lint: cannot write the report to stdout\n");
  return 1;
}

int run_lint(const LintArgs& a, const CliContext& ctx) {
  if (!a.explain.empty()) {
    const lint::RuleInfo* rule = lint::find_rule(a.explain);
    if (rule == nullptr) {
      auto all = lint::rules();
      print_error("pack lint", "unknown rule id '" + a.explain + "' (rules are " + std::string(all.front().id) + " to " +
                                   std::string(all.back().id) + "; see docs/lint-rules.md)");
      return kExitUsage;
    }
    return print(lint::explain(*rule), stdout) ? 0 : write_failed();
  }

  manifest::LoadResult loaded = manifest::load_pack(a.dir);
  std::vector<lint::Finding> findings;
  if (!loaded.manifest) {
    for (const auto& d : loaded.errors) std::fprintf(stderr, "%s\n", d.format().c_str());
    if (a.format == "text") return 1;
    findings = lint::findings_from_diagnostics(loaded.errors);
  } else {
    findings = lint::lint(*loaded.manifest, lint::LintOptions{.strict = a.strict});
  }

  std::string report = a.format == "json"    ? lint::format_json(findings)
                       : a.format == "sarif" ? lint::format_sarif(findings, artifact_uri(a.dir))
                                             : lint::format_text(findings, ctx.color);
  if (!print(report, stdout)) return write_failed();
  return lint::count(findings).errors > 0 ? 1 : 0;
}

}  // namespace

void register_pack_lint(Command pack, CliContext& ctx) {
  auto args = std::make_shared<LintArgs>();
  auto cmd = pack.add_subcommand(
      "lint", "Check that a pack's capabilities, tools and examples agree (rules SP1xx; --explain ID)");
  cmd.add_option("DIR", args->dir, "Pack directory (default: the current directory)");
  cmd.add_flag("--strict", args->strict,
               "Also apply the least-privilege rules: wildcard and IP hosts, untested capabilities, tier");
  cmd.add_option("--format", args->format, "Output format: text (default), json or sarif (SARIF 2.1.0)")
      .check_member({"text", "json", "sarif"});
  cmd.add_option("--explain", args->explain, "Explain a rule (why it matters, how to fix it) and exit")
      .option_text("ID");
  cmd.callback([args, &ctx] { ctx.exit_code = run_lint(*args, ctx); });
}

}  // namespace soyaos::cli
