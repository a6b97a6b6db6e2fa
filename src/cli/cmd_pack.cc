#include "cli/commands.h"

namespace soyaos::cli {
void register_pack_commands(CLI::App& /*app*/, CliContext& /*ctx*/) {}
}  // namespace soyaos::cli
