// soyaos: the command-line tool. Parses arguments with CLI11 (through cli_args.h) and dispatches; all output
// formatting lives in the cmd_*.cc files. Errors go to stderr, machine output to stdout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "cli/remote_packs.h"
#include "common/phase_trace.h"

#ifndef SOYAOS_VERSION
#define SOYAOS_VERSION "0.0.0"
#endif

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Walks the words of the command line down the subcommand tree. A word where a group
// (soyaos, pack, scope, ...) expects one of its subcommands and that names none is a
// mistyped command: returns the message suggesting the nearest (CLI11 would only say "A
// subcommand is required"). Sets `leaf` to the last subcommand reached.
std::string unknown_subcommand(soyaos::cli::Command app, const std::vector<std::string>& words,
                               std::optional<soyaos::cli::Command>& leaf) {
  leaf = app;
  for (const auto& w : words) {
    if (w.empty() || w[0] == '-') continue;  // options of a group take no values
    auto subs = leaf->subcommands();
    if (subs.empty()) return {};
    auto named = std::find_if(subs.begin(), subs.end(), [&w](const soyaos::cli::Command& sub) { return sub.check_name(w); });
    if (named != subs.end()) {
      leaf = *named;
      continue;
    }
    const std::string group = *leaf == app ? "soyaos" : "soyaos " + leaf->name();
    std::string best, names;
    size_t best_d = std::string::npos;
    for (const soyaos::cli::Command& sub : subs) {
      const std::string& n = sub.name();
      names += (names.empty() ? "" : ", ") + n;
      size_t d = edit_distance(w, n);
      if (d < best_d) {
        best_d = d;
        best = n;
      }
    }
    std::string msg = group + ": '" + w + "' is not a command";
    // A suggestion only when it is plausibly what was meant.
    if (best_d <= std::max<size_t>(2, best.size() / 3)) {
      msg += "; did you mean '" + group + " " + best + "'?";
    } else {
      msg += "; commands: " + names;
    }
    return msg + " (`" + group + " --help` describes them)";
  }
  return {};
}

int run_cli(int argc, char** argv) {
  using namespace soyaos::cli;
  CliContext ctx;
  ctx.color = ::isatty(STDOUT_FILENO) == 1 && std::getenv("NO_COLOR") == nullptr;

  RootCommand root{"soyaos: run AI agent packs in a fail-closed capability sandbox (Comet)"};
  Command app = root.command();
  app.require_subcommand(1);
  root.set_help_all_flag("--help-all", "Show help for every command");

  auto version = app.add_subcommand("version", "Print the version of soyaos");
  version.callback([] { std::printf("soyaos %s\n", SOYAOS_VERSION); });

  // Only the command group that the first word names is set up (issue #16): CLI11 builds
  // every option of every command otherwise, ~2 M instructions per start (a third of what a
  // no-op `soyaos run` executes itself). Any other first word (none, --help, --help-all, a
  // mistyped command) sets up every command, for the help and the suggestion.
  struct Group {
    const char* name;
    void (*add)(Command, CliContext&);
  };
  static constexpr Group kGroups[] = {
      {"pack", register_pack_commands},    {"run", register_run_command},       {"scope", register_scope_commands},
      {"doctor", register_doctor_command}, {"cache", register_cache_commands},  {"moon", register_moon_commands},
      {"secret", register_secret_commands}, {"login", register_login_commands}, {"logout", register_login_commands},
  };
  const std::string first = argc > 1 ? argv[1] : "";
  const auto named = std::find_if(std::begin(kGroups), std::end(kGroups), [&first](const Group& g) { return first == g.name; });
  if (named != std::end(kGroups)) {
    named->add(app, ctx);
  } else if (first != "version") {
    // register_login_commands adds both login and logout: once.
    for (const auto& g : kGroups) {
      if (std::string_view(g.name) != "logout") g.add(app, ctx);
    }
  }

  // T7: everything after the first `--` of `soyaos run` goes to the agent verbatim,
  // whatever options precede it; CLI11 never sees it (a multi-value option cannot swallow it).
  std::vector<std::string> words(argv + 1, argv + argc);
  auto dashdash = std::find(words.begin(), words.end(), "--");
  std::optional<Command> leaf;
  if (auto msg = unknown_subcommand(app, std::vector<std::string>(words.begin(), dashdash), leaf); !msg.empty()) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    return kExitUsage;
  }
  // The same for `pack learn` (C13), which runs the pack with them.
  const std::optional<Command> leaf_parent = leaf ? leaf->parent() : std::nullopt;
  const bool takes_args = leaf && (leaf->name() == "run" ||
                                   (leaf->name() == "learn" && leaf_parent && leaf_parent->name() == "pack"));
  if (dashdash != words.end() && takes_args) {
    ctx.passthrough.assign(dashdash + 1, words.end());
    ctx.has_passthrough = true;
    words.erase(dashdash, words.end());
  }
  // CLI11 takes the words in reverse order (argv without the program name).
  std::reverse(words.begin(), words.end());

  try {
    if (auto status = root.parse(words, kExitUsage)) return *status;  // help, or a usage error
  } catch (const std::exception& e) {
    // Library exceptions are caught at module edges; this is the last line of defence.
    print_error("", std::string("internal error: ") + e.what());  // a library's text may quote input
    return 125;
  }
  return ctx.exit_code;
}

}  // namespace

// Nothing may escape main as an exception: the CLI's last line of defence.
int main(int argc, char** argv) {
  soyaos::trace_phase("main");  // bench/startup.sh: exec -> here is loading and static init
  try {
    return run_cli(argc, argv);
  } catch (...) {
    std::fputs("soyaos: internal error\n", stderr);
    return 125;
  }
}
