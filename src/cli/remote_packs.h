// Packs in OCI registries from the command line (SPEC.md C12, docs/registry.md):
// `pack push [DIR] REF`, `pack pull REF`, `pack inspect REF`, `run REF`, `login`, `logout`.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/result.h"

namespace soyaos::cli {

int remote_push(const std::string& dir, const std::string& ref, const std::string& source);
int remote_pull(const std::string& ref, const std::string& out, bool approve);
int remote_inspect(const std::string& ref, const std::string& format);

// For `run REF` and `pack test REF`: the pack directory of REF — pulled on first use (the
// gate consulted), then from HOME/remote without the network (a tag means what was pulled
// last; `soyaos pack pull REF` updates it). Errors say why; the caller exits 125.
struct RemoteDir {
  std::filesystem::path dir;
  int exit_code = 0;  // set (with `error`) when the gate refused
  std::string error;
};
RemoteDir remote_pack_dir(const std::filesystem::path& home, const std::string& ref);

// For `pack list`: the registry packs HOME holds (pulled, or pushed from here), one JSON
// object each: reference, digest (the image manifest's), name, version, archive_digest,
// tree_digest, recorded_at, approved, runs, consent (remote_gate.h ConsentSummary); a local
// copy that cannot be read has `error` instead of the pack's fields.
Result<nlohmann::ordered_json> remote_list(const std::filesystem::path& home);

void register_login_commands(Command app, CliContext& ctx);  // login, logout

}  // namespace soyaos::cli
