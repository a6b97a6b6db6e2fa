// One run of a pack in a Comet as `pack test` and `pack learn` make them (review item D2:
// one copy of the loop body instead of two): an example — its input as an unnamed --input,
// its args — or the inputs and args given on the command line; a fresh private
// /workdir/out removed afterwards, the agent's output captured, the Moon's hooks, the
// operator's network policy, and a fresh placeholder for each secret (C11).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "manifest/manifest.h"
#include "policy/operator_network.h"
#include "policy/policy.h"
#include "policy/secrets.h"
#include "supervisor/run.h"

namespace soyaos::cli {

struct PackRunSpec {
  std::string name;  // the example's name, or "the run"
  std::vector<policy::InputSpec> inputs;
  std::vector<std::string> args;
};

// Example `ex` as a run (T6: as an unnamed --input, a directory is /workdir/inputs, a file
// /workdir/inputs/<its name>).
PackRunSpec example_run(const manifest::Example& ex, const std::filesystem::path& pack_dir);

// What every run of one command shares.
struct PackRunContext {
  std::filesystem::path pack_dir;
  supervisor::RunHooks hooks;
  policy::OperatorNetwork network;
  std::string moon_config_digest = "none";
  const std::vector<policy::RunSecret>* secrets = nullptr;  // the resolved values (none: nullptr)
};

struct PackRunResult {
  supervisor::RunReport report;
  // The agent never ran: the Comet could not start (125, or 126 not executable) or the
  // run could not be prepared; `error` says why.
  bool never_ran = false;
  std::string error;
  std::vector<std::string> outputs;  // /workdir/out/REL of each regular file collected
  long long ms = 0;                  // wall time of the run
};

// Runs `spec`; `customize` may adjust the request (learn mode, an amended manifest, hooks)
// before it starts. Never throws.
PackRunResult run_in_comet(const PackRunContext& ctx, const PackRunSpec& spec,
                           const std::function<void(supervisor::RunRequest&)>& customize = {});

}  // namespace soyaos::cli
