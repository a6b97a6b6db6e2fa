// `soyaos pack learn [DIR] [--input [NAME=]PATH]... [--secret …] [--allow-network] [--write]
// [--max-rounds N] [--format text|json] [-- ARGS]` (SPEC.md C13, issue #13): runs the pack
// (each of its examples, or one run with --input / ARGS) in real Comets, round after round,
// and proposes the manifest entries for what the runs tried beyond soyapack.yaml.
//
// Each round is a run like any other — every layer in force, every attempt an event — but
// the attempts are `learn_observed` events (nothing is flagged, nothing cached), the DNS
// stub answers undeclared names with learning addresses and the gateway only reads the first
// bytes of undeclared connections (nothing reaches the host). The next round runs with the
// fs entries learned so far (and, with --allow-network, the egress entries: then relayed for
// real), so the agent gets further. Rounds stop when one adds nothing, or after
// --max-rounds (default 5). The tier is then proposed by lint's rule for the learned
// manifest (lint::propose_tier: narrower when less is needed, wider only when lint refuses
// it at the declared tier). Output: a unified diff against soyapack.yaml with a comment on
// each added or changed line (stdout), the rounds and what cannot be granted (stderr); --write edits
// the file in place (a textual edit: comments and key order kept).
// With --unused it answers the opposite question instead — which declared grants no run
// used (pack_unused.h). The runs themselves are made as `pack test` makes them (pack_runs.h).
// Exit 0 a proposal (possibly empty) for everything observed, 1 something observed cannot
// be granted (exec, fork, clock, the pack's own files...) or the edit failed, 2 usage,
// 125 a Comet could not start, 128+N interrupted.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/pack_runs.h"
#include "cli/pack_unused.h"
#include "cli/print_error.h"
#include "cli/run_moon.h"
#include "cli/run_secrets.h"
#include "common/text.h"
#include "lint/lint.h"
#include "manifest/manifest.h"
#include "manifest/manifest_edit.h"
#include "moon/store.h"
#include "policy/learn_proposal.h"
#include "policy/operator_network.h"
#include "supervisor/run.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct LearnArgs {
  std::string pack = ".";
  std::vector<std::string> inputs;
  std::vector<std::string> secrets;
  bool allow_network = false;
  bool write = false;
  bool unused = false;
  int max_rounds = 5;
  std::string format = "text";
};

policy::Observation observation(const supervisor::Violation& v) {
  return {v.surface, v.access, v.resource, v.syscall, v.errno_name, v.detail};
}

std::string shown(const std::string& s) { return escape_for_terminal(s); }

bool print_out(const std::string& s) {
  return std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0;
}

Result<std::string> read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error("cannot read " + file.string(), ENOENT);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > manifest::kMaxManifestBytes) return make_error(file.string() + " is too large", EFBIG);
  return text;
}

// Replaces `file` atomically (a temporary file in the same directory, then rename).
Status write_text(const fs::path& file, const std::string& text) {
  const fs::path tmp = file.parent_path() / (".soyapack.yaml.learn-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return make_error("cannot write " + tmp.string(), EIO);
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return make_error("cannot replace " + file.string(), EIO);
  }
  return {};
}

// The tier line's comment: what it was and which lint rule decided.
std::string tier_comment(const lint::TierChange& t) {
  return std::string("learned (was ") + manifest::to_string(t.from) + "): " + t.why;
}

manifest::ManifestAdditions additions(const policy::Proposal& p, const std::optional<lint::TierChange>& tier) {
  manifest::ManifestAdditions add;
  if (tier) {
    add.values.push_back({{"capabilities", "determinism_tier"}, manifest::to_string(tier->to), tier_comment(*tier)});
  }
  for (const auto& e : p.egress) add.egress.push_back({policy::egress_yaml(e.entry), "learned from " + e.why});
  for (const auto& r : p.fs_read) add.fs_read.push_back({manifest::yaml_scalar(r.path), "learned from " + r.why});
  for (const auto& w : p.fs_write) add.fs_write.push_back({manifest::yaml_scalar(w.path), "learned from " + w.why});
  return add;
}

Json proposal_json(const policy::Proposal& p, const std::optional<lint::TierChange>& tier) {
  Json egress = Json::array(), reads = Json::array(), writes = Json::array();
  for (const auto& e : p.egress) {
    egress.push_back({{"host", e.entry.host},
                      {"port", e.entry.port},
                      {"protocol", manifest::to_string(e.entry.protocol)},
                      {"why", valid_utf8(e.why)}});
  }
  for (const auto& r : p.fs_read) reads.push_back({{"path", valid_utf8(r.path)}, {"why", valid_utf8(r.why)}});
  for (const auto& w : p.fs_write) writes.push_back({{"path", valid_utf8(w.path)}, {"why", valid_utf8(w.why)}});
  auto list = [](const std::vector<std::string>& v) {
    Json a = Json::array();
    for (const auto& s : v) a.push_back(valid_utf8(s));
    return a;
  };
  Json tier_json = nullptr;
  if (tier) {
    tier_json = {{"from", manifest::to_string(tier->from)},
                 {"to", manifest::to_string(tier->to)},
                 {"rule", tier->rule},
                 {"why", valid_utf8(tier->why)}};
  }
  return {{"egress", egress},
          {"fs", {{"read", reads}, {"write", writes}}},
          {"tier", tier_json},
          {"not_grantable", list(p.not_grantable)},
          {"names_only", list(p.names_only)},
          {"notes", list(p.notes)},
          {"omitted",
           {{"egress", p.more_egress},
            {"fs_read", p.more_read},
            {"fs_write", p.more_write},
            {"not_grantable", p.more_not_grantable},
            {"names_only", p.more_names},
            {"notes", p.more_notes},
            {"observations", p.observations_dropped}}}};
}

// What stderr says besides the diff: each list, with how many more were left out.
std::string text_lists(const policy::Proposal& p, const std::vector<std::string>& run_notes) {
  std::string out;
  auto section = [&](const char* title, const std::vector<std::string>& items, uint64_t more) {
    if (items.empty() && more == 0) return;
    out += std::string(title) + ":\n";
    for (const auto& s : items) out += "  " + shown(s) + "\n";
    if (more > 0) out += "  ... and " + std::to_string(more) + " more\n";
  };
  section("not grantable", p.not_grantable, p.more_not_grantable);
  section("names looked up but never connected to (not proposed)", p.names_only, p.more_names);
  section("observed, not learned", p.notes, p.more_notes);
  section("runs", run_notes, 0);
  if (p.more_egress + p.more_read + p.more_write > 0) {
    out += "proposal capped at " + std::to_string(policy::kMaxProposed) + " entries per list: " +
           std::to_string(p.more_egress) + " egress, " + std::to_string(p.more_read) + " fs.read, " +
           std::to_string(p.more_write) + " fs.write entries more were not proposed\n";
  }
  if (p.observations_dropped > 0) {
    out += std::to_string(p.observations_dropped) + " observations past the bounds were counted, not examined\n";
  }
  return out;
}

int run_learn(const LearnArgs& a, const CliContext& ctx) {
  supervisor::block_stop_signals();
  (void)::signal(SIGPIPE, SIG_IGN);
  const bool text = a.format == "text";
  if (a.max_rounds < 1 || a.max_rounds > 20) {
    std::fprintf(stderr, "soyaos pack learn: --max-rounds must be 1..20\n");
    return kExitUsage;
  }
  if (a.unused && a.write) {
    std::fprintf(stderr, "soyaos pack learn: --unused reports, it does not edit: remove the entries by hand\n");
    return kExitUsage;
  }
  auto home = moon::default_home();
  if (!home) {
    print_error("pack learn", "moon: " + home.error().describe());
    return supervisor::kExitSetup;
  }
  policy::OperatorNetwork network;
  std::string config_digest = "none";
  if (!load_operator_network(*home, network, &config_digest)) return supervisor::kExitSetup;
  std::error_code ec;
  if (!fs::is_directory(a.pack, ec)) {
    print_error("pack learn", a.pack + ": no such pack directory");
    return 1;
  }
  const fs::path pack_dir = a.pack;
  auto loaded = manifest::load_pack(pack_dir);
  if (!loaded.manifest) {
    for (const auto& d : loaded.errors) std::fprintf(stderr, "%s\n", d.format().c_str());
    return 1;
  }
  const manifest::Manifest& m = *loaded.manifest;
  const fs::path manifest_file = pack_dir / "soyapack.yaml";
  auto original = read_text(manifest_file);
  if (!original) {
    print_error("pack learn", original.error());
    return 1;
  }

  std::vector<PackRunSpec> runs;
  if (a.inputs.empty() && !ctx.has_passthrough && !m.examples.empty()) {
    for (const auto& ex : m.examples) {
      runs.push_back(example_run(ex, pack_dir));
      runs.back().name = "example " + ex.name;
    }
  } else {
    PackRunSpec r{"the run", {}, ctx.passthrough};
    for (const auto& in : a.inputs) r.inputs.push_back(policy::parse_input_arg(in));
    if (auto targets = policy::input_targets(r.inputs); !targets) {
      print_error("pack learn", targets.error());
      return kExitUsage;
    }
    runs.push_back(std::move(r));
  }
  auto secrets = resolve_secrets(m, a.secrets, *home);
  if (secrets.exit_code != 0) {
    print_error("pack learn", secrets.error);
    return secrets.exit_code;
  }
  auto hooks = moon_run_hooks(*home);
  if (!hooks) {
    print_error("pack learn", "moon: " + hooks.error().describe());
    return supervisor::kExitSetup;
  }

  const PackRunContext run_ctx{pack_dir, *hooks, network, config_digest, &secrets.secrets};
  if (a.unused) return report_unused({&m, runs, run_ctx, a.max_rounds, !text});
  policy::Learner learner;
  Json rounds = Json::array();
  std::vector<std::string> run_notes;
  std::string stopped = "max rounds";
  policy::Proposal current;  // the grants learned so far
  for (int round = 1; round <= a.max_rounds; ++round) {
    const auto before = current.keys();
    Json round_json = {{"round", round}, {"runs", Json::array()}};
    size_t observed = 0;
    for (const auto& spec : runs) {
      auto run = run_in_comet(run_ctx, spec, [&](supervisor::RunRequest& req) {
        req.learn = true;
        req.learn_record = {{"round", round}, {"example", spec.name}, {"allow_network", a.allow_network},
                            {"learned_so_far", current.keys().size()}};
        req.amend_manifest = [&current, &a](manifest::Manifest& mm) {
          policy::apply_proposal(mm, current, a.allow_network);
        };
      });
      if (run.never_ran) {
        std::fprintf(stderr, "soyaos pack learn: round %d, %s: the Comet could not start: %s\n", round,
                     shown(spec.name).c_str(), escape_for_terminal(run.error).c_str());
        return supervisor::kExitSetup;
      }
      const auto& report = run.report;
      for (const auto& v : report.violations) learner.add(observation(v), spec.name);
      for (const auto& agg : report.violation_aggregates) learner.add(observation(agg.first), spec.name, agg.count);
      learner.add_dropped(report.violations_dropped);
      observed += report.violation_count;
      if (report.outcome.ending == supervisor::Ending::timed_out) {
        run_notes.push_back("round " + std::to_string(round) + ", " + spec.name +
                            ": timed out (resources.timeout); what it tried until then was learned");
      }
      round_json["runs"].push_back({{"name", valid_utf8(spec.name)},
                                    {"run_id", report.run_id},
                                    {"exit_code", report.exit_code},
                                    {"observed", report.violation_count}});
      const int sig = report.outcome.stop_signal != 0 ? report.outcome.stop_signal
                                                       : supervisor::take_pending_stop_signal();
      if (sig != 0) {
        std::fprintf(stderr, "soyaos pack learn: interrupted (signal %d) in round %d; nothing proposed\n", sig, round);
        return 128 + sig;
      }
    }
    current = learner.propose(m);
    const auto after = current.keys();
    std::vector<std::string> added;
    std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
    round_json["observed"] = observed;
    round_json["new"] = added.size();
    rounds.push_back(round_json);
    if (text) {
      std::fprintf(stderr, "round %d: %zu run%s, %zu attempts observed, %zu new\n", round, runs.size(),
                   runs.size() == 1 ? "" : "s", observed, added.size());
    }
    if (added.empty()) {
      stopped = "nothing new";
      break;
    }
  }

  // The tier lint would require of the learned manifest (lint's rule set decides, lint.h):
  // narrower when it needs less, wider only when lint refuses it at the declared tier.
  manifest::Manifest learned = m;
  policy::apply_proposal(learned, current, /*network=*/true);
  const std::optional<lint::TierChange> tier = lint::propose_tier(learned);

  // The proposal as an edit of soyapack.yaml.
  std::string diff, edit_error;
  bool written = false;
  const auto add = additions(current, tier);
  if (!add.empty()) {
    auto edit = manifest::edit_manifest(*original, add, "soyapack.yaml");
    if (!edit) {
      edit_error = edit.error().describe();
    } else {
      diff = edit->diff;
      if (a.write) {
        if (auto s = write_text(manifest_file, edit->text); !s) {
          edit_error = s.error().describe();
        } else {
          written = true;
        }
      }
    }
  }
  const bool failed = !current.not_grantable.empty() || !edit_error.empty();
  if (text) {
    if (!diff.empty() && !print_out(diff)) return 1;
    std::string err = text_lists(current, run_notes);
    if (add.empty()) err += "nothing to add: the manifest allows everything the runs tried\n";
    if (!edit_error.empty()) {
      err += "cannot edit soyapack.yaml (" + shown(edit_error) + "); add these entries by hand:\n";
      for (const auto& e : add.egress) err += "  capabilities.egress: - " + e.yaml + "\n";
      for (const auto& r : add.fs_read) err += "  capabilities.fs.read: - " + shown(r.yaml) + "\n";
      for (const auto& w : add.fs_write) err += "  capabilities.fs.write: - " + shown(w.yaml) + "\n";
      if (tier) {
        err += "  capabilities.determinism_tier: " + std::string(manifest::to_string(tier->to)) + "  (" +
               shown(tier_comment(*tier)) + ")\n";
      }
    }
    if (written) err += "wrote " + shown(manifest_file.string()) + "\n";
    else if (!diff.empty()) err += "(not written: add --write to apply it)\n";
    std::fputs(err.c_str(), stderr);
  } else {
    Json doc = {{"pack", m.name},          {"version", m.version},          {"rounds", rounds},
                {"stopped", stopped},      {"proposal", proposal_json(current, tier)}, {"diff", valid_utf8(diff)},
                {"written", written},      {"run_notes", run_notes}};
    if (!edit_error.empty()) doc["edit_error"] = valid_utf8(edit_error);
    if (!print_out(doc.dump() + "\n")) return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace

void register_pack_learn(Command pack, CliContext& ctx) {
  auto args = std::make_shared<LearnArgs>();
  auto cmd = pack.add_subcommand("learn", "Run a pack in Comets and propose the manifest entries it needs");
  cmd.add_option("pack", args->pack, "Pack directory (default: the current directory)");
  cmd.add_option("--input", args->inputs,
                 "[NAME=]PATH, repeatable (as for `soyaos run`): one run with these inputs instead of the examples")
      .allow_extra_args(false);
  cmd.add_option("--secret", args->secrets,
                 "NAME, NAME=env:VAR or NAME=file:PATH: the value of a declared secret (as for `soyaos run`)")
      .allow_extra_args(false);
  cmd.add_flag("--allow-network", args->allow_network,
               "Relay the egress entries learned in earlier rounds for real (without it nothing undeclared "
               "reaches the network)");
  cmd.add_flag("--write", args->write, "Write the proposal into soyapack.yaml (comments and key order kept)");
  cmd.add_flag("--unused", args->unused,
               "Instead of a proposal, list the declared grants (fs paths, egress entries, http rules, secrets) "
               "that no run used; exit 1 when there are some");
  cmd.add_option("--max-rounds", args->max_rounds, "Stop after this many rounds (default 5)");
  cmd.add_option("--format", args->format, "Output format: text (default) or json")
      .check_member({"text", "json"});
  cmd.callback([args, &ctx] { ctx.exit_code = run_learn(*args, ctx); });
}

}  // namespace soyaos::cli
