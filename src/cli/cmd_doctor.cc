#include "cli/commands.h"

namespace soyaos::cli {
void register_doctor_command(CLI::App& /*app*/, CliContext& /*ctx*/) {}
}  // namespace soyaos::cli
