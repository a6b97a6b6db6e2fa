// The canonical pack archive (SPEC.md T3): a POSIX ustar tar written by our own writer so
// that the same tree always gives the same bytes, hence the same sha256.
//
//   - entries sorted by relative path (byte order), directories before their contents;
//   - regular files 0644, or 0755 when any execute bit is set; directories 0755;
//   - mtime 0, uid/gid 0, uname/gname empty, no pax or GNU extensions; paths longer than
//     100 bytes use the ustar prefix field (a path that does not fit is refused);
//   - the tree is what common/pack_tree.h scan_pack() sees: `.soyaignore` and the default
//     exclusions applied; relative symlinks that stay inside the pack are entries of type
//     '2' (mode 0777, target in the 100-byte linkname field; a longer target is refused);
//     any other symlink, sockets, fifos and devices are refused;
//   - ends with two zero blocks, nothing else.
//
// The extractor accepts only what the writer produces: regular files, directories and
// symlinks with relative, normalised paths (no absolute path, no "." or ".." component),
// created with openat(O_NOFOLLOW | O_EXCL) / symlinkat below a fresh directory, parents
// opened with O_NOFOLLOW, so no entry can land outside it or below a link; the links are
// then checked with the pack rules (check_symlinks), so none points outside the tree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/digest.h"
#include "common/result.h"

namespace soyaos::moon {

// Incremental SHA-256: common/digest.h's.
using Sha256 = soyaos::Sha256;

struct ArchiveInfo {
  std::string digest;       // "sha256:HEX" of the archive bytes
  uint64_t size = 0;        // archive bytes
  std::string tree_digest;  // "sha256:HEX", equal to common/digest.h tree_digest(root)
};

// Writes the canonical archive of `root` to `fd` (from its current offset), hashing as it
// goes. The tree digest is computed from the same reads, so it describes exactly the bytes
// archived.
Result<ArchiveInfo> write_archive(const std::filesystem::path& root, int fd);

// Reads the archive from `fd` to its end, extracting into `dest` (an existing, empty
// directory), and returns "sha256:HEX" of every byte read. A malformed archive or an
// entry that is not allowed is an error; the caller checks the digest and removes `dest`
// on any failure.
Result<std::string> extract_archive(int fd, const std::filesystem::path& dest);

// As extract_archive, and also the size read and the tree digest of what was extracted,
// computed from the entries as they are written, exactly as write_archive computes it (so
// equal to common/digest.h tree_digest(dest) for any archive write_archive produced; an
// archive with other entries or another order gives another digest). With hash_archive
// false the archive's own digest is not computed ("" — for an fd its caller has just
// verified as the bytes arrived): the bytes are then hashed once, per file, for the tree.
// Callers that unpack a stored pack use moon/unpack.h, which adds the digest checks.
Result<ArchiveInfo> extract_archive_info(int fd, const std::filesystem::path& dest, bool hash_archive = true);

// Hashes the whole of `fd` from its current offset: "sha256:HEX".
Result<std::string> digest_fd(int fd);

}  // namespace soyaos::moon
