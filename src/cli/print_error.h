// The one place a CLI error line is printed (SPEC.md E7, docs/events.md): "soyaos CMD: MESSAGE"
// on stderr, the message escaped for a terminal here and only here. An Error's text often
// quotes what someone else chose (a file of a pulled pack, a name or tag from a registry, an
// archive entry, an output the agent wrote, a Moon daemon's reply, an operator's argument):
// it is built raw and escaped at this print boundary, exactly once, so a backslash shows as
// `\\` (never `\\\\`) and no ESC, CR or BEL byte reaches the terminal. Build no Error from
// text escaped already (use manifest::raw_text for a Diagnostic, not format()).
#pragma once

#include <string_view>

#include "common/result.h"

namespace soyaos::cli {

// "soyaos CMD: MESSAGE\n" ("soyaos: MESSAGE\n" when cmd is empty), MESSAGE = escape_for_terminal(message).
void print_error(std::string_view cmd, std::string_view message);
// The same for an Error: its describe() (message and errno text), escaped once.
void print_error(std::string_view cmd, const Error& error);

}  // namespace soyaos::cli
