// `soyaos run PACK [--input [NAME=]PATH]... [--out DIR] [--events FILE|-] [--mount H:S[:ro|rw]]
//  [--secret NAME[=env:VAR|=file:PATH]]... [--no-cache] [-- ARGS...]`: runs a pack in a Comet (SPEC.md §3).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "cli/remote_flags.h"
#include "cli/remote_packs.h"
#include "cli/run_cache.h"
#include "cli/run_moon.h"
#include "cli/run_secrets.h"
#include "comet/launch_thread.h"
#include "common/digest.h"
#include "common/phase_trace.h"
#include "common/text.h"
#include "manifest/manifest.h"
#include "moon/store.h"
#include "oci/reference.h"
#include "policy/grant_proposal.h"
#include "policy/policy.h"
#include "scope/events.h"
#include "supervisor/run.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

struct RunArgs {
  std::string pack;
  std::vector<std::string> inputs;
  std::string out;
  std::vector<std::string> events;
  std::vector<std::string> mounts;
  std::vector<std::string> secrets;  // --secret NAME[=env:VAR|=file:PATH]
  bool no_cache = false;
  std::vector<std::string> args;
};

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// How a stopped run ended (C9), so that the operator knows what the agent had time to do.
void print_stop(const supervisor::RunReport& r) {
  const auto& o = r.outcome;
  std::string why;
  if (o.ending == supervisor::Ending::timed_out) {
    why = "timed out (resources.timeout)";
  } else if (o.ending == supervisor::Ending::interrupted) {
    why = "stopped by " + signal_name(o.status);
  } else {
    if (o.stop_signal != 0) {
      std::fprintf(stderr, "soyaos: run %s: %s received after the agent had ended\n", r.run_id.c_str(),
                   signal_name(o.stop_signal).c_str());
    }
    return;
  }
  const std::string grace = o.grace_ms % 1000 == 0 ? std::to_string(o.grace_ms / 1000) + "s"
                                                  : std::to_string(o.grace_ms) + "ms";
  const char* how = "";
  switch (o.stop) {
    case supervisor::Stop::graceful: how = "the agent ended after SIGTERM"; break;
    case supervisor::Stop::killed: how = "the agent was killed (SIGKILL) after SIGTERM and its grace period"; break;
    case supervisor::Stop::killed_at_once: how = "the agent was killed at once (no SIGTERM handler, or resources.grace 0s)"; break;
    case supervisor::Stop::none: how = "the agent had not started"; break;
  }
  std::fprintf(stderr, "soyaos: run %s: %s; %s (resources.grace %s); outputs collected, events stored\n",
               r.run_id.c_str(), why.c_str(), how, grace.c_str());
}

// At most this many distinct lines in the summary; the rest are in the Moon (scope query).
constexpr size_t kMaxSummaryLines = 50;

// The summary's last lines (issue #13): what to add to the manifest to allow what was
// denied, when it can be known (policy/grant_proposal.h decides; docs/cli.md shows them).
void print_grant_hints(const supervisor::RunReport& r) {
  std::vector<policy::DeniedAttempt> attempts;
  attempts.reserve(r.violations.size() + r.violation_aggregates.size());
  auto attempt_of = [](const supervisor::Violation& v, uint64_t n) {
    return policy::DeniedAttempt{v.surface, v.access, v.resource, v.errno_name, v.detail, n, v.syscall};
  };
  for (const auto& v : r.violations) attempts.push_back(attempt_of(v, 1));
  for (const auto& a : r.violation_aggregates) attempts.push_back(attempt_of(a.first, a.count));
  const policy::GrantProposals proposals = policy::propose_grants(attempts);
  for (const auto& p : proposals.items) std::fprintf(stderr, "  %s\n", policy::hint_line(p).c_str());
  const uint64_t left_out = proposals.omitted + r.violations_dropped;
  if (left_out > 0) {
    std::fprintf(stderr, "  ... the hints are bounded: %llu more denied resources or attempts have none here; `soyaos pack learn` "
                         "proposes a whole manifest\n",
                 static_cast<unsigned long long>(left_out));
  }
}

// Every agent-chosen string is escaped (E7): an escape sequence in a path must not erase
// this summary or paint a fake one.
void print_summary(const supervisor::RunReport& r) {
  // An unreachable upstream shows to the agent as a bare reset (or the Moon proxy's 502):
  // say which and why, violations or not (the host can be the agent's choice: escaped).
  for (const auto& line : r.upstream_failures) {
    std::fprintf(stderr, "soyaos: egress: %s\n", escape_for_terminal(line).c_str());
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
  print_grant_hints(r);
}

// T7: the output directory must be new or empty, and writable, before anything starts (a
// stale file would be taken for this run's output; an unwritable one would fail only
// after the agent ran). An empty string: fine; else why not, naming it.
std::string check_out_dir(const fs::path& dir) {
  std::error_code ec;
  auto st = fs::symlink_status(dir, ec);
  if (!ec && fs::exists(st)) {
    if (fs::is_symlink(st)) return dir.string() + ": is a symbolic link; give a new or empty directory";
    if (!fs::is_directory(st)) return dir.string() + ": exists and is not a directory; give a new or empty directory";
    if (!fs::is_empty(dir, ec) || ec) {
      return dir.string() + ": not empty (a run's outputs go into a new or empty directory, so that no old file "
                            "passes for this run's)";
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) return dir.string() + ": not writable (" + std::strerror(errno) + ")";
    return {};
  }
  // New: its nearest existing ancestor must be a directory we can create entries in.
  fs::path parent = fs::absolute(dir, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec) && parent != parent.root_path()) parent = parent.parent_path();
  if (!fs::is_directory(parent, ec)) return dir.string() + ": cannot be created (" + parent.string() + " is not a directory)";
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    return dir.string() + ": cannot be created in " + parent.string() + " (" + std::strerror(errno) + ")";
  }
  return {};
}

// Whether this pack's /workdir/out is collected at all (declared in fs.write): only then
// does the default ./soyaos-out/RUN_ID need to be creatable. An invalid manifest: true
// (run_pack reports the manifest; checking a directory never hurts).
bool pack_collects_out(const manifest::LoadResult& loaded) {
  if (!loaded.manifest) return true;
  for (const auto& w : loaded.manifest->capabilities.fs_write) {
    if (manifest::path_covers(w.path, "/workdir/out")) return true;
  }
  return false;
}

// C12: a violation of a pack that came from a registry travels back there as a flag
// referrer (cli/remote_flags.h): queued durably, then one quick try; a registry that is
// down costs the run nothing but a warning, the flag goes with a later command.
void publish_run_flag(const fs::path& home, const fs::path& pack_dir, const supervisor::RunReport& report) {
  if (report.violations.empty()) return;
  // The Moon the run stored its events in (a daemon's too: it queues from its own record
  // of the run, moon/server_flags.h).
  auto m = moon::open_moon(home);
  if (!m) {
    print_error("", "warning: the flag could not be queued for its registry: " + m.error().describe());
    return;
  }
  const auto& first = report.violations.front();
  std::vector<std::string> registries;
  // The pack's tree digest is computed only where it is used: by an embedded Moon (a
  // daemon reads it from its record of the run; hashing reads the whole pack).
  auto digest = [&pack_dir]() -> Result<std::string> {
    trace_phase("flag_tree_digest");
    return tree_digest(pack_dir);
  };
  auto notes = queue_run_flags(**m, digest, report.run_id, first.surface, first.resource, registries);
  for (const auto& registry : registries) {
    PublishOptions publish;
    publish.registry = registry;
    publish.honour_backoff = true;
    publish.quick = true;
    for (auto& n : publish_queued_flags(**m, home, publish)) notes.push_back(std::move(n));
  }
  for (const auto& n : notes) std::fprintf(stderr, "soyaos: %s\n", escape_for_terminal(n).c_str());
}

void run(const RunArgs& a, CliContext& ctx) {
  trace_phase("cli_parsed");  // bench/startup.sh names every phase of the command
  // C9: before any thread exists (the Moon client, the egress and DNS threads), so that a
  // SIGINT/SIGTERM/SIGHUP reaches only the supervisor, which stops the agent gracefully and
  // still records the run; and a reader that goes away (`| head`) is an EPIPE to drain
  // past, not a SIGPIPE that loses the run.
  supervisor::block_stop_signals();
  (void)::signal(SIGPIPE, SIG_IGN);
  supervisor::RunRequest req;
  // The embedded Moon: events are stored and flags kept under $SOYAOS_HOME. Without it
  // the run does not start (E4: events are never lost silently).
  auto home = moon::default_home();
  if (!home) {
    print_error("", "moon: " + home.error().describe());
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  // The operator's network policy (moon.yaml, C6a); an invalid file stops the run.
  if (!load_operator_network(*home, req.network, &req.moon_config_digest)) {
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  trace_phase("operator_config");
  std::error_code ec;
  if (std::filesystem::is_directory(a.pack, ec)) {
    req.pack_dir = a.pack;
  } else if (oci::looks_remote(a.pack)) {
    // REGISTRY/REPO[:TAG|@DIGEST]: pulled on first use, offline afterwards (C12).
    auto remote = remote_pack_dir(*home, a.pack);
    if (remote.dir.empty()) {
      print_error("", remote.error);
      ctx.exit_code = remote.exit_code != 0 ? remote.exit_code : supervisor::kExitSetup;
      return;
    }
    req.pack_dir = remote.dir;
  } else if (a.pack.find('@') != std::string::npos) {
    auto dir = pack_dir_for_ref(*home, a.pack);  // NAME@VERSION from the registry
    if (!dir) {
      print_error("", dir.error());
      ctx.exit_code = supervisor::kExitSetup;
      return;
    }
    req.pack_dir = *dir;
  } else {
    print_error("", a.pack + ": no such pack directory (or NAME@VERSION)");
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  // Usage checks, before anything starts (T6, T7): exit 2, nothing run, nothing touched.
  // The manifest is read once for them, for the result cache and for the run (issue #16: a
  // cache hit read it three times, a run twice); run_pack reports it.
  const manifest::LoadResult loaded = manifest::load_pack(req.pack_dir);
  req.loaded = &loaded;
  for (const auto& in : a.inputs) req.options.inputs.push_back(policy::parse_input_arg(in));
  if (auto targets = policy::input_targets(req.options.inputs); !targets) {
    print_error("", targets.error());
    ctx.exit_code = kExitUsage;
    return;
  }
  if (!a.out.empty()) {
    if (auto why = check_out_dir(a.out); !why.empty()) {
      print_error("", "--out " + why);
      ctx.exit_code = kExitUsage;
      return;
    }
    req.options.out = a.out;
  } else if (pack_collects_out(loaded)) {
    // The default ./soyaos-out/RUN_ID is new by construction; ./soyaos-out must be usable.
    if (auto why = check_out_dir(fs::path("soyaos-out") / "RUN_ID"); !why.empty()) {
      print_error("", "the default --out, " + why + "; give --out DIR");
      ctx.exit_code = kExitUsage;
      return;
    }
  }
  // Secrets (C11): a --secret the manifest does not declare is a usage error (2); a value
  // that cannot be found stops the run before anything starts (125), naming the secret and
  // how to supply it. An invalid manifest is run_pack's to report.
  if (loaded.manifest) {
    auto resolved = resolve_secrets(*loaded.manifest, a.secrets, *home);
    if (resolved.exit_code != 0) {
      print_error("", resolved.error);
      ctx.exit_code = resolved.exit_code;
      return;
    }
    req.secrets = std::move(resolved.secrets);
  }
  req.options.mounts = a.mounts;
  trace_phase("usage_checks");
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
  auto cache = RunCache::prepare(*home, req, loaded, a.no_cache);
  if (auto replayed = cache.replay(req)) {
    ctx.exit_code = *replayed;
    trace_phase("replayed");
    // C9: interrupted while replaying (the replay itself is complete and recorded).
    if (int sig = supervisor::take_pending_stop_signal(); sig != 0) ctx.exit_code = 128 + sig;
    return;
  }
  trace_phase("cache_lookup");
  // A run, not a replay: its cgroup and the thread that will clone the Comet into it now,
  // before the Moon is opened and the policy compiled, so that the kernel's wait for that
  // thread's move (7-25 ms of idle wall, comet/launch_thread.h) overlaps that work. Not
  // before the cache lookup: a replay would wait for the thread to end; nor for a manifest
  // run_pack will refuse. A plan that cannot be probed is left to run_pack to report.
  std::optional<comet::LaunchThread> launcher;
  if (loaded.manifest) {
    if (auto plan = comet::probe_cgroups()) req.launcher = &launcher.emplace(*plan, comet::run_cgroup_name(req.options.run_id));
  }
  // After the cache: a replay needs none of the registry (hooks are for a real run).
  auto hooks = moon_run_hooks(*home);
  if (!hooks) {
    print_error("", "moon: " + hooks.error().describe());
    ctx.exit_code = supervisor::kExitSetup;
    return;
  }
  req.hooks = std::move(hooks.value());
  trace_phase("moon_open");
  cache.arm(req);  // after the hooks: it may add to them (cache_rejected)
  // ---- end result cache ----
  auto report = supervisor::run_pack(req);
  cache.store(report);  // result cache: after the run's events are stored
  trace_phase("cache_store");
  if (!loaded.manifest) {
    // run_pack's error for an invalid manifest is made of Diagnostic::format() lines, which
    // are escaped already: printed as they are (escaping them again doubled every
    // backslash), one diagnostic a line like `pack validate`.
    std::fprintf(stderr, "soyaos: invalid manifest:\n");
    for (const auto& d : loaded.errors) std::fprintf(stderr, "  %s\n", d.format().c_str());
  } else if (!report.error.empty()) {
    print_error("", report.error);  // one line (an invalid manifest's several are printed above)
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
  print_stop(report);
  if (report.outcome.ending == supervisor::Ending::exec_failed) {
    print_error("", "the runtime could not be executed: " + Error{report.outcome.exec_errno, "execve"}.describe());
  }
  print_summary(report);
  trace_phase("reported");
  publish_run_flag(*home, req.pack_dir, report);
  ctx.exit_code = report.exit_code;
  // C9: a signal after the run's record was complete still ends soyaos with 128+N.
  if (int sig = supervisor::take_pending_stop_signal(); sig != 0 && report.outcome.stop_signal == 0) {
    std::fprintf(stderr, "soyaos: run %s: %s received after the run ended; its record is complete\n",
                 report.run_id.c_str(), signal_name(sig).c_str());
    ctx.exit_code = 128 + sig;
  }
}

}  // namespace

void register_run_command(Command app, CliContext& ctx) {
  auto args = std::make_shared<RunArgs>();
  auto cmd = app.add_subcommand("run", "Run a pack in a Comet, the fail-closed sandbox");
  cmd.add_option("pack", args->pack, "Pack directory, NAME@VERSION from the registry, or REGISTRY/REPO[:TAG|@DIGEST]").required();
  cmd.add_option("--input", args->inputs,
                 "[NAME=]PATH, repeatable: NAME=PATH at /workdir/inputs/NAME; an unnamed directory is "
                 "/workdir/inputs, an unnamed file /workdir/inputs/<its name>")
      .allow_extra_args(false);
  cmd.add_option("--out", args->out, "Where /workdir/out is collected (default ./soyaos-out/RUN_ID)");
  // One value per occurrence (repeat the option): a vector option would otherwise take
  // the words that follow it, up to and including `--`.
  cmd.add_option("--events", args->events,
                 "Append Scope events (JSON Lines) to FILE, or - for stdout (the agent's stdout then goes to "
                 "stderr); repeatable")
      .allow_extra_args(false);
  cmd.add_option("--mount", args->mounts,
                 "Bind operator data HOST:SANDBOX[:ro|:rw] at a path the manifest declares; repeatable")
      .allow_extra_args(false);
  cmd.add_option("--secret", args->secrets,
                 "NAME (from your environment variable NAME), NAME=env:VAR or NAME=file:PATH: the value of a secret "
                 "the manifest declares; repeatable. Without it, the Moon's secret store (`soyaos secret set`)")
      .allow_extra_args(false);
  cmd.add_flag("--no-cache", args->no_cache, "Always run (bypass the result cache)");
  cmd.add_option("args", args->args, "Arguments for the agent (after --)");
  // Everything after the first `--` goes to the agent verbatim (T7): main() takes it off
  // the command line before CLI11 parses, so no option can consume any of it.
  cmd.callback([args, &ctx] {
    args->args.insert(args->args.end(), ctx.passthrough.begin(), ctx.passthrough.end());
    run(*args, ctx);
  });
}

}  // namespace soyaos::cli
