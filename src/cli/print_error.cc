#include "cli/print_error.h"

#include <cstdio>
#include <string>

#include "common/text.h"

namespace soyaos::cli {

void print_error(std::string_view cmd, std::string_view message) {
  const std::string shown = escape_for_terminal(message);
  if (cmd.empty()) {
    std::fprintf(stderr, "soyaos: %s\n", shown.c_str());
  } else {
    // cmd is ours (a literal or a subcommand name CLI11 matched), but escaping it costs nothing.
    std::fprintf(stderr, "soyaos %s: %s\n", escape_for_terminal(cmd).c_str(), shown.c_str());
  }
}

void print_error(std::string_view cmd, const Error& error) { print_error(cmd, error.describe()); }

}  // namespace soyaos::cli
