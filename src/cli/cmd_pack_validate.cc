#include "cli/commands.h"

namespace soyaos::cli {
void register_pack_validate(CLI::App& /*pack*/, CliContext& /*ctx*/) {}
}  // namespace soyaos::cli
