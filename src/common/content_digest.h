// Digests of what a run consumed and produced (SPEC.md E5): its inputs, its /workdir/out
// tree. Recorded in run_started / run_finished so that a responder can tell which bytes a
// run read and wrote, and so that a result cache entry can be checked against the run
// that produced it (E6).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "common/result.h"

namespace soyaos {

// An --input: the tree digest (common/digest.h tree_digest(), "sha256:…") of a
// directory, or "file:sha256:…" over a regular file's bytes (tagged, so that a file and a
// directory never share a digest). Anything else is an error naming the path.
Result<std::string> input_digest(const std::filesystem::path& input);

// One entry of a collected /workdir/out tree.
struct OutTreeEntry {
  std::string path;    // relative, '/'-separated, no leading "./"
  bool dir = false;
  uint32_t mode = 0;   // permission bits (07777)
  std::string digest;  // files: "sha256:…" of the content
};

// "sha256:HEX" over the entries sorted by path (byte order), each contributing the line
//   PATH \0 "dir" \0 MODE \n            or   PATH \0 "file" \0 MODE \0 sha256:HEX \n
// MODE being the permission bits as 4 octal digits (e.g. 0644). The order of `entries`
// does not matter. docs/events.md `run_finished` documents the same form.
std::string out_tree_digest(std::span<const OutTreeEntry> entries);

// The same over a directory on the host (the collected /workdir/out): directories and
// regular files; anything else there is an error (collection never leaves one).
Result<std::string> out_tree_digest(const std::filesystem::path& root);

}  // namespace soyaos
