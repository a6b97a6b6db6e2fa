// An OCI distribution client for one registry (SPEC.md C12; the OCI distribution spec
// v1.1): blobs (existence checks, monolithic and chunked uploads, cross-repository mounts,
// downloads verified by digest and resumed with Range after an interruption), manifests by
// tag and digest, and referrers (the referrers API, else the sha256-HEX tag schema).
//
// Transport (http.h): https verified against the system store plus moon.yaml tls.ca_files;
// plain http only for a registry the operator lists (registries.insecure in moon.yaml,
// SOYAOS_INSECURE_REGISTRIES). Auth: the registry's 401 challenge decides — Basic, or the
// Bearer token flow (the token endpoint asked for the repository scopes the operation
// needs, with the credentials of credentials.h when there are any, anonymously otherwise).
// Requests that may be repeated are retried on 429 and 5xx and on transport errors, with
// exponential backoff (Retry-After honoured, at most 10 s). Redirects are followed only
// where the distribution spec expects them — blob downloads — and then without the
// registry's credentials when they lead to another origin, and never from https to http.
// Everything read is bounded: manifests and indexes 4 MiB, token answers and error bodies
// 1 MiB, a blob exactly its descriptor's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "oci/credentials.h"
#include "oci/http.h"

namespace soyaos::oci {

inline constexpr const char* kImageManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr const char* kImageIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr const char* kEmptyMediaType = "application/vnd.oci.empty.v1+json";
inline constexpr std::size_t kMaxManifestBytes = std::size_t{4} << 20;

struct Descriptor {
  std::string media_type;
  std::string digest;
  uint64_t size = 0;
  std::string artifact_type;  // optional
  nlohmann::ordered_json annotations = nlohmann::ordered_json::object();
  [[nodiscard]] nlohmann::ordered_json to_json() const;
  // Checks the shape (mediaType string, sha256 digest, size a non-negative integer ≤ 2^53).
  static Result<Descriptor> from_json(const nlohmann::ordered_json& j, const std::string& what);
};

struct ClientOptions {
  TransportOptions transport;
  bool insecure = false;                    // plain http (the operator listed this registry)
  std::vector<std::string> insecure_hosts;  // every HOST:PORT listed (token realms, redirects)
  std::optional<Credentials> credentials;   // none: anonymous
  int max_attempts = 4;
  long backoff_ms = 200;                    // first retry's delay, doubled each time
  uint64_t chunk_size = uint64_t{16} << 20; // blobs larger than this upload in chunks of it
};

// The options for `registry` from the Moon configuration of `home` (tls.ca_files,
// registries.insecure), SOYAOS_INSECURE_REGISTRIES, SOYAOS_REGISTRY_STALL_SECONDS,
// SOYAOS_REGISTRY_CHUNK_SIZE and the Docker config's credentials.
Result<ClientOptions> options_for(const std::filesystem::path& home, const std::string& registry);

struct Fetched {
  std::string bytes;
  std::string media_type;
  std::string digest;  // sha256 of bytes (checked against a pinned reference)
};

struct TransferStats {
  int blobs_uploaded = 0;
  int blobs_present = 0;  // HEAD said it was there: not uploaded
  int blobs_mounted = 0;
  int chunks = 0;
  uint64_t bytes_uploaded = 0;
  uint64_t bytes_downloaded = 0;
  int retries = 0;
  int resumed = 0;
};

class Client {
 public:
  static Result<Client> open(const std::string& registry, ClientOptions options);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  [[nodiscard]] const std::string& registry() const;
  [[nodiscard]] const TransferStats& stats() const;

  // GET /v2/ with auth: ok when the registry accepts the credentials (login).
  Status ping();

  Result<bool> blob_exists(const std::string& repo, const std::string& digest);
  // Uploads `bytes` unless the registry has it (HEAD).
  Status push_blob(const std::string& repo, std::string_view bytes, const std::string& digest);
  // Uploads `size` bytes of `fd` (from offset 0) as `digest` unless present; tries a
  // cross-repository mount from each of `mount_from` (repositories of this registry known
  // to hold it) first.
  Status push_blob_fd(const std::string& repo, int fd, uint64_t size, const std::string& digest,
                      const std::vector<std::string>& mount_from = {});
  // A whole blob in memory, at most `max` bytes, verified.
  Result<std::string> get_blob(const std::string& repo, const Descriptor& d, std::size_t max);
  // Downloads the blob into `fd` (truncated first), resuming after interruptions, and
  // verifies its size and digest; an error leaves `fd`'s content unspecified.
  Status get_blob_to_fd(const std::string& repo, const Descriptor& d, int fd);

  // A manifest or index by tag or digest (at most 4 MiB; its media type must be one of
  // `accept`; by digest, its bytes must hash to it). nullopt when the registry has none.
  Result<std::optional<Fetched>> get_manifest(const std::string& repo, const std::string& reference,
                                              const std::vector<std::string>& accept = {kImageManifest});
  struct Put {
    std::string digest;
    bool subject_processed = false;  // the registry answered OCI-Subject (it keeps referrers)
  };
  Result<Put> put_manifest(const std::string& repo, const std::string& reference, const std::string& bytes,
                           const std::string& media_type);

  // The referrers of `subject_digest` (of type `artifact_type` when not empty): the
  // referrers API, else the tag schema's index (sha256-HEX). A malformed entry of the list
  // (the registry, or whoever can push to it, wrote it) is skipped, not fatal: the others
  // are returned, and `skipped` (when given) counts it and describes the first few. At
  // most kMaxReferrers entries are looked at; the rest are counted as skipped.
  static constexpr std::size_t kMaxReferrers = 1024;
  struct Skipped {
    static constexpr std::size_t kMaxNamed = 3;
    std::size_t count = 0;
    std::vector<std::string> named;  // "manifests[N]: why", at most kMaxNamed
  };
  Result<std::vector<Descriptor>> referrers(const std::string& repo, const std::string& subject_digest,
                                            const std::string& artifact_type = "", Skipped* skipped = nullptr);
  // Pushes an artifact manifest (artifactType, the empty config, one layer holding
  // `blob`, `subject`) and, when the registry does not process subjects, adds it to the
  // tag schema's index. Returns the artifact manifest's descriptor.
  Result<Descriptor> push_referrer(const std::string& repo, const Descriptor& subject,
                                   const std::string& artifact_type, const std::string& blob,
                                   const std::string& blob_media_type,
                                   const nlohmann::ordered_json& annotations = nlohmann::ordered_json::object());

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace soyaos::oci
