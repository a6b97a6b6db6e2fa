// Each command group registers its subcommands on the root app. A subcommand's callback
// stores its exit status in `CliContext::exit_code`; main() returns it.
#pragma once

#include "cli/cli_args.h"
#include "common/result.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace soyaos::policy {
struct OperatorNetwork;
}  // namespace soyaos::policy

namespace soyaos::moon {
class MoonBackend;
}  // namespace soyaos::moon

namespace soyaos::cli {

struct CliContext {
  int exit_code = 0;
  bool color = false;  // stdout is a TTY and NO_COLOR is unset (T5)
  // Everything after the first `--` on the command line, verbatim (T7): main() removes it
  // before parsing; `run` hands it to the agent.
  std::vector<std::string> passthrough;
  bool has_passthrough = false;
};

// Exit status for a command-line usage error (T1, T2).
inline constexpr int kExitUsage = 2;

void register_pack_commands(Command app, CliContext& ctx);   // cmd_pack.cc: the `pack` group
void register_pack_validate(Command pack, CliContext& ctx);  // cmd_pack_validate.cc
void register_pack_lint(Command pack, CliContext& ctx);      // cmd_pack_lint.cc
void register_pack_registry(Command pack, CliContext& ctx);  // cmd_pack_registry.cc: push, pull, list, inspect, unflag
void register_pack_test(Command pack, CliContext& ctx);      // cmd_pack_test.cc
void register_pack_init(Command pack, CliContext& ctx);      // cmd_pack_init.cc
void register_pack_sign(Command pack, CliContext& ctx);      // cmd_pack_sign.cc: sign, diff, approve
void register_pack_learn(Command pack, CliContext& ctx);     // cmd_pack_learn.cc
void register_scope_commands(Command app, CliContext& ctx);  // cmd_scope.cc: the `scope` group
void register_scope_verify(Command scope, CliContext& ctx);  // cmd_scope_verify.cc: scope verify
void register_run_command(Command app, CliContext& ctx);     // cmd_run.cc
void register_doctor_command(Command app, CliContext& ctx);  // cmd_doctor.cc
void register_cache_commands(Command app, CliContext& ctx);  // cmd_cache.cc: the `cache` group
void register_moon_serve_commands(Command moon, CliContext& ctx);  // cmd_moon_serve.cc: moon serve, moon status
void register_moon_commands(Command app, CliContext& ctx);   // cmd_moon.cc: the `moon` group (check)
void register_secret_commands(Command app, CliContext& ctx); // cmd_secret.cc: secret set|ls|rm

// For commands that run packs (cmd_moon.cc): loads the Moon configuration (moon.yaml,
// SPEC.md C6a) of `home` into `network`. On errors prints each diagnostic and
// "soyaos: moon configuration invalid: FILE" on stderr and returns false: the caller
// exits 125 (a run never starts under a policy the operator did not mean).
// The Scope record's audit (cmd_scope_verify.cc), shared by `scope verify` and `moon check`:
// appends one line per problem to `findings`; returns what was verified (for "ok").
Result<std::string> audit_record_lines(const std::filesystem::path& home, const std::optional<std::string>& run,
                                       const std::string& key_file, std::vector<std::string>& findings);
// Prints the findings (at most 1,000 lines, then how many more) and `ok` or `N problems`
// on stdout; `verified` goes to stderr after `ok`. False when stdout cannot be written.
bool print_findings(const std::vector<std::string>& findings, const std::string& verified);

// cmd_pack_sign.cc, for `pack inspect`: the signatures and approvals the Moon holds for an
// OCI manifest digest: a JSON object {"signatures": [...], "approvals": [...]} as text, or
// the lines to print ("" when there are none).
Result<std::string> inspect_consent(moon::MoonBackend& moon, const std::string& manifest_digest, bool as_json);

// `config_digest`, when given, gets "sha256:…" of the file's bytes or "none" (E5).
bool load_operator_network(const std::filesystem::path& home, policy::OperatorNetwork& network,
                           std::string* config_digest = nullptr);

}  // namespace soyaos::cli
