// Content digests: sha256 of bytes, and of a directory tree in a canonical form.
#pragma once

#include <cstddef>
#include <memory>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/pack_tree.h"
#include "common/result.h"

namespace soyaos {

// Lower-case hex sha256.
std::string sha256_hex(std::string_view data);

// Incremental sha256 (Nettle's, with the CPU's SHA extensions where it has them; see digest.cc).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  // Lower-case hex; the object is finished afterwards.
  std::string hex();
  // "sha256:" + hex().
  std::string digest() { return "sha256:" + hex(); }

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// "sha256:HEX" over a canonical listing of the pack tree as scan_pack() sees it (excluded
// paths left out, symlinks checked): entries sorted by path, each contributing its
// relative path, type (file, dir, symlink), executable bit and content digest (or link
// target). Times and owners are excluded, so the same content always gives the same digest.
Result<std::string> tree_digest(const std::filesystem::path& root);
// The same over an already scanned tree (the run also needs its exclusions).
Result<std::string> tree_digest(const std::filesystem::path& root, const PackTree& tree);

}  // namespace soyaos
