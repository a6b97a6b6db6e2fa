// `soyaos pack learn --unused` (issue #13 "Shrinking"): which declared grants no run used.
//
// The runs are learn rounds (C13: every layer in force, `learn_observed` events, nothing
// flagged, nothing cached) of a manifest stripped of its fs paths: an fs entry is used when
// a run's attempt needed it (a denial it would have allowed), and it is put back for the
// next round so that the run gets further; rounds stop when one marks nothing new. Egress
// entries stay in force: one is used when the gateway relayed a connection for it, an http
// rule when a request that went upstream matched it, a secret when a request went upstream
// to one of its hosts. What the Comet reads whatever the manifest says (/workdir: the
// entrypoint, the inputs) counts as used by every run, and private scratch (an fs.write path
// outside /workdir: an empty tmpfs directory of the Comet's own, /tmp) is never
// listed, as for `pack test` and lint (SP113). docs/cli.md § soyaos pack learn --unused.
#pragma once

#include <string>
#include <vector>

#include "cli/pack_runs.h"
#include "manifest/manifest.h"

namespace soyaos::cli {

struct UnusedRequest {
  const manifest::Manifest* manifest = nullptr;
  std::vector<PackRunSpec> runs;
  PackRunContext ctx;
  int max_rounds = 5;
  bool json = false;
};

// Prints the report (stdout). Exit 0 every declared grant was used, 1 some were not, 125 a
// Comet could not start, 128+N interrupted.
int report_unused(const UnusedRequest& req);

}  // namespace soyaos::cli
