// `soyaos moon check` (docs/moon.md): checks the Moon's state under $SOYAOS_HOME —
// moon.yaml (SPEC.md C6a), moon.db (SQLite integrity and foreign keys), every blob of
// the registry's OCI layout against its digest, and the Scope record (E6: the hash chain,
// the signed checkpoints, the head file, the result cache against the record; the same
// audit as `scope verify`, cmd_scope_verify.cc). One line per finding on stdout, then
// `ok` or `N problems`; exit 0 when clean, 1 when anything is wrong.
//
// Also the loader every pack-running command uses for the operator's network policy.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "manifest/diagnostic_text.h"
#include "moon/live_runs.h"
#include "moon/config.h"
#include "moon/registry.h"
#include "moon/store.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

int check(const std::string& key_file) {
  auto home = moon::default_home();
  if (!home) {
    print_error("moon check", home.error());
    return 1;
  }
  std::vector<std::string> findings;
  std::string verified;

  const moon::MoonConfigLoad config = moon::load_moon_config(*home);
  for (const auto& d : config.errors) findings.push_back(manifest::raw_text(d));  // escaped when printed

  // Only an existing database is checked: opening one would create it, and a home with
  // no moon.db has no registry to verify.
  const fs::path db = *home / "moon.db";
  struct stat st {};
  if (::lstat(db.c_str(), &st) == 0) {
    auto registry = moon::Registry::open(*home);
    if (!registry) {
      // A database too damaged to open (the header, the schema page) lands here; the
      // message names the file and says what SQLite found.
      findings.push_back(registry.error().describe());
    } else {
      // Runs whose soyaos (or daemon) died get their run_incomplete now (E4), once each.
      auto reaped = moon::reap_dead_runs(*home, registry->store());
      if (!reaped) {
        findings.push_back("runs: " + reaped.error().describe());
      } else if (*reaped > 0) {
        std::fprintf(stderr, "soyaos moon check: %d dead run(s) marked run_incomplete\n", *reaped);
      }
      auto integrity = registry->store().check_integrity();
      if (!integrity) {
        findings.push_back(integrity.error().describe());
      } else {
        for (const auto& p : *integrity) findings.push_back(db.string() + ": " + p);
      }
      auto blobs = registry->verify_all();
      if (!blobs) {
        findings.push_back("registry: " + blobs.error().describe());
      } else {
        for (const auto& p : *blobs) findings.push_back("registry: " + p);
      }
      auto audit = audit_record_lines(*home, std::nullopt, key_file, findings);
      if (!audit) {
        findings.push_back("scope: " + audit.error().describe());
      } else {
        verified = *audit;
      }
    }
  } else if (errno != ENOENT) {
    findings.push_back(db.string() + ": cannot examine: " + std::string(std::strerror(errno)));
  }

  if (!print_findings(findings, verified)) return 1;
  return findings.empty() ? 0 : 1;
}

}  // namespace

bool load_operator_network(const fs::path& home, policy::OperatorNetwork& network, std::string* config_digest) {
  moon::MoonConfigLoad loaded = moon::load_moon_config(home);
  if (!loaded.config) {
    for (const auto& d : loaded.errors) std::fprintf(stderr, "%s\n", d.format().c_str());
    const std::string file = loaded.errors.empty() ? (home / "moon.yaml").string() : loaded.errors.front().file;
    print_error("", "moon configuration invalid: " + file);
    return false;
  }
  network = std::move(loaded.config->network);
  if (config_digest != nullptr) *config_digest = loaded.config->digest;
  return true;
}

void register_moon_commands(Command app, CliContext& ctx) {
  auto moon_cmd = app.add_subcommand("moon", "The Moon's state and configuration");
  moon_cmd.require_subcommand(1);
  auto cmd = moon_cmd.add_subcommand(
      "check",
      "Check moon.yaml, the moon.db database, every registry blob against its digest, and the Scope record "
      "(hash chain, signed checkpoints, cache entries against their runs)");
  auto key = std::make_shared<std::string>();
  cmd.add_option("--key", *key, "Verify checkpoints with this public key (PEM) instead of $SOYAOS_HOME/moon.pub");
  cmd.callback([key, &ctx] { ctx.exit_code = check(*key); });
  register_moon_serve_commands(moon_cmd, ctx);  // cmd_moon_serve.cc: serve, status
}

}  // namespace soyaos::cli
