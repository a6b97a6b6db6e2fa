#include "oci/http.h"

#include <curl/curl.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <mutex>

#include "oci/curl_api.h"

namespace soyaos::oci {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

struct Transfer {
  const CurlApi* api = nullptr;
  CURL* curl = nullptr;
  const HttpRequest* req = nullptr;
  HttpResponse* resp = nullptr;
  uint64_t sent = 0;
  std::string sink_error;
  bool too_big = false;
  // Stall detection: the last time a byte moved either way (curl's own low-speed check
  // averages over seconds of history, so a transfer that stops half-way lingers).
  long stall_seconds = 30;
  curl_off_t last_dl = 0, last_ul = 0;
  std::chrono::steady_clock::time_point last_move = std::chrono::steady_clock::now();
  bool stalled = false;
};

int on_progress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t ulnow) {
  auto* t = static_cast<Transfer*>(user);
  const auto now = std::chrono::steady_clock::now();
  if (dlnow != t->last_dl || ulnow != t->last_ul) {
    t->last_dl = dlnow;
    t->last_ul = ulnow;
    t->last_move = now;
    return 0;
  }
  if (now - t->last_move >= std::chrono::seconds(t->stall_seconds)) {
    t->stalled = true;
    return 1;  // aborts (CURLE_ABORTED_BY_CALLBACK)
  }
  return 0;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->resp->headers.clear();  // a 100 Continue (or a proxy's) head before the real one
    return size * n;
  }
  if (const auto colon = line.find(':'); colon != std::string_view::npos) {
    t->resp->headers.emplace(lower(std::string(line.substr(0, colon))), trim(line.substr(colon + 1)));
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view chunk(data, size * n);
  long status = 0;
  (void)t->api->easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->req->sink && status >= 200 && status < 300) {
    if (auto s = t->req->sink(chunk, status); !s) {
      t->sink_error = s.error().describe();
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    return chunk.size();
  }
  if (t->resp->body.size() + chunk.size() > t->req->max_body) {
    t->too_big = true;
    return 0;
  }
  t->resp->body.append(chunk);
  return chunk.size();
}

size_t on_read(char* buf, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const HttpRequest& r = *t->req;
  const size_t want = size * n;
  if (r.body_fd >= 0) {
    const uint64_t left = r.body_len - t->sent;
    if (left == 0) return 0;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(left, want));
    ssize_t got;
    do {
      got = ::pread(r.body_fd, buf, take, static_cast<off_t>(r.body_offset + t->sent));
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
      t->sink_error = got == 0 ? "the file being uploaded shrank" : "read the file being uploaded failed";
      return CURL_READFUNC_ABORT;
    }
    t->sent += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }
  const size_t left = r.body.size() - static_cast<size_t>(t->sent);
  const size_t take = std::min(left, want);
  std::copy_n(r.body.data() + t->sent, take, buf);
  t->sent += take;
  return take;
}

// Adds the operator's CAs to the connection's trust store, beside the system's.
CURLcode on_ssl_ctx(CURL*, void* ssl_ctx, void* user) {
  const auto* pems = static_cast<const std::vector<std::string>*>(user);
  X509_STORE* store = SSL_CTX_get_cert_store(static_cast<SSL_CTX*>(ssl_ctx));
  for (const auto& pem : *pems) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    if (bio == nullptr) return CURLE_OUT_OF_MEMORY;
    while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
      (void)X509_STORE_add_cert(store, cert);  // fails only for a duplicate: harmless
      X509_free(cert);
    }
    BIO_free(bio);
  }
  return CURLE_OK;
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

struct Http::Impl {
  TransportOptions options;
  const CurlApi* api = nullptr;
  std::string load_error;
  CURL* curl = nullptr;
  ~Impl() {
    if (curl != nullptr) api->easy_cleanup(curl);
  }
};

Http::Http(TransportOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  auto api = curl_api();
  if (!api) {
    impl_->load_error = api.error().describe();
    return;
  }
  impl_->api = *api;
  impl_->curl = impl_->api->easy_init();
}
Http::~Http() = default;
Http::Http(Http&&) noexcept = default;
Http& Http::operator=(Http&&) noexcept = default;

Result<HttpResponse> Http::perform(const HttpRequest& req, bool* transient) {
  if (transient != nullptr) *transient = false;
  CURL* c = impl_->curl;
  if (c == nullptr) return make_error(impl_->load_error.empty() ? "libcurl: cannot create a handle" : impl_->load_error);
  const CurlApi& cu = *impl_->api;
  cu.easy_reset(c);  // options go; the connection cache stays
  HttpResponse resp;
  Transfer t{&cu, c, &req, &resp};
  t.stall_seconds = impl_->options.stall_seconds;
  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = cu.slist_append(headers, h.c_str());
  // No "Expect: 100-continue" round trip for uploads (a registry answers at once).
  headers = cu.slist_append(headers, "Expect:");
  const bool has_body = req.body_fd >= 0 || !req.body.empty();
  const uint64_t body_len = req.body_fd >= 0 ? req.body_len : req.body.size();

  (void)cu.easy_setopt(c, CURLOPT_URL, req.url.c_str());
  (void)cu.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  (void)cu.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  (void)cu.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  (void)cu.easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  (void)cu.easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  (void)cu.easy_setopt(c, CURLOPT_CONNECTTIMEOUT, impl_->options.connect_timeout_seconds);
  (void)cu.easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  (void)cu.easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  (void)cu.easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  (void)cu.easy_setopt(c, CURLOPT_USERAGENT, "soyaos-registry-client/0");
  // A 512 KiB receive buffer instead of 16 KiB: a layer arrives in ~32x fewer write
  // callbacks (each one a write(2) and a hash update) and poll/recv rounds.
  (void)cu.easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024L);
  // The environment's proxies do not apply: a registry's credentials go only where the
  // reference says, and tests use loopback.
  (void)cu.easy_setopt(c, CURLOPT_PROXY, "");
  if (!impl_->options.ca_pems.empty()) {
    (void)cu.easy_setopt(c, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx);
    (void)cu.easy_setopt(c, CURLOPT_SSL_CTX_DATA, &impl_->options.ca_pems);
  }
  (void)cu.easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  (void)cu.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  (void)cu.easy_setopt(c, CURLOPT_HEADERDATA, &t);
  (void)cu.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  (void)cu.easy_setopt(c, CURLOPT_WRITEDATA, &t);
  if (req.method == "HEAD") {
    (void)cu.easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.method == "GET") {
    (void)cu.easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    (void)cu.easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    (void)cu.easy_setopt(c, CURLOPT_UPLOAD, 1L);
    (void)cu.easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    (void)cu.easy_setopt(c, CURLOPT_READDATA, &t);
    (void)cu.easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(has_body ? body_len : 0));
  }
  const CURLcode rc = cu.easy_perform(c);
  cu.slist_free_all(headers);
  if (rc != CURLE_OK) {
    std::string why = cu.easy_strerror(rc);
    if (t.too_big) why = "the response is larger than " + std::to_string(req.max_body) + " bytes";
    if (!t.sink_error.empty()) why = t.sink_error;
    if (t.stalled) why = "no data for " + std::to_string(impl_->options.stall_seconds) + " s (stalled)";
    if (rc == CURLE_OPERATION_TIMEDOUT) why = "the connection timed out";
    if (transient != nullptr) {
      *transient = t.stalled || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
                   rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE || rc == CURLE_COULDNT_CONNECT ||
                   rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM;
    }
    return make_error(req.method + " " + req.url + ": " + why);
  }
  (void)cu.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

std::string resolve_url(const std::string& base, const std::string& location) {
  auto api = curl_api();
  if (!api) return "";
  const CurlApi& cu = **api;
  CURLU* u = cu.url();
  if (u == nullptr) return "";
  std::string out;
  if (cu.url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      cu.url_set(u, CURLUPART_URL, location.c_str(), 0) == CURLUE_OK) {
    char* s = nullptr;
    if (cu.url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK && s != nullptr) out = s;
    cu.curl_free_(s);
  }
  cu.url_cleanup(u);
  return out;
}

std::string url_origin(const std::string& url) {
  auto api = curl_api();
  if (!api) return "";
  const CurlApi& cu = **api;
  CURLU* u = cu.url();
  if (u == nullptr) return "";
  std::string out;
  char* scheme = nullptr;
  char* host = nullptr;
  char* port = nullptr;
  if (cu.url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK &&
      cu.url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      cu.url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      cu.url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    out = lower(std::string(scheme) + "://" + host + ":" + port);
  }
  cu.curl_free_(scheme);
  cu.curl_free_(host);
  cu.curl_free_(port);
  cu.url_cleanup(u);
  return out;
}

}  // namespace soyaos::oci
