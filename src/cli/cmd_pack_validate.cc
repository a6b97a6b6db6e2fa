// `soyaos pack validate [DIR]` (SPEC.md T1): checks the manifest's shape (M1-M6) and the
// pack's files. Prints `ok  NAME@VERSION` on stdout and exits 0, or one line per error
// on stderr (FILE:LINE:COL: error: KEYPATH: message) and exits 1.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "manifest/manifest.h"

namespace soyaos::cli {

void register_pack_validate(Command pack, CliContext& ctx) {
  auto dir = std::make_shared<std::string>(".");
  auto cmd = pack.add_subcommand("validate", "Check a pack's soyapack.yaml (shape, rules M1-M6, files)");
  cmd.add_option("DIR", *dir, "Pack directory (default: the current directory)");
  cmd.callback([dir, &ctx] {
    const auto result = manifest::load_pack(*dir);
    if (result.manifest) {
      std::printf("ok  %s@%s\n", result.manifest->name.c_str(), result.manifest->version.c_str());
      (void)std::fflush(stdout);
      ctx.exit_code = 0;
      return;
    }
    for (const auto& d : result.errors) std::fprintf(stderr, "%s\n", d.format().c_str());
    if (result.errors.empty()) std::fprintf(stderr, "%s/soyapack.yaml: error: invalid manifest\n", dir->c_str());
    ctx.exit_code = 1;
  });
}

}  // namespace soyaos::cli
