#include "cli/run_moon.h"

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "common/digest.h"
#include "common/text.h"
#include "moon/backend.h"
#include "moon/recorder.h"
#include "moon/semver.h"

namespace soyaos::cli {
namespace fs = std::filesystem;

namespace {

// The newest pushed version of `name` (semver), other than `except`, with no active flag
// (on it or on its content); "" when there is none.
Result<std::string> newest_unflagged(moon::MoonBackend& moon, const std::string& name, const std::string& except) {
  auto all = moon.list();
  if (!all) return all.error();
  std::vector<moon::PackRecord> mine;
  for (auto& p : *all) {
    if (p.name == name && p.version != except) mine.push_back(std::move(p));
  }
  std::sort(mine.begin(), mine.end(),
            [](const auto& a, const auto& b) { return moon::compare_semver(a.version, b.version) > 0; });
  for (const auto& p : mine) {
    auto f = moon.active_flag(p.name, p.version, p.tree_digest);
    if (!f) return f.error();
    if (!*f) return p.version;
  }
  return std::string();
}

}  // namespace

Result<supervisor::RunHooks> moon_run_hooks(const fs::path& home) {
  // The Moon this run uses: the daemon when one answers (or SOYAOS_MOON_SOCKET names one),
  // else the embedded Moon of `home` (moon/backend.h).
  // E4: every event goes to the Moon as it is emitted, through a writer thread that
  // group-commits (moon/recorder.h); the run's first violation flags NAME@VERSION and the
  // digest at once (C8 (4)), flag first. The run's other uses of the Moon (keeping its
  // manifest, querying its flags) run on that writer thread and its connection
  // (RunRecorder::call), after run_started is stored: one moon.db connection per run
  // (issue #16: each parses the schema and rebuilds the WAL index). One recorder per run
  // (`pack test` runs several with the same hooks); the Moon opened now (so that an
  // unusable one refuses the run early) serves the first.
  auto opened = moon::open_moon(home);
  if (!opened) return opened.error();
  struct Recording {
    fs::path home;
    std::unique_ptr<moon::MoonBackend> spare;
    std::string run_id;
    std::unique_ptr<moon::RunRecorder> recorder;
    std::optional<Error> open_error;
  };
  auto rec = std::make_shared<Recording>();
  rec->home = home;
  rec->spare = std::move(opened.value());
  auto recorder_of = [](Recording& r) -> Result<moon::RunRecorder*> {
    if (r.open_error) return *r.open_error;
    if (!r.recorder) return make_error("no event of the run reached the Moon");
    return r.recorder.get();
  };

  supervisor::RunHooks hooks;
  // The manifest of every run, directory runs included (E5): run_started names it by digest.
  hooks.keep_manifest = [rec, recorder_of](const std::string& text) -> Status {
    auto r = recorder_of(*rec);
    if (!r) return r.error();
    return (*r)->call([&](moon::MoonBackend& moon) -> Status {
      auto digest = moon.keep_manifest(text);
      if (!digest) return digest.error();
      return {};
    });
  };
  hooks.before_launch = [rec, recorder_of](const scope::RunContext& ctx, const supervisor::EmitFn& emit) -> Status {
    auto r = recorder_of(*rec);
    if (!r) return r.error();
    // Flagged as NAME@VERSION, or as this content (a directory run flags by digest too).
    std::optional<moon::FlagRecord> flagged;
    std::string newest_version;
    auto queried = (*r)->call([&](moon::MoonBackend& moon) -> Status {
      auto flag = moon.active_flag(ctx.pack, ctx.version, ctx.digest);
      if (!flag) return flag.error();
      if (!*flag) return {};
      flagged = **flag;
      auto newest = newest_unflagged(moon, ctx.pack, ctx.version);
      if (!newest) return newest.error();
      newest_version = *newest;
      return {};
    });
    if (!queried) return queried.error();
    if (!flagged) return {};
    const auto& f = *flagged;
    const std::string* newest = &newest_version;  // as named before: the text below uses *newest
    std::string advice = newest->empty() ? std::string("no unflagged version of ") + ctx.pack + " is pushed"
                                         : "the newest unflagged version is " + ctx.pack + "@" + *newest;
    // A flag read from a registry (cli/remote_flags.h) says where: another host's run.
    const std::string where = f.origin.empty() ? "" : " (" + escape_for_terminal(f.origin) + ")";
    std::fprintf(stderr,
                 "soyaos: warning: %s@%s is flagged%s: run %s had a capability violation (%s); %s; "
                 "`soyaos pack inspect %s@%s` shows it, `soyaos pack unflag %s@%s --reason TEXT` clears it\n",
                 ctx.pack.c_str(), ctx.version.c_str(), where.c_str(), f.run_id.c_str(), f.flagged_at.c_str(),
                 advice.c_str(), ctx.pack.c_str(), ctx.version.c_str(), ctx.pack.c_str(), ctx.version.c_str());
    nlohmann::ordered_json violation = nlohmann::ordered_json::parse(f.violation, nullptr, false);
    emit("pack_flagged", {{"raised", false},
                          {"flagged_by_run", f.run_id},
                          {"flagged_at", f.flagged_at},
                          {"origin", f.origin.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.origin)},
                          {"newest_unflagged", newest->empty() ? nlohmann::ordered_json(nullptr)
                                                               : nlohmann::ordered_json(*newest)},
                          {"violation", violation.is_discarded() ? nlohmann::ordered_json(f.violation) : violation}});
    return {};
  };
  hooks.on_event = [rec](const scope::RunContext& ctx, const scope::Event& event) {
    if (rec->run_id != ctx.run_id) {  // the run's first event: run_started
      rec->recorder.reset();
      rec->open_error.reset();
      rec->run_id = ctx.run_id;
      std::unique_ptr<moon::MoonBackend> backend = std::move(rec->spare);
      if (!backend) {
        auto m = moon::open_moon(rec->home);
        if (!m) {
          rec->open_error = m.error();
          return;
        }
        backend = std::move(m.value());
      }
      rec->recorder = std::make_unique<moon::RunRecorder>(std::move(backend), ctx);
    }
    if (rec->recorder) rec->recorder->push(event);
  };
  hooks.wait_durable = [rec, recorder_of]() -> Status {
    auto r = recorder_of(*rec);
    if (!r) return r.error();
    return (*r)->wait_durable();
  };
  hooks.finish = [rec, recorder_of]() -> Status {
    auto r = recorder_of(*rec);
    if (!r) return r.error();
    return (*r)->finish();
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
