// Lint rules about secrets (SPEC.md M7, C11): SP120 (a secret bound to a host no https or
// http entry covers) and SP121 (a literal in the pack that looks like a credential).
// Internal to src/lint; lint.cc calls lint_secrets().
#pragma once

#include <vector>

#include "lint/lint.h"

namespace soyaos::lint::detail {

void lint_secrets(const manifest::Manifest& m, std::vector<Finding>& out);

}  // namespace soyaos::lint::detail
