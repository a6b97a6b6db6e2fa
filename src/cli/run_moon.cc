#include "cli/run_moon.h"

#include <cstdio>
#include <unistd.h>

#include <memory>

#include "common/digest.h"
#include "moon/backend.h"

namespace soyaos::cli {
namespace fs = std::filesystem;

Result<supervisor::RunHooks> moon_run_hooks(const fs::path& home) {
  // The Moon this run uses: the daemon when one answers (or SOYAOS_MOON_SOCKET names one),
  // else the embedded Moon of `home` (moon/backend.h).
  auto backend = moon::open_moon(home);
  if (!backend) return backend.error();
  struct State {
    std::unique_ptr<moon::MoonBackend> moon;
    std::optional<moon::PackRecord> pushed;  // the pushed version this directory is, if any
  };
  auto state = std::make_shared<State>(State{std::move(backend.value()), {}});

  supervisor::RunHooks hooks;
  hooks.before_launch = [state](const scope::RunContext& ctx, const supervisor::EmitFn& emit) -> Status {
    auto pushed = state->moon->find_by_digest(ctx.digest);
    if (!pushed) return pushed.error();
    state->pushed = *pushed;
    auto flag = state->moon->active_flag(ctx.pack, ctx.version);
    if (!flag) return flag.error();
    if (*flag) {
      const auto& f = **flag;
      std::fprintf(stderr,
                   "soyaos: warning: %s@%s is flagged: run %s had a capability violation (%s); "
                   "`soyaos pack inspect %s@%s` shows it, `soyaos pack unflag` clears it\n",
                   ctx.pack.c_str(), ctx.version.c_str(), f.run_id.c_str(), f.flagged_at.c_str(),
                   ctx.pack.c_str(), ctx.version.c_str());
      nlohmann::ordered_json violation = nlohmann::ordered_json::parse(f.violation, nullptr, false);
      emit("pack_flagged", {{"flagged_by_run", f.run_id},
                            {"flagged_at", f.flagged_at},
                            {"violation", violation.is_discarded() ? nlohmann::ordered_json(f.violation)
                                                                   : violation}});
    }
    return {};
  };
  hooks.after_run = [state](const scope::RunContext& ctx, const std::vector<nlohmann::ordered_json>& events,
                            const std::vector<supervisor::Violation>& violations) -> Status {
    // Flag first (C8 (4)): a failure to store the events must never leave a version that
    // misbehaved unflagged. The first violation event of the run is the flag's reason.
    Status flag_status;
    if (!violations.empty() && state->pushed) {
      for (const auto& e : events) {
        if (e.value("type", "") != "capability_violation") continue;
        if (auto flagged = state->moon->flag(ctx.pack, ctx.version, ctx.run_id, e); !flagged) {
          flag_status = flagged.error();
        }
        break;
      }
    }
    if (auto s = state->moon->append_events(events); !s) return s;
    return flag_status;
  };
  return hooks;
}

Result<fs::path> pack_dir_for_ref(const fs::path& home, const std::string& text) {
  std::string why;
  auto ref = moon::parse_ref(text, why);
  if (!ref) return make_error(text + ": " + why);
  auto backend = moon::open_moon(home);
  if (!backend) return backend.error();
  auto record = (*backend)->get(*ref);
  if (!record) return record.error();
  std::string hex = record->digest.substr(record->digest.find(':') + 1);
  fs::path dir = home / "run-cache" / hex / "pack";
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    auto digest = tree_digest(dir);
    if (digest && *digest == record->tree_digest) return dir;
    fs::remove_all(dir.parent_path(), ec);  // modified or partial: extract again
  }
  fs::create_directories(dir.parent_path(), ec);
  if (ec) return make_error("create " + dir.parent_path().string(), ec.value());
  // Extract beside, then rename: a concurrent run never sees a half-extracted pack.
  fs::path staging = dir.parent_path() / ("staging-" + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  if (auto pulled = (*backend)->pull(*ref, staging); !pulled) return pulled.error();
  fs::rename(staging, dir, ec);
  if (ec && !fs::exists(dir)) return make_error("rename " + staging.string(), ec.value());
  fs::remove_all(staging, ec);
  return dir;
}

}  // namespace soyaos::cli
