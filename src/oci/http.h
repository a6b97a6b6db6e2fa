// One HTTP exchange over libcurl, for the registry client (client.h). No redirect is
// followed here (the client decides, per the distribution spec, which ones it follows),
// every response body is bounded, TLS is verified against the system store plus the
// operator's extra CAs (moon.yaml tls.ca_files), and a transfer that moves no byte for
// `stall_seconds` is abandoned.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace soyaos::oci {

struct TransportOptions {
  std::vector<std::string> ca_pems;  // contents of extra PEM files, trusted besides the system store
  long connect_timeout_seconds = 15;
  long stall_seconds = 30;  // abort when no byte moves for this long (SOYAOS_REGISTRY_STALL_SECONDS)
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, PATCH, DELETE
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  // Request body: `body`, or `body_len` bytes of `body_fd` from `body_offset` (pread).
  std::string_view body;
  int body_fd = -1;
  uint64_t body_offset = 0;
  uint64_t body_len = 0;
  // Response body: kept in HttpResponse::body up to `max_body` bytes (more is an error),
  // or, for a 2xx response when `sink` is set, handed to it as it arrives with the status
  // (a sink error aborts the transfer). A non-2xx body always goes to HttpResponse::body.
  std::size_t max_body = std::size_t{4} << 20;
  std::function<Status(std::string_view, long status)> sink;
};

struct HttpResponse {
  long status = 0;
  std::multimap<std::string, std::string> headers;  // names lower-cased
  std::string body;
  // The first value of header `name` (lower-case), or "".
  [[nodiscard]] std::string header(const std::string& name) const;
};

// A libcurl easy handle kept between requests (connections are reused).
class Http {
 public:
  explicit Http(TransportOptions options);
  ~Http();
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;
  Http(Http&&) noexcept;
  Http& operator=(Http&&) noexcept;

  // Performs the exchange. A transport failure (connection refused, TLS verification, a
  // stall, a body over max_body) is an Error; any HTTP status is a response. `transient`
  // is set when a retry may succeed (timeouts, resets, an interrupted transfer).
  Result<HttpResponse> perform(const HttpRequest& req, bool* transient = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Resolves `location` (absolute or relative, as a Location header gives it) against
// `base`; "" when it cannot be parsed.
std::string resolve_url(const std::string& base, const std::string& location);
// The scheme://host[:port] of a URL, lower-cased ("" when it cannot be parsed).
std::string url_origin(const std::string& url);

}  // namespace soyaos::oci
