// A copy of a system shared library with one exported name renamed (same length, so the
// ELF stays valid): the library still loads, but no longer has that function — what a
// library of another ABI looks like to soyaos's dlopen()ed libraries (common/dl_library.h).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace soyaos::testing {

// Writes `system_library` to dir/<its file name> with `name` in its dynamic string table
// replaced by `name` with its last character changed; returns dir.
inline std::filesystem::path library_lacking(const std::filesystem::path& system_library, const std::string& name,
                                             const std::filesystem::path& dir) {
  std::ifstream in(system_library, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string needle = std::string(1, '\0') + name + std::string(1, '\0');
  const auto at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << name << " not in " << system_library;
  if (at != std::string::npos) bytes[at + name.size()] = bytes[at + name.size()] == 'X' ? 'Y' : 'X';
  std::filesystem::create_directories(dir);
  std::ofstream(dir / system_library.filename(), std::ios::binary) << bytes;
  return dir;
}

}  // namespace soyaos::testing
