// The Moon's pack registry (SPEC.md T3, T4, C8(4)), embedded mode: state under a home
// directory (default_home()), no daemon.
//
//   HOME/moon.db        the index (store.h): packs, flags, events
//   HOME/oci/           an OCI image layout: oci-layout, index.json, blobs/sha256/HEX
//
// Per NAME@VERSION the layout holds three blobs: the canonical pack archive (archive.h,
// media type application/vnd.soyaos.pack.v0.tar), a config blob (the manifest as JSON)
// and an OCI image manifest referencing both, listed in index.json with the annotation
// org.opencontainers.image.ref.name = NAME@VERSION.
//
// Crash safety: every blob is written to a temp file in blobs/sha256/, fsynced and renamed
// to its digest (then the directory is fsynced), so a blob name always holds its full
// content. Under a lock (HOME/oci/.lock), index.json is regenerated (temp + fsync + rename)
// from moon.db plus the new pack, and only then is the moon.db row committed. moon.db is
// the source of truth: a pack is pushed when its row is committed. A push killed between
// the two leaves index.json with one extra entry whose blobs are all present and valid;
// the next push regenerates index.json from moon.db and drops it. So index.json never
// lacks a pushed pack and never names a missing or partial blob.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "lint/lint.h"
#include "manifest/manifest.h"
#include "moon/store.h"

namespace soyaos::moon {

inline constexpr const char* kPackMediaType = "application/vnd.soyaos.pack.v0.tar";
inline constexpr const char* kConfigMediaType = "application/vnd.soyaos.pack.config.v0+json";
inline constexpr const char* kArtifactType = "application/vnd.soyaos.pack.v0";

// NAME@VERSION as typed by the user.
struct PackRef {
  std::string name;
  std::string version;
  [[nodiscard]] std::string str() const { return name + "@" + version; }
};
// Parses NAME@VERSION (NAME as manifest `name`, VERSION semver). On failure `why` says
// what is wrong.
std::optional<PackRef> parse_ref(std::string_view text, std::string& why);

enum class PushOutcome {
  pushed,          // stored now
  already_pushed,  // the same name@version with identical content was there: nothing done
  conflict,        // name@version is there with different content: refused
  invalid,         // the manifest failed validation (diagnostics)
  lint_errors,     // lint reported errors (findings)
};
const char* to_string(PushOutcome);

struct PushResult {
  PushOutcome outcome = PushOutcome::pushed;
  PackRecord pack;                                // pushed or already there (conflict: the stored one)
  std::string attempted_digest;                   // conflict: the digest of what was pushed
  std::vector<manifest::Diagnostic> diagnostics;  // invalid
  std::vector<lint::Finding> findings;            // lint warnings (and errors)
};

class Registry {
 public:
  // Opens HOME/moon.db and HOME/oci/ (both created when missing).
  static Result<Registry> open(const std::filesystem::path& home);

  [[nodiscard]] const std::filesystem::path& home() const { return home_; }
  Store& store() { return store_; }

  // Validates, lints, archives and stores the pack in `dir`. System failures are errors;
  // refusals are outcomes. Emits `pack_pushed` into the store when pushed, recording
  // `actor` (who pushed: in daemon mode the client's SO_PEERCRED uid).
  Result<PushResult> push(const std::filesystem::path& dir, const Actor& actor);

  // Extracts NAME@VERSION into `dest`, which must not exist or be an empty directory.
  // The archive is verified against its digest while it is read; on any failure nothing
  // is left at `dest` (extraction goes to a sibling temp dir renamed into place).
  Result<PackRecord> pull(const PackRef& ref, const std::filesystem::path& dest);

  // The pack, or an error "NAME@VERSION is not in the registry".
  Result<PackRecord> get(const PackRef& ref);
  Result<std::vector<PackRecord>> list() { return store_.packs(); }

  // ---- flags (C8(4)) ----
  // Flags NAME@VERSION and `digest` (the tree digest of the pack that ran; a directory
  // run flags too) after a run with a violation, and stores the `pack_flagged` event that
  // says so (data.run_id: the run that caused it). `violation` is the run's
  // capability_violation event. One flag per run: a second call with the same run_id is
  // ignored (returns false, no event). A flag stays until unflag(): a newer version does
  // not clear it. `actor`: the user whose run raised it (daemon: the client's uid).
  Result<bool> flag(const std::string& name, const std::string& version, const std::string& digest,
                    const std::string& run_id, const nlohmann::ordered_json& violation, const Actor& actor);
  // The newest flag not cleared of NAME@VERSION or of `digest` (when not empty). nullopt
  // when not flagged.
  Result<std::optional<FlagRecord>> active_flag(const std::string& name, const std::string& version,
                                                const std::string& digest = "");
  Result<std::vector<FlagRecord>> flags(const std::string& name, const std::string& version,
                                        const std::string& digest = "") {
    return store_.flags(name, version, digest);
  }
  // Clears every flag of NAME@VERSION not cleared yet (and those raised on its tree digest
  // when it is pushed), recording `actor` and `reason` (required, not blank) and storing a
  // `pack_unflagged` event. Returns how many were cleared (0: nothing was flagged, no event).
  Result<int> unflag(const std::string& name, const std::string& version, const std::string& reason,
                     const Actor& actor);

  // The pushed pack whose tree digest (common/digest.h tree_digest(), what `soyaos run`
  // computes for a pack directory) or archive digest is `digest` ("sha256:HEX"); the most
  // recently pushed when several versions share a tree. nullopt when none.
  Result<std::optional<PackRecord>> find_by_digest(const std::string& digest) { return store_.pack_by_digest(digest); }

  // Checks the OCI layout against moon.db: every pack's three blobs exist and match
  // their digests, index.json lists every stored pack, and every blob index.json names
  // exists and matches. Problems, one a line (none: consistent).
  Result<std::vector<std::string>> verify();
  // verify(), plus every file under blobs/sha256/ (those no pushed pack references too)
  // hashed and compared with its name: all problems, those of a pack prefixed with its
  // NAME@VERSION. For `soyaos moon check`.
  Result<std::vector<std::string>> verify_all();

 private:
  Registry(std::filesystem::path home, Store store) : home_(std::move(home)), store_(std::move(store)) {}
  // Rewrites index.json from moon.db plus `extra` (the pack being pushed). Call with the
  // layout lock held.
  Status write_index(const PackRecord* extra);
  std::filesystem::path home_;
  Store store_;
};

// The manifest's YAML as JSON (mappings in file order; plain scalars `true`/`false`,
// `null`/`~` and integers typed, everything else a string). For the OCI config blob.
Result<nlohmann::ordered_json> yaml_to_json(const std::string& yaml_text);

}  // namespace soyaos::moon
