// soyaos: the command-line tool. Parses arguments with CLI11 and dispatches; all output
// formatting lives in the cmd_*.cc files. Errors go to stderr, machine output to stdout.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli/commands.h"

#ifndef SOYAOS_VERSION
#define SOYAOS_VERSION "0.0.0"
#endif

namespace {

int run_cli(int argc, char** argv) {
  using namespace soyaos::cli;
  CliContext ctx;
  ctx.color = ::isatty(STDOUT_FILENO) == 1 && std::getenv("NO_COLOR") == nullptr;

  CLI::App app{"soyaos: run AI agent packs in a fail-closed capability sandbox (Comet)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");

  auto* version = app.add_subcommand("version", "Print the version of soyaos");
  version->callback([] { std::printf("soyaos %s\n", SOYAOS_VERSION); });

  register_pack_commands(app, ctx);
  register_run_command(app, ctx);
  register_scope_commands(app, ctx);
  register_doctor_command(app, ctx);
  register_cache_commands(app, ctx);
  register_moon_commands(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return kExitUsage;
  } catch (const std::exception& e) {
    // Library exceptions are caught at module edges; this is the last line of defence.
    std::fprintf(stderr, "soyaos: internal error: %s\n", e.what());
    return 125;
  }
  return ctx.exit_code;
}

}  // namespace

// Nothing may escape main as an exception: the CLI's last line of defence.
int main(int argc, char** argv) {
  try {
    return run_cli(argc, argv);
  } catch (...) {
    std::fputs("soyaos: internal error\n", stderr);
    return 125;
  }
}
