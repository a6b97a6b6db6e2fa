// A Diagnostic's line unescaped, for an Error message or JSON: an Error is escaped where it
// is printed (cli/print_error.h, E7), so one built from format(), which escapes, would show
// every backslash doubled. Kept out of manifest.h, which most of the tree includes.
#pragma once

#include <string>

#include "manifest/manifest.h"

namespace soyaos::manifest {

// "FILE:LINE:COL: error: KEYPATH: message" as format() builds it, before escaping: the pack's
// own text raw. Escape it (common/text.h) before it reaches a terminal.
std::string raw_text(const Diagnostic& d);

}  // namespace soyaos::manifest
