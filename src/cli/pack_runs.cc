#include "cli/pack_runs.h"

#include <stdlib.h>

#include <cstdlib>
#include <system_error>

#include "cli/run_secrets.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

// A fresh private directory for one run's /workdir/out, removed when done.
class TempOut {
 public:
  TempOut() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/soyaos-pack-run-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) root_ = tmpl;
  }
  ~TempOut() {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }
  TempOut(const TempOut&) = delete;
  TempOut& operator=(const TempOut&) = delete;
  [[nodiscard]] bool ok() const { return !root_.empty(); }
  [[nodiscard]] fs::path out() const { return root_ / "out"; }

 private:
  fs::path root_;
};

// Sandbox paths (/workdir/out/REL) of the regular files collected into `dir`.
std::vector<std::string> collected_files(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) {
      files.push_back("/workdir/out/" + it->path().lexically_relative(dir).generic_string());
    }
  }
  return files;
}

}  // namespace

PackRunSpec example_run(const manifest::Example& ex, const fs::path& pack_dir) {
  PackRunSpec spec{ex.name, {}, ex.args};
  if (!ex.input.empty()) spec.inputs.push_back({"", pack_dir / ex.input});
  return spec;
}

PackRunResult run_in_comet(const PackRunContext& ctx, const PackRunSpec& spec,
                           const std::function<void(supervisor::RunRequest&)>& customize) {
  PackRunResult r;
  TempOut tmp;
  if (!tmp.ok()) {
    r.never_ran = true;
    r.error = "cannot create a temporary output directory";
    return r;
  }
  supervisor::RunRequest req;
  req.pack_dir = ctx.pack_dir;
  req.options.inputs = spec.inputs;
  req.options.extra_args = spec.args;
  req.options.out = tmp.out();
  req.capture_output = true;  // the agent's output is the command's to judge, not the terminal's
  req.hooks = ctx.hooks;
  req.network = ctx.network;
  req.moon_config_digest = ctx.moon_config_digest;
  if (ctx.secrets != nullptr) {
    auto run_secrets = secrets_for_another_run(*ctx.secrets);  // C11: a fresh placeholder per run
    if (!run_secrets) {
      r.never_ran = true;
      r.error = "secrets: " + run_secrets.error().describe();
      return r;
    }
    req.secrets = std::move(*run_secrets);
  }
  if (customize) customize(req);

  const auto start = std::chrono::steady_clock::now();
  r.report = supervisor::run_pack(req);
  r.ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  // 125/126 with an error and no time run: the agent never ran (a missing layer, an invalid
  // manifest, a program that cannot be executed...).
  if (!r.report.error.empty() &&
      (r.report.exit_code == supervisor::kExitSetup || r.report.exit_code == supervisor::kExitNotExecutable) &&
      r.report.outcome.duration_us == 0) {
    r.never_ran = true;
    r.error = r.report.error;
    return r;
  }
  r.outputs = collected_files(tmp.out());
  return r;
}

}  // namespace soyaos::cli
