// Content digests: sha256 of bytes, and of a directory tree in a canonical form.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/result.h"

namespace soyaos {

// Lower-case hex sha256.
std::string sha256_hex(std::string_view data);

// "sha256:HEX" over a canonical listing of the tree: entries sorted by path, each
// contributing its relative path, type (file, dir, symlink), executable bit and content
// digest (or link target). Times and owners are excluded, so the same content always gives
// the same digest. Special files are refused.
Result<std::string> tree_digest(const std::filesystem::path& root);

}  // namespace soyaos
