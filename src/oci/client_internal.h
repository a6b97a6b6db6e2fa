// The registry client's internals (client.h), shared by its parts:
//   client.cc            options, descriptors, the transport: one request with auth and
//                        retries (backoff, Retry-After), blob redirects
//   client_auth.cc       the 401 challenge flow (Basic, Bearer tokens)
//   client_blobs.cc      blobs (existence, uploads, mounts, verified downloads) and manifests
//   client_referrers.cc  referrers (the API, else the sha256-HEX tag schema)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/result.h"
#include "oci/client.h"
#include "oci/http.h"

namespace soyaos::oci {
namespace detail {

// Token answers, error bodies and other small answers.
inline constexpr std::size_t kMaxSmallBody = std::size_t{1} << 20;

inline bool is_2xx(long s) { return s >= 200 && s < 300; }
inline bool is_redirect(long s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }
inline bool retryable_status(long s) { return s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

std::string lower(std::string s);
// The registry's error body, short: {"errors":[{"code":..,"message":..}]} or the first line.
std::string error_text(const HttpResponse& r);
// Percent-encodes everything but RFC 3986 unreserved characters.
std::string url_escape(const std::string& s);

}  // namespace detail

struct Client::Impl {
  std::string registry;
  ClientOptions options;
  Http http;
  std::string base;    // scheme://registry/v2/
  std::string origin;  // url_origin(base)
  TransferStats stats;
  bool basic = false;                        // the registry asked for Basic: send it always
  bool last_transient = false;               // send()'s last transport error may pass on a retry
  std::map<std::string, std::string> tokens; // scope -> "Bearer ..."

  Impl(std::string reg, ClientOptions opts);

  // ---- transport (client.cc) ----
  // Sleeps before retry `attempt` (exponential from options.backoff_ms, or the answer's
  // Retry-After; at most 10 s).
  void backoff(int attempt, const HttpResponse* r);
  // A blob GET answered with a redirect (the distribution spec allows them for blobs only):
  // moves `url` to the Location, never from https to http, never to plain http except to
  // the registry itself or an operator-listed insecure origin; `foreign` becomes true once
  // the request leaves the registry's origin (no credentials are sent there).
  Status follow_blob_redirect(std::string& url, const HttpResponse& r, bool& foreign);
  bool insecure_origin(const std::string& url);
  // One request to the registry with auth and, when `retry`, retries. Redirects are
  // returned as responses (the caller decides).
  Result<HttpResponse> send(HttpRequest req, const std::string& scope, bool retry = true);
  static std::string pull_scope(const std::string& repo) { return "repository:" + repo + ":pull"; }
  static std::string push_scope(const std::string& repo) { return "repository:" + repo + ":pull,push"; }

  // ---- auth (client_auth.cc) ----
  [[nodiscard]] std::string basic_header() const;
  // Answers a 401's challenge for `scope`: sets tokens[scope] (or basic) and returns true
  // when a retry with credentials makes sense.
  Result<bool> authenticate(const HttpResponse& r, const std::string& scope);

  // ---- uploads (client_blobs.cc) ----
  // An upload session's next URL, which must stay on the registry's origin (credentials go
  // with it).
  Result<std::string> upload_location(const HttpResponse& r, const std::string& from);
  // One upload of `size` bytes, from `fd` (pread) when it is >= 0, else from `bytes`:
  // monolithic, or in chunks of options.chunk_size.
  Status upload(const std::string& repo, int fd, std::string_view bytes, uint64_t size, const std::string& digest);
  // The whole upload again when a step failed on a retryable answer or transport error.
  Status upload_with_retries(const std::string& repo, int fd, std::string_view bytes, uint64_t size,
                             const std::string& digest);
};

}  // namespace soyaos::oci
