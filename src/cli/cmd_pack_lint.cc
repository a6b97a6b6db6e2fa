#include "cli/commands.h"

namespace soyaos::cli {
void register_pack_lint(CLI::App& /*pack*/, CliContext& /*ctx*/) {}
}  // namespace soyaos::cli
