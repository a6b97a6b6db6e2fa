// Packs as OCI artifacts (SPEC.md C12; docs/registry.md "The artifact"):
//
//   image manifest v1.1  mediaType application/vnd.oci.image.manifest.v1+json
//                        artifactType application/vnd.soyaos.pack.v0
//     config  application/vnd.soyaos.pack.config.v0+json — {"name","version","tree_digest",
//             "manifest": soyapack.yaml as JSON}, byte for byte the local Moon's config blob
//     layers  [application/vnd.soyaos.pack.v0.tar — the canonical archive (moon/archive.h),
//             the same digest as `soyaos pack push` gives locally]
//     annotations org.opencontainers.image.{title,version,description,source},
//             org.soyaos.pack.tree_digest
//
// Pulled packs are kept under HOME/remote/ (blobs/sha256/HEX: manifests, configs, layers,
// each verified before it is named; refs.json: REF -> manifest digest), so `soyaos run REF`
// works offline once pulled.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"
#include "lint/lint.h"
#include "manifest/manifest.h"
#include "oci/client.h"
#include "oci/reference.h"

namespace soyaos::oci {

struct RemotePack {
  Reference ref;                  // as asked (pinned() to manifest_digest for display)
  std::string manifest_digest;    // the image manifest's sha256
  std::string manifest_bytes;
  Descriptor config;
  Descriptor layer;
  std::string config_bytes;            // the config blob as fetched (hashes to config.digest)
  nlohmann::ordered_json config_json;  // {"name","version","tree_digest","manifest"}
  nlohmann::ordered_json annotations;  // the image manifest's
  std::string name, version, tree_digest;
};

// Checks an image manifest's bytes (media type, artifactType, one config and one layer of
// our media types, sizes) and the config blob's shape; fills `out` but the config.
Status parse_pack_manifest(const std::string& bytes, RemotePack& out);
// Checks the config blob (its bytes already verified against config.digest).
Status parse_pack_config(const std::string& bytes, RemotePack& out);

// The manifest and config of REF from the registry (no layer download).
Result<RemotePack> resolve_pack(Client& client, const Reference& ref);

struct PushReport {
  enum class Outcome { pushed, invalid, lint_errors } outcome = Outcome::pushed;
  RemotePack pack;
  std::vector<manifest::Diagnostic> diagnostics;
  std::vector<lint::Finding> findings;
};
// Validates and lints DIR (errors refuse, as `pack push` does locally), archives it and
// pushes layer, config and manifest to REF (tagged with REF's tag; a pinned REF must equal
// the manifest's digest). Blobs the registry has are not uploaded; the layer is mounted
// from another repository of the registry that HOME's records say holds it.
Result<PushReport> push_pack(Client& client, const std::filesystem::path& home, const std::filesystem::path& dir,
                             const Reference& ref, const std::string& source);

// HOME/remote: the local copies of pulled packs.
class RemoteStore {
 public:
  explicit RemoteStore(std::filesystem::path home) : home_(std::move(home)) {}
  // The last pull of REF (by its text: a tag resolves to what was pulled then), read back
  // from the stored blobs and verified; nullopt when REF was never pulled.
  Result<std::optional<RemotePack>> lookup(const Reference& ref);
  // Downloads the layer (unless stored), verified, then stores manifest and config and
  // records REF -> manifest digest. When it downloaded the layer and `verified_layer` is
  // given, the fd it hashed as the bytes arrived is handed over (for extract()).
  Status fetch(Client& client, const RemotePack& pack, UniqueFd* verified_layer = nullptr);
  // Extracts the stored layer into `dest` (new or empty) with moon/unpack.h: size and
  // digest verified first (not again for `verified_fd`, an fd fetch() handed over), tree
  // digest while unpacking; nothing is left at `dest` on failure.
  Status extract(const RemotePack& pack, const std::filesystem::path& dest, int verified_fd = -1);
  // The repositories of `registry` that records say hold `digest` (mount sources).
  std::vector<std::string> repositories_holding(const std::string& registry, const std::string& digest);
  // Records a push (REF -> manifest) so a later push can mount from it and run REF works.
  Status record(const RemotePack& pack, const std::string& layer_file);
  std::filesystem::path blob_path(const std::string& digest) const;
  // The references recorded in refs.json (pulled or pushed from this home), sorted; a
  // pinned entry that only repeats its tag's (written by the same pull) is left out. A
  // damaged entry is listed with `error` set (the others are still listed); a refs.json
  // that is not a JSON object is an error.
  struct Recorded {
    std::string reference;
    std::string manifest_digest;
    std::string at;     // when it was recorded (RFC 3339)
    std::string error;  // not empty: this entry cannot be used (why)
  };
  Result<std::vector<Recorded>> recorded();

 private:
  Status store_blob(const std::string& digest, const std::string& bytes);
  Status write_ref(const Reference& ref, const std::string& manifest_digest);
  std::filesystem::path home_;
};

}  // namespace soyaos::oci
