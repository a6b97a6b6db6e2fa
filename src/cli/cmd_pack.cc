// The `soyaos pack` command group; each subcommand lives in its own cmd_pack_*.cc.
#include "cli/commands.h"

namespace soyaos::cli {

void register_pack_commands(Command app, CliContext& ctx) {
  auto pack = app.add_subcommand("pack", "Validate, lint, push and pull SoyaPacks");
  pack.require_subcommand(1);
  register_pack_init(pack, ctx);
  register_pack_validate(pack, ctx);
  register_pack_lint(pack, ctx);
  register_pack_registry(pack, ctx);
  register_pack_test(pack, ctx);
  register_pack_sign(pack, ctx);
  register_pack_learn(pack, ctx);
}

}  // namespace soyaos::cli
