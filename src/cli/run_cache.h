// The result cache in `soyaos run` (SPEC.md C10, docs/tiers-and-cache.md): before the
// run, the key and a verified replay; after it, storing the result when the run may be
// cached. The cache never fails a run: any problem with it is a warning and the pack runs.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "manifest/manifest.h"
#include "supervisor/run.h"

namespace soyaos::cli {

class RunCache {
 public:
  // Decides whether this run may use the cache (`no_cache`: --no-cache) and computes its
  // key. `request` must be complete, with options.run_id set (a hit uses that run id);
  // `loaded` is its pack's manifest as the command read it (load_pack(request.pack_dir)).
  static RunCache prepare(const std::filesystem::path& home, const supervisor::RunRequest& request,
                          const manifest::LoadResult& loaded, bool no_cache);

  RunCache(RunCache&&) noexcept;
  RunCache& operator=(RunCache&&) noexcept;
  ~RunCache();
  RunCache(const RunCache&) = delete;
  RunCache& operator=(const RunCache&) = delete;

  // On a verified hit: stdout, stderr and /workdir/out replayed, `cache_hit` emitted to
  // the run's sinks and stored in the Moon; returns the exit status. nullopt: run the pack.
  std::optional<int> replay(const supervisor::RunRequest& request);
  // Before run_pack: keep a bounded copy of the output while relaying it.
  void arm(supervisor::RunRequest& request) const;
  // After run_pack (its events stored): stores the result when the run may be cached.
  void store(const supervisor::RunReport& report);

  struct State;

 private:
  explicit RunCache(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace soyaos::cli
