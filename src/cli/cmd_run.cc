// `soyaos run PACK [--input PATH] [--out DIR] [--events FILE|-] [--mount H:S[:ro|rw]]
//  [--no-cache] [-- ARGS...]`: runs a pack in a Comet (SPEC.md §3).
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/run_cache.h"
#include "cli/run_moon.h"
#include "common/text.h"
#include "moon/store.h"
#include "scope/events.h"
#include "supervisor/run.h"

namespace soyaos::cli {
namespace {

struct RunArgs {
  std::string pack;
  std::string input;
  std::string out;
  std::vector<std::string> events;
  std::vector<std::string> mounts;
  bool no_cache = false;
  std::vector<std::string> args;
};

// At most this many distinct lines in the summary; the rest are in the Moon (scope query).
constexpr size_t kMaxSummaryLines = 50;

// Every agent-chosen string is escaped (E7): an escape sequence in a path must not erase
// this summary or paint a fake one.
void print_summary(const supervisor::RunReport& r) {
  // An unreachable upstream shows to the agent as a bare reset (or the Moon proxy's 502):
  // say which and why, violations or not (the host can be the agent's choice: escaped).
  for (const auto& line : r.upstream_failures) {
    std::fprintf(stderr, "soyaos: egress: upstream unreachable: %s\n", escape_for_terminal(line).c_str());
  }
  if (r.violation_count == 0) return;
  // The agent's own output came before: reset any colour or concealment it left set.
  if (::isatty(STDERR_FILENO) == 1) std::fputs("\x1b[0m", stderr);
  std::fprintf(stderr, "soyaos: run %s: %llu capability violation%s; exit status %d\n", r.run_id.c_str(),
               static_cast<unsigned long long>(r.violation_count), r.violation_count == 1 ? "" : "s",
               r.exit_code);
  // One line per distinct (surface, access, resource, errno), with a count.
  std::map<std::string, uint64_t> distinct;
  std::vector<std::string> order;
  auto key_of = [](const supervisor::Violation& v) {
    return v.surface + (v.access.empty() ? "" : " " + v.access) + "  " + escape_for_terminal(v.resource) + "  (" +
           escape_for_terminal(v.syscall) + ": " + v.errno_name + ")";
  };
  for (const auto& v : r.violations) {
    std::string key = key_of(v);
    if (distinct[key]++ == 0) order.push_back(key);
  }
  for (const auto& a : r.violation_aggregates) distinct[key_of(a.first)] += a.count;
  size_t shown = 0;
  for (const auto& k : order) {
    if (shown++ == kMaxSummaryLines) break;
    uint64_t n = distinct[k];
    if (n > 1) {
      std::fprintf(stderr, "  %s  x%llu\n", k.c_str(), static_cast<unsigned long long>(n));
    } else {
      std::fprintf(stderr, "  %s\n", k.c_str());
    }
  }
  if (order.size() > kMaxSummaryLines || r.violations_dropped > 0) {
    std::fprintf(stderr, "  ... %zu more distinct%s; `soyaos scope query --run %s --type capability_violation` lists them\n",
                 order.size() > kMaxSummaryLines ? order.size() - kMaxSummaryLines : 0,
                 r.violations_dropped > 0
                     ? (", and " + std::to_string(r.violations_dropped) + " past the per-run bound (counted only)").c_str()
                     : "",
                 r.run_id.c_str());
  }
}

void run(const RunArgs& a, CliContext& ctx) {
  supervisor::RunRequest req;
  // The embedded Moon: events are stored and flags kept under $SOYAOS_HOME. Without it
  // the run does not start (E4: events are never lost silently).
  auto home = moon::default_home();
  if (!home) {
    std::fprintf(stderr, "soyaos: moon: %s\n", home.error().describe().c_str());
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  // The operator's network policy (moon.yaml, C6a); an invalid file stops the run.
  if (!load_operator_network(*home, req.network)) {
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(a.pack, ec)) {
    req.pack_dir = a.pack;
  } else if (a.pack.find('@') != std::string::npos) {
    auto dir = pack_dir_for_ref(*home, a.pack);  // NAME@VERSION from the registry
    if (!dir) {
      std::fprintf(stderr, "soyaos: %s\n", dir.error().describe().c_str());
      ctx.exit_code = supervisor::kExitSetup;
      return;
    }
    req.pack_dir = *dir;
  } else {
    std::fprintf(stderr, "soyaos: %s: no such pack directory (or NAME@VERSION)\n", a.pack.c_str());
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  if (!a.input.empty()) req.options.input = a.input;
  if (!a.out.empty()) req.options.out = a.out;
  req.options.mounts = a.mounts;
  req.options.extra_args = a.args;
  for (const auto& e : a.events) {
    if (e == "-") {
      req.events_to_stdout = true;
    } else {
      req.event_files.push_back(e);
    }
  }
  // ---- result cache (C10, docs/tiers-and-cache.md) ----
  // The run id is chosen here so that a replay and a run share it (events, ./soyaos-out).
  req.options.run_id = scope::new_run_id();
  auto cache = RunCache::prepare(*home, req, a.no_cache);
  if (auto replayed = cache.replay(req)) {
    ctx.exit_code = *replayed;
    return;
  }
  cache.arm(req);
  // ---- end result cache ----
  // After the cache: a replay needs none of the registry (hooks are for a real run).
  auto hooks = moon_run_hooks(*home);
  if (!hooks) {
    std::fprintf(stderr, "soyaos: moon: %s\n", hooks.error().describe().c_str());
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  req.hooks = std::move(hooks.value());
  auto report = supervisor::run_pack(req);
  cache.store(report);  // result cache: after the run's events are stored
  if (!report.error.empty()) {
    std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(report.error).c_str());
  }
  for (const auto& s : report.outputs.skipped) {
    std::fprintf(stderr, "soyaos: /workdir/out/%s\n", escape_for_terminal(s).c_str());
  }
  if (report.outputs.skipped_count > report.outputs.skipped.size()) {
    std::fprintf(stderr, "soyaos: /workdir/out: %llu more entries not collected\n",
                 static_cast<unsigned long long>(report.outputs.skipped_count - report.outputs.skipped.size()));
  }
  for (const auto& l : report.limits_exceeded) {
    std::fprintf(stderr, "soyaos: run %s: %s\n", report.run_id.c_str(), l.c_str());
  }
  if (report.outcome.ending == supervisor::Ending::timed_out) {
    std::fprintf(stderr, "soyaos: run %s: timed out (resources.timeout)\n", report.run_id.c_str());
  }
  if (report.outcome.ending == supervisor::Ending::exec_failed) {
    std::fprintf(stderr, "soyaos: the runtime could not be executed: %s\n",
                 Error{report.outcome.exec_errno, "execve"}.describe().c_str());
  }
  print_summary(report);
  ctx.exit_code = report.exit_code;
}

}  // namespace

void register_run_command(CLI::App& app, CliContext& ctx) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run a pack in a Comet, the fail-closed sandbox");
  cmd->add_option("pack", args->pack, "Pack directory, or NAME@VERSION from the registry")->required();
  cmd->add_option("--input", args->input, "File or directory mounted read-only at /workdir/inputs");
  cmd->add_option("--out", args->out, "Where /workdir/out is collected (default ./soyaos-out/RUN_ID)");
  cmd->add_option("--events", args->events, "Append Scope events (JSON Lines) to FILE, or - for stdout");
  cmd->add_option("--mount", args->mounts,
                  "Bind operator data HOST:SANDBOX[:ro|:rw] at a path the manifest declares");
  cmd->add_flag("--no-cache", args->no_cache, "Always run (bypass the result cache)");
  cmd->add_option("args", args->args, "Arguments for the agent (after --)");
  cmd->callback([args, &ctx] { run(*args, ctx); });
}

}  // namespace soyaos::cli
