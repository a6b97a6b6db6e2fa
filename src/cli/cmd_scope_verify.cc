// `soyaos scope verify [--run ID] [--key FILE]` (SPEC.md E6, docs/events.md "Tamper
// evidence") and the record part of `soyaos moon check`: the Scope record's hash chain,
// its signed checkpoints and head file, and the result cache against the record. One line
// per problem on stdout, then `ok` (with what was verified, on stderr) or `N problems`;
// exit 0 when clean, 1 when anything is wrong or the store cannot be read, 2 usage error.
//
// The store is opened directly ($SOYAOS_HOME/moon.db), never through the daemon: a
// verifier reads the bytes at rest, not what a process serving them says.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "common/text.h"
#include "moon/audit.h"
#include "moon/chain.h"
#include "moon/store.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

// Large tampering would print a line per row: the first kMaxLines say where, the count
// says how much.
constexpr size_t kMaxLines = 1000;

int verify(const std::string& run, const std::string& key_file) {
  auto home = moon::default_home();
  if (!home) {
    print_error("scope verify", home.error());
    return 1;
  }
  if (!fs::exists(*home / "moon.db")) {
    std::fprintf(stderr, "soyaos scope verify: no Scope record at %s\n", (*home / "moon.db").c_str());
    return 1;
  }
  std::vector<std::string> findings;
  auto audit = audit_record_lines(*home, run.empty() ? std::nullopt : std::optional<std::string>(run), key_file,
                                  findings);
  if (!audit) {
    print_error("scope verify", audit.error());
    return 1;
  }
  return print_findings(findings, *audit) ? (findings.empty() ? 0 : 1) : 1;
}

}  // namespace

Result<std::string> audit_record_lines(const fs::path& home, const std::optional<std::string>& run,
                                       const std::string& key_file, std::vector<std::string>& findings) {
  std::optional<moon::chain::MoonKey> pinned;
  if (!key_file.empty()) {
    auto k = moon::chain::MoonKey::public_from_file(key_file);
    if (!k) return make_error("--key: " + k.error().describe(), k.error().err);
    pinned.emplace(std::move(k.value()));
  }
  auto store = moon::Store::open(home);
  if (!store) return store.error();
  moon::AuditOptions options;
  options.run_id = run;
  options.key = pinned ? &*pinned : nullptr;
  auto report = moon::audit_record(*store, home, options);
  if (!report) return report.error();
  for (auto& p : report->problems) findings.push_back(std::move(p));
  // What was verified, for the person reading `ok`.
  std::string what = std::to_string(report->chain.events) + " events, " + std::to_string(report->chain.checkpoints) +
                     " checkpoints";
  if (!report->chain.key_id.empty()) what += " (key " + report->chain.key_id + ")";
  what += ", " + std::to_string(report->cache_entries) + " cache entries";
  if (report->chain.chained_at_upgrade > 0)
    what += "; events up to seq " + std::to_string(report->chain.chained_at_upgrade) + " were chained at upgrade, not before";
  return what;
}

bool print_findings(const std::vector<std::string>& findings, const std::string& verified) {
  std::string out;
  for (size_t i = 0; i < findings.size() && i < kMaxLines; ++i) {
    // One problem, one line, whatever its text holds: a finding quotes what the store holds
    // (run ids, pack names, paths), raw, and is escaped here, once (E7), a newline or CR too.
    out += escape_for_terminal(findings[i]) + "\n";
  }
  if (findings.size() > kMaxLines) out += "... " + std::to_string(findings.size() - kMaxLines) + " more\n";
  if (findings.empty()) {
    out += "ok\n";
    if (!verified.empty()) std::fprintf(stderr, "verified: %s\n", verified.c_str());
  } else {
    out += std::to_string(findings.size()) + (findings.size() == 1 ? " problem\n" : " problems\n");
  }
  return std::fwrite(out.data(), 1, out.size(), stdout) == out.size() && std::fflush(stdout) == 0;
}

void register_scope_verify(Command scope, CliContext& ctx) {
  auto run = std::make_shared<std::string>();
  auto key = std::make_shared<std::string>();
  auto cmd = scope.add_subcommand(
      "verify", "Verify the Scope record: hash chain, signed checkpoints, head file, cache entries (E6)");
  cmd.add_option("--run", *run, "Only this run: its events, the chain around them and the checkpoints covering them");
  cmd.add_option("--key", *key, "Verify with this public key (PEM) instead of $SOYAOS_HOME/moon.pub");
  cmd.callback([run, key, &ctx] { ctx.exit_code = verify(*run, *key); });
}

}  // namespace soyaos::cli
