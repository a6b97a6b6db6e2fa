// What a pack directory contains, as everything that reads a pack sees it (SPEC.md T6):
// the pushed archive, the pack digest and the /workdir view of a directory run all start
// from scan_pack(), so a pack is the same wherever it is used.
//
//   - `.git` and `.env*` are excluded by default, then the pack root's `.soyaignore`
//     (gitignore syntax, common/ignore.h) applies; `soyapack.yaml` and `.soyaignore`
//     themselves are always part of the pack;
//   - a symlink is kept when it is relative and resolves, inside the pack, to a file or a
//     directory of the pack (npm `node_modules/.bin/x -> ../x/cli.js`, a venv's
//     `bin/python3 -> python3.11`); an absolute link, a link that leaves the pack (`..`
//     above the root, at any step of a chain), a dangling link or one whose target is
//     excluded, and a loop are refused, naming the link;
//   - sockets, fifos and devices are refused.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace soyaos {

inline constexpr const char* kIgnoreFile = ".soyaignore";

struct PackEntry {
  enum class Type { dir, file, symlink };
  std::string rel;     // relative path, '/'-separated
  Type type = Type::file;
  bool exec = false;   // file: any execute bit
  uint64_t size = 0;   // file
  std::string target;  // symlink: its content
};

struct PackTree {
  std::vector<PackEntry> entries;     // sorted by rel (byte order): directories before their contents
  std::vector<std::string> excluded;  // the topmost excluded paths, sorted (nothing below them is read)
  [[nodiscard]] bool contains(std::string_view rel) const;
};

// Walks `root` (never following a link) applying the default rules and its `.soyaignore`.
// Errors name the offending path (or the `.soyaignore` line).
Result<PackTree> scan_pack(const std::filesystem::path& root);

// Whether the rules exclude `rel` (relative, normalised) or one of its parent directories,
// without walking the tree (the manifest loader's check of the entrypoint and inputs).
Result<bool> pack_excludes(const std::filesystem::path& root, std::string_view rel);

// Checks every symlink of `entries` (any order) against the rules above, resolving
// through the other entries as the kernel would, but never outside them.
Status check_symlinks(const std::vector<PackEntry>& entries);

}  // namespace soyaos
