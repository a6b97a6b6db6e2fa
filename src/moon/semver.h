// Semantic Versioning 2.0.0 precedence (semver.org §11), for "a newer version was pushed".
#pragma once

#include <string_view>

namespace soyaos::moon {

// <0, 0, >0 like strcmp. Build metadata is ignored; a pre-release sorts before its
// release; numeric identifiers compare numerically and before alphanumeric ones.
// Inputs are assumed valid (manifest::detail::is_semver); invalid text compares bytewise.
int compare_semver(std::string_view a, std::string_view b);

}  // namespace soyaos::moon
