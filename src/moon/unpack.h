// The one way a stored pack archive becomes a directory: the local registry's `pack pull
// NAME@VERSION` (moon/registry.cc) and a registry pack's `pack pull REF` / `run REF`
// (oci/pack.cc) both call unpack_archive(), so both get every check:
//
//   - `dest` must not exist or be an empty directory; the archive is extracted into a fresh
//     temporary sibling and renamed into place only once every check passed, so nothing is
//     ever left at `dest` on failure;
//   - the archive is a regular file of the expected size, and its sha256 is verified
//     BEFORE anything is unpacked (unless the caller verified this very fd as the bytes
//     arrived, `verified`: then it is not read twice);
//   - extraction is moon/archive.h extract_archive_info(): only files, directories and
//     relative links that stay in the tree, normalised paths without "." or "..", created
//     with O_NOFOLLOW | O_EXCL below the fresh directory; the bytes read must hash to the
//     expected digest again when they were hashed (the file may have changed since);
//   - the tree digest of the extracted directory, as a run computes it (scan_pack: the
//     archive's entry order, implicit parents and ignored entries do not change it), must
//     equal the one the record or the pack's config names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/result.h"

namespace soyaos::moon {

struct UnpackExpect {
  std::string what;         // names the archive in errors, e.g. "blob sha256:… of demo@1.0.0"
  std::string digest;       // "sha256:HEX" of the archive (required)
  uint64_t size = 0;        // its size in bytes, checked when size_known
  bool size_known = false;
  std::string tree_digest;  // "sha256:HEX" the extracted tree must have ("" = not checked)
  // The caller hashed this fd's bytes against `digest` as they arrived and kept the fd:
  // they are not hashed again (neither before nor while unpacking).
  bool verified = false;
};

// Unpacks the archive in `fd` (from offset 0) into `dest` with the checks above. Errors
// name `what`; a content that does not hash to `digest` is reported as "does not match its
// digest … tampered with".
Status unpack_archive(int fd, const UnpackExpect& expect, const std::filesystem::path& dest);

}  // namespace soyaos::moon
