#include "oci/client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/digest.h"
#include "moon/config.h"
#include "oci/reference.h"

namespace soyaos::oci {
namespace {

using json = nlohmann::ordered_json;

constexpr std::size_t kMaxSmallBody = std::size_t{1} << 20;
constexpr uint64_t kMaxJsonInt = uint64_t{1} << 53;
constexpr const char* kEmptyDigest = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

bool is_2xx(long s) { return s >= 200 && s < 300; }
bool is_redirect(long s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }
bool retryable_status(long s) { return s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The registry's error body, short: {"errors":[{"code":..,"message":..}]} or the first line.
std::string error_text(const HttpResponse& r) {
  json j = json::parse(r.body, nullptr, false);
  std::string out;
  if (j.is_object() && j.contains("errors") && j["errors"].is_array()) {
    for (const auto& e : j["errors"]) {
      if (!e.is_object()) continue;
      std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
      std::string msg = e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
      out += (out.empty() ? "" : "; ") + code + (msg.empty() ? "" : ": " + msg);
    }
  }
  if (out.empty()) out = r.body.substr(0, std::min<std::size_t>(r.body.find('\n'), 200));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return "HTTP " + std::to_string(r.status) + (out.empty() ? "" : " (" + out.substr(0, 300) + ")");
}

// WWW-Authenticate: SCHEME k="v", k=v, ...
struct Challenge {
  std::string scheme;  // lower-case
  std::map<std::string, std::string> params;
};

Challenge parse_challenge(const std::string& h) {
  Challenge c;
  std::size_t i = 0;
  while (i < h.size() && h[i] != ' ') ++i;
  c.scheme = lower(h.substr(0, i));
  while (i < h.size()) {
    while (i < h.size() && (h[i] == ' ' || h[i] == ',')) ++i;
    const std::size_t k0 = i;
    while (i < h.size() && h[i] != '=' && h[i] != ',') ++i;
    std::string key = lower(h.substr(k0, i - k0));
    if (i >= h.size() || h[i] != '=') continue;
    ++i;
    std::string value;
    if (i < h.size() && h[i] == '"') {
      ++i;
      while (i < h.size() && h[i] != '"') {
        if (h[i] == '\\' && i + 1 < h.size()) ++i;
        value += h[i++];
      }
      ++i;
    } else {
      while (i < h.size() && h[i] != ',') value += h[i++];
    }
    c.params[key] = value;
  }
  return c;
}

std::string url_escape(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string base64(const std::string& in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += tbl[v & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += i + 1 < in.size() ? tbl[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

long env_long(const char* name, long dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != nullptr && *end == '\0' && n > 0 ? n : dflt;
}

}  // namespace

json Descriptor::to_json() const {
  json j = {{"mediaType", media_type}, {"digest", digest}, {"size", size}};
  if (!artifact_type.empty()) j["artifactType"] = artifact_type;
  if (annotations.is_object() && !annotations.empty()) j["annotations"] = annotations;
  return j;
}

Result<Descriptor> Descriptor::from_json(const json& j, const std::string& what) {
  if (!j.is_object()) return make_error(what + ": not a descriptor object");
  Descriptor d;
  auto mt = j.find("mediaType");
  auto dg = j.find("digest");
  auto sz = j.find("size");
  if (mt == j.end() || !mt->is_string()) return make_error(what + ": mediaType missing or not a string");
  if (dg == j.end() || !dg->is_string() || !valid_digest(dg->get<std::string>())) {
    return make_error(what + ": digest missing or not sha256:<64 hex>");
  }
  if (sz == j.end() || !sz->is_number_unsigned() || sz->get<uint64_t>() > kMaxJsonInt) {
    return make_error(what + ": size missing or not a non-negative integer");
  }
  d.media_type = mt->get<std::string>();
  d.digest = dg->get<std::string>();
  d.size = sz->get<uint64_t>();
  if (auto at = j.find("artifactType"); at != j.end() && at->is_string()) d.artifact_type = at->get<std::string>();
  if (auto an = j.find("annotations"); an != j.end() && an->is_object()) d.annotations = *an;
  return d;
}

Result<ClientOptions> options_for(const std::filesystem::path& home, const std::string& registry) {
  ClientOptions o;
  auto cfg = moon::load_moon_config(home);
  if (!cfg.config) {
    std::string msg = "moon configuration invalid";
    for (const auto& e : cfg.errors) msg += "\n" + e.format();
    return make_error(msg);
  }
  o.insecure_hosts = cfg.config->insecure_registries;
  if (const char* env = std::getenv("SOYAOS_INSECURE_REGISTRIES"); env != nullptr) {
    std::string_view s = env;
    while (!s.empty()) {
      const auto comma = s.find(',');
      std::string item(s.substr(0, comma));
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      if (!item.empty()) o.insecure_hosts.push_back(lower(item));
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
  }
  o.insecure = std::find(o.insecure_hosts.begin(), o.insecure_hosts.end(), registry) != o.insecure_hosts.end();
  // The CA files were read and checked by load_moon_config; read again for their PEM.
  for (const auto& path : cfg.config->network.tls_ca_files) {
    std::FILE* f = std::fopen(path.c_str(), "rbe");
    if (f == nullptr) return errno_error("open " + path);
    std::string pem;
    char buf[8192];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && pem.size() <= moon::kMaxCaFileBytes) pem.append(buf, n);
    (void)std::fclose(f);
    o.transport.ca_pems.push_back(std::move(pem));
  }
  o.transport.stall_seconds = env_long("SOYAOS_REGISTRY_STALL_SECONDS", o.transport.stall_seconds);
  o.chunk_size = static_cast<uint64_t>(env_long("SOYAOS_REGISTRY_CHUNK_SIZE", static_cast<long>(o.chunk_size)));
  o.backoff_ms = env_long("SOYAOS_REGISTRY_BACKOFF_MS", o.backoff_ms);
  auto creds = find_credentials(registry);
  if (!creds) return creds.error();
  o.credentials = std::move(*creds);
  return o;
}

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

  Impl(std::string reg, ClientOptions opts)
      : registry(std::move(reg)), options(std::move(opts)), http(options.transport) {
    base = std::string(options.insecure ? "http://" : "https://") + registry + "/v2/";
    origin = url_origin(base);
  }

  void backoff(int attempt, const HttpResponse* r) {
    long ms = options.backoff_ms << std::min(attempt, 6);
    if (r != nullptr) {
      const std::string ra = r->header("retry-after");
      if (!ra.empty() && std::all_of(ra.begin(), ra.end(), ::isdigit) && ra.size() < 4) ms = std::stol(ra) * 1000;
    }
    ++stats.retries;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 10000L)));
  }

  // A blob GET answered with a redirect (the distribution spec allows them for blobs only):
  // moves `url` to the Location, never from https to http, never to plain http except to
  // the registry itself or an operator-listed insecure origin; `foreign` becomes true once
  // the request leaves the registry's origin (no credentials are sent there).
  Status follow_blob_redirect(std::string& url, const HttpResponse& r, bool& foreign) {
    std::string next = resolve_url(url, r.header("location"));
    if (next.empty()) return make_error("GET " + url + ": a redirect without a usable Location");
    if (url.rfind("https://", 0) == 0 && next.rfind("https://", 0) != 0) {
      return make_error("GET " + url + ": redirected from https to " + next + "; refused");
    }
    if (next.rfind("http://", 0) == 0 && !insecure_origin(next) && url_origin(next) != origin) {
      return make_error("GET " + url + ": redirected to plain http " + next + "; refused");
    }
    foreign = foreign || url_origin(next) != origin;
    url = std::move(next);
    return {};
  }

  bool insecure_origin(const std::string& url) {
    const std::string o = url_origin(url);
    for (const auto& h : options.insecure_hosts) {
      if (o == "http://" + lower(h)) return true;
    }
    return false;
  }

  std::string basic_header() const {
    const auto& c = *options.credentials;
    return "Authorization: Basic " + base64(c.username + ":" + c.password);
  }

  // Answers a 401's challenge for `scope`: sets tokens[scope] (or basic) and returns true
  // when a retry with credentials makes sense.
  Result<bool> authenticate(const HttpResponse& r, const std::string& scope) {
    const Challenge ch = parse_challenge(r.header("www-authenticate"));
    if (ch.scheme == "basic") {
      if (!options.credentials || options.credentials->username.empty()) return false;
      if (basic) return false;  // already sent: the credentials are wrong
      basic = true;
      return true;
    }
    if (ch.scheme != "bearer") return false;
    auto realm_it = ch.params.find("realm");
    if (realm_it == ch.params.end() || realm_it->second.empty()) return make_error(registry + ": a Bearer challenge without a realm");
    const std::string realm = realm_it->second;
    const std::string realm_origin = url_origin(realm);
    if (realm_origin.rfind("https://", 0) != 0 && !(realm_origin.rfind("http://", 0) == 0 && insecure_origin(realm))) {
      return make_error(registry + ": the token realm " + realm +
                        " is not https (plain http only for registries listed as insecure)");
    }
    std::string url = realm + (realm.find('?') == std::string::npos ? "?" : "&");
    if (auto s = ch.params.find("service"); s != ch.params.end()) url += "service=" + url_escape(s->second) + "&";
    std::string scopes = scope;
    if (auto s = ch.params.find("scope"); s != ch.params.end() && scopes.find(s->second) == std::string::npos) {
      scopes += " " + s->second;
    }
    std::string_view sv = scopes;
    while (!sv.empty()) {
      const auto sp = sv.find(' ');
      const std::string one(sv.substr(0, sp));
      if (!one.empty()) url += "scope=" + url_escape(one) + "&";
      if (sp == std::string_view::npos) break;
      sv.remove_prefix(sp + 1);
    }
    url.pop_back();
    HttpRequest req;
    req.url = url;
    req.max_body = kMaxSmallBody;
    std::string form;
    if (options.credentials && !options.credentials->identity_token.empty()) {
      req.method = "POST";
      form = "grant_type=refresh_token&client_id=soyaos&refresh_token=" +
             url_escape(options.credentials->identity_token);
      if (auto s = ch.params.find("service"); s != ch.params.end()) form += "&service=" + url_escape(s->second);
      form += "&scope=" + url_escape(scopes);
      req.url = realm;
      req.body = form;
      req.headers.emplace_back("Content-Type: application/x-www-form-urlencoded");
    } else if (options.credentials && !options.credentials->username.empty()) {
      req.headers.push_back(basic_header());
    }
    HttpResponse resp;
    for (int attempt = 0;; ++attempt) {
      bool transient = false;
      auto got = http.perform(req, &transient);
      if (!got) {
        if (transient && attempt + 1 < options.max_attempts) {
          backoff(attempt, nullptr);
          continue;
        }
        return got.error();
      }
      resp = std::move(*got);
      if (retryable_status(resp.status) && attempt + 1 < options.max_attempts) {
        backoff(attempt, &resp);
        continue;
      }
      break;
    }
    if (resp.status == 401 || resp.status == 403) {
      return make_error(registry + ": the token service refused the credentials (" + error_text(resp) +
                        "); check `soyaos login " + registry + "`");
    }
    if (!is_2xx(resp.status)) return make_error(registry + ": token request failed: " + error_text(resp));
    json j = json::parse(resp.body, nullptr, false);
    std::string token;
    if (j.is_object()) {
      for (const char* k : {"token", "access_token"}) {
        if (j.contains(k) && j[k].is_string() && !j[k].get<std::string>().empty()) {
          token = j[k].get<std::string>();
          break;
        }
      }
    }
    if (token.empty() || token.find_first_of("\r\n") != std::string::npos) {
      return make_error(registry + ": the token service's answer holds no token");
    }
    tokens[scope] = "Authorization: Bearer " + token;
    return true;
  }

  // One request to the registry with auth and, when `retry`, retries. Redirects are
  // returned as responses (the caller decides).
  Result<HttpResponse> send(HttpRequest req, const std::string& scope, bool retry = true) {
    const std::size_t base_headers = req.headers.size();
    bool authed = false;
    for (int attempt = 0;; ++attempt) {
      req.headers.resize(base_headers);
      if (auto t = tokens.find(scope); t != tokens.end()) {
        req.headers.push_back(t->second);
      } else if (basic && options.credentials) {
        req.headers.push_back(basic_header());
      }
      bool transient = false;
      auto r = http.perform(req, &transient);
      last_transient = transient;
      if (!r) {
        if (retry && transient && attempt + 1 < options.max_attempts) {
          backoff(attempt, nullptr);
          continue;
        }
        return r.error();
      }
      if (r->status == 401 && !authed) {
        authed = true;
        auto again = authenticate(*r, scope);
        if (!again) return again.error();
        if (*again) {
          --attempt;  // the auth round trip is not a failed attempt
          continue;
        }
      }
      if (r->status == 401) {
        return make_error(req.method + " " + req.url + ": unauthorized (" + error_text(*r) + "); " +
                          (options.credentials ? "the credentials for " + registry + " were refused"
                                               : "no credentials for " + registry + ": soyaos login " + registry));
      }
      if (retry && retryable_status(r->status) && attempt + 1 < options.max_attempts) {
        backoff(attempt, &*r);
        continue;
      }
      return r;
    }
  }

  static std::string pull_scope(const std::string& repo) { return "repository:" + repo + ":pull"; }
  static std::string push_scope(const std::string& repo) { return "repository:" + repo + ":pull,push"; }

  // An upload session's next URL, which must stay on the registry's origin (credentials go
  // with it).
  Result<std::string> upload_location(const HttpResponse& r, const std::string& from) {
    const std::string loc = r.header("location");
    if (loc.empty()) return make_error(registry + ": the upload answer has no Location");
    std::string url = resolve_url(from, loc);
    if (url.empty() || url_origin(url) != origin) {
      return make_error(registry + ": the upload Location " + loc + " leaves the registry; refused");
    }
    return url;
  }

  Status upload(const std::string& repo, int fd, std::string_view bytes, uint64_t size, const std::string& digest) {
    last_transient = false;
    const std::string scope = push_scope(repo);
    HttpRequest start;
    start.method = "POST";
    start.url = base + repo + "/blobs/uploads/";
    start.max_body = kMaxSmallBody;
    auto r = send(start, scope);
    if (!r) return r.error();
    if (r->status != 202) return make_error("start the upload of " + digest + " to " + repo + ": " + error_text(*r));
    auto loc = upload_location(*r, start.url);
    if (!loc) return loc.error();
    std::string url = *loc;
    uint64_t chunk = options.chunk_size;
    if (const std::string min = r->header("oci-chunk-min-length"); !min.empty() && min.size() < 12 &&
                                                                   std::all_of(min.begin(), min.end(), ::isdigit)) {
      chunk = std::max<uint64_t>(chunk, std::stoull(min));
    }
    auto body_of = [&](HttpRequest& q, uint64_t off, uint64_t len) {
      if (fd >= 0) {
        q.body_fd = fd;
        q.body_offset = off;
        q.body_len = len;
      } else {
        q.body = bytes.substr(off, len);
      }
    };
    uint64_t sent = 0;
    if (chunk > 0 && size > chunk) {
      while (sent < size) {
        const uint64_t len = std::min(chunk, size - sent);
        HttpRequest patch;
        patch.method = "PATCH";
        patch.url = url;
        patch.max_body = kMaxSmallBody;
        patch.headers = {"Content-Type: application/octet-stream",
                         "Content-Range: " + std::to_string(sent) + "-" + std::to_string(sent + len - 1)};
        body_of(patch, sent, len);
        auto p = send(patch, scope, /*retry=*/false);  // a chunk is not idempotent
        if (!p) return p.error();
        if (p->status != 202) return make_error("upload a chunk of " + digest + " to " + repo + ": " + error_text(*p));
        auto next = upload_location(*p, url);
        if (!next) return next.error();
        url = *next;
        sent += len;
        ++stats.chunks;
        stats.bytes_uploaded += len;
      }
    }
    HttpRequest put;
    put.method = "PUT";
    put.url = url + (url.find('?') == std::string::npos ? "?" : "&") + "digest=" + url_escape(digest);
    put.max_body = kMaxSmallBody;
    put.headers = {"Content-Type: application/octet-stream"};
    if (sent < size) {
      body_of(put, sent, size - sent);
      stats.bytes_uploaded += size - sent;
    }
    auto p = send(put, scope, /*retry=*/false);
    if (!p) return p.error();
    if (p->status != 201) return make_error("finish the upload of " + digest + " to " + repo + ": " + error_text(*p));
    ++stats.blobs_uploaded;
    return {};
  }

  // The whole upload again when a step failed on a retryable answer or transport error.
  Status upload_with_retries(const std::string& repo, int fd, std::string_view bytes, uint64_t size,
                             const std::string& digest) {
    for (int attempt = 0;; ++attempt) {
      auto s = upload(repo, fd, bytes, size, digest);
      if (s || attempt + 1 >= options.max_attempts) return s;
      const std::string& m = s.error().message;
      // A 5xx or 429 at any step, a lost upload session (404) or a transport error: the
      // whole upload again (a chunk cannot be replayed on its own).
      const bool retryable = m.find("HTTP 5") != std::string::npos || m.find("HTTP 429") != std::string::npos ||
                             m.find("HTTP 404") != std::string::npos || last_transient;
      if (!retryable) return s;
      backoff(attempt, nullptr);
    }
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

Result<Client> Client::open(const std::string& registry, ClientOptions options) {
  return Client(std::make_unique<Impl>(registry, std::move(options)));
}

const std::string& Client::registry() const { return impl_->registry; }
const TransferStats& Client::stats() const { return impl_->stats; }

Status Client::ping() {
  HttpRequest req;
  req.url = impl_->base;
  req.max_body = kMaxSmallBody;
  auto r = impl_->send(req, "");
  if (!r) return r.error();
  if (!is_2xx(r->status)) return make_error("GET " + req.url + ": " + error_text(*r));
  return {};
}

Result<bool> Client::blob_exists(const std::string& repo, const std::string& digest) {
  HttpRequest req;
  req.method = "HEAD";
  req.url = impl_->base + repo + "/blobs/" + digest;
  // A registry may redirect a blob HEAD to its storage: a redirect answer means it has it.
  auto r = impl_->send(req, Impl::pull_scope(repo));
  if (!r) return r.error();
  if (r->status == 200 || is_redirect(r->status)) return true;
  if (r->status == 404) return false;
  return make_error("HEAD " + req.url + ": " + error_text(*r));
}

Status Client::push_blob(const std::string& repo, std::string_view bytes, const std::string& digest) {
  auto has = blob_exists(repo, digest);
  if (!has) return has.error();
  if (*has) {
    ++impl_->stats.blobs_present;
    return {};
  }
  return impl_->upload_with_retries(repo, -1, bytes, bytes.size(), digest);
}

Status Client::push_blob_fd(const std::string& repo, int fd, uint64_t size, const std::string& digest,
                            const std::vector<std::string>& mount_from) {
  auto has = blob_exists(repo, digest);
  if (!has) return has.error();
  if (*has) {
    ++impl_->stats.blobs_present;
    return {};
  }
  for (const auto& from : mount_from) {
    if (from == repo) continue;
    HttpRequest req;
    req.method = "POST";
    req.url = impl_->base + repo + "/blobs/uploads/?mount=" + url_escape(digest) + "&from=" + url_escape(from);
    req.max_body = kMaxSmallBody;
    auto r = impl_->send(req, Impl::push_scope(repo) + " " + Impl::pull_scope(from), /*retry=*/false);
    if (!r) return r.error();
    if (r->status == 201) {
      ++impl_->stats.blobs_mounted;
      return {};
    }
    // 202: the registry opened an upload session instead; it is left to expire (the upload
    // below opens its own, which every registry accepts).
  }
  return impl_->upload_with_retries(repo, fd, {}, size, digest);
}

Result<std::string> Client::get_blob(const std::string& repo, const Descriptor& d, std::size_t max) {
  if (d.size > max) return make_error("blob " + d.digest + " is " + std::to_string(d.size) + " bytes, more than the " +
                                      std::to_string(max) + " allowed");
  std::string out;
  Sha256 h;
  HttpRequest req;
  std::string url = impl_->base + repo + "/blobs/" + d.digest;
  bool foreign = false;
  for (int hop = 0;; ++hop) {
    out.clear();
    req = HttpRequest{};
    req.url = url;
    req.max_body = kMaxSmallBody;
    req.sink = [&](std::string_view chunk, long) -> Status {
      if (out.size() + chunk.size() > d.size) return make_error("blob " + d.digest + ": more bytes than its descriptor's size");
      out.append(chunk);
      return {};
    };
    auto r = foreign ? impl_->http.perform(req) : impl_->send(req, Impl::pull_scope(repo));
    if (!r) return r.error();
    if (is_redirect(r->status) && hop < 5) {
      if (auto s = impl_->follow_blob_redirect(url, *r, foreign); !s) return s.error();
      continue;
    }
    if (!is_2xx(r->status)) return make_error("GET blob " + d.digest + " from " + repo + ": " + error_text(*r));
    break;
  }
  h.update(out);
  const std::string got = h.digest();
  if (out.size() != d.size || got != d.digest) {
    return make_error("blob " + d.digest + " from " + impl_->registry + "/" + repo +
                      ": the content does not match its digest (got " + got + ", " + std::to_string(out.size()) +
                      " bytes); refused");
  }
  impl_->stats.bytes_downloaded += out.size();
  return out;
}

Status Client::get_blob_to_fd(const std::string& repo, const Descriptor& d, int fd) {
  auto hasher = std::make_unique<Sha256>();
  uint64_t got = 0;
  auto restart = [&]() -> Status {
    if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) return errno_error("truncate the download file");
    hasher = std::make_unique<Sha256>();
    got = 0;
    return {};
  };
  if (auto s = restart(); !s) return s;
  std::string url = impl_->base + repo + "/blobs/" + d.digest;
  bool foreign = false;
  int hops = 0;
  for (int attempt = 0;;) {
    HttpRequest req;
    req.url = url;
    req.max_body = kMaxSmallBody;
    if (got > 0) req.headers.push_back("Range: bytes=" + std::to_string(got) + "-");
    bool first = true;
    req.sink = [&](std::string_view chunk, long status) -> Status {
      if (first) {
        first = false;
        if (got > 0 && status != 206) {  // the server sends it all again
          if (auto s = restart(); !s) return s;
        }
      }
      if (got + chunk.size() > d.size) return make_error("blob " + d.digest + ": more bytes than its descriptor's size");
      std::string_view left = chunk;
      while (!left.empty()) {
        const ssize_t n = ::write(fd, left.data(), left.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno_error("write the download file");
        left.remove_prefix(static_cast<size_t>(n));
      }
      hasher->update(chunk);
      got += chunk.size();
      return {};
    };
    bool transient = false;
    Result<HttpResponse> r = foreign ? impl_->http.perform(req, &transient) : impl_->send(req, Impl::pull_scope(repo), false);
    if (!r) {
      const bool may_retry = foreign ? transient : impl_->last_transient;
      if (may_retry && ++attempt < impl_->options.max_attempts && got < d.size) {
        if (got > 0) ++impl_->stats.resumed;
        impl_->backoff(attempt, nullptr);
        continue;
      }
      return r.error();
    }
    if (is_redirect(r->status) && ++hops <= 5) {
      if (auto s = impl_->follow_blob_redirect(url, *r, foreign); !s) return s.error();
      continue;
    }
    if (retryable_status(r->status) && ++attempt < impl_->options.max_attempts) {
      impl_->backoff(attempt, &*r);
      continue;
    }
    if (r->status == 416 && got > 0) {  // our Range is not satisfiable: start over
      if (auto s = restart(); !s) return s;
      if (++attempt < impl_->options.max_attempts) continue;
    }
    if (!is_2xx(r->status)) return make_error("GET blob " + d.digest + " from " + repo + ": " + error_text(*r));
    break;
  }
  const std::string digest = hasher->digest();
  if (got != d.size || digest != d.digest) {
    return make_error("blob " + d.digest + " from " + impl_->registry + "/" + repo +
                      ": the content does not match its digest (got " + digest + ", " + std::to_string(got) +
                      " of " + std::to_string(d.size) + " bytes); refused");
  }
  impl_->stats.bytes_downloaded += got;
  return {};
}

Result<std::optional<Fetched>> Client::get_manifest(const std::string& repo, const std::string& reference,
                                                    const std::vector<std::string>& accept) {
  HttpRequest req;
  req.url = impl_->base + repo + "/manifests/" + reference;
  req.max_body = kMaxManifestBytes;
  std::string acc = "Accept: ";
  for (std::size_t i = 0; i < accept.size(); ++i) acc += (i ? ", " : "") + accept[i];
  req.headers.push_back(acc);
  auto r = impl_->send(req, Impl::pull_scope(repo));
  if (!r) {
    if (r.error().message.find("larger than") != std::string::npos) {
      return make_error("the manifest " + repo + ":" + reference + " is larger than 4 MiB; refused");
    }
    return r.error();
  }
  if (r->status == 404) return std::optional<Fetched>();
  if (is_redirect(r->status)) {
    return make_error("GET " + req.url + ": the registry redirected a manifest request to " + r->header("location") +
                      "; only blob downloads may be redirected — refused");
  }
  if (!is_2xx(r->status)) return make_error("GET manifest " + repo + ":" + reference + ": " + error_text(*r));
  Fetched f;
  f.media_type = r->header("content-type");
  if (auto semi = f.media_type.find(';'); semi != std::string::npos) f.media_type.resize(semi);
  while (!f.media_type.empty() && f.media_type.back() == ' ') f.media_type.pop_back();
  if (std::find(accept.begin(), accept.end(), f.media_type) == accept.end()) {
    return make_error("the manifest " + repo + ":" + reference + " has media type \"" + f.media_type +
                      "\", not " + accept.front() + "; refused");
  }
  f.bytes = std::move(r->body);
  f.digest = "sha256:" + sha256_hex(f.bytes);
  if (valid_digest(reference) && f.digest != reference) {
    return make_error("the manifest fetched as " + repo + "@" + reference + " hashes to " + f.digest + "; refused");
  }
  if (const std::string dcd = r->header("docker-content-digest"); !dcd.empty() && valid_digest(dcd) && dcd != f.digest) {
    return make_error("the manifest " + repo + ":" + reference + " hashes to " + f.digest +
                      " but the registry says " + dcd + "; refused");
  }
  return std::optional<Fetched>(std::move(f));
}

Result<Client::Put> Client::put_manifest(const std::string& repo, const std::string& reference,
                                         const std::string& bytes, const std::string& media_type) {
  HttpRequest req;
  req.method = "PUT";
  req.url = impl_->base + repo + "/manifests/" + reference;
  req.max_body = kMaxSmallBody;
  req.headers.push_back("Content-Type: " + media_type);
  req.body = bytes;
  auto r = impl_->send(req, Impl::push_scope(repo));
  if (!r) return r.error();
  if (r->status != 201 && r->status != 200) return make_error("PUT manifest " + repo + ":" + reference + ": " + error_text(*r));
  Put p;
  p.digest = "sha256:" + sha256_hex(bytes);
  p.subject_processed = !r->header("oci-subject").empty();
  return p;
}

Result<std::vector<Descriptor>> Client::referrers(const std::string& repo, const std::string& subject_digest,
                                                  const std::string& artifact_type) {
  if (!valid_digest(subject_digest)) return make_error("referrers: " + subject_digest + " is not a sha256 digest");
  HttpRequest req;
  req.url = impl_->base + repo + "/referrers/" + subject_digest;
  if (!artifact_type.empty()) req.url += "?artifactType=" + url_escape(artifact_type);
  req.max_body = kMaxManifestBytes;
  req.headers.push_back(std::string("Accept: ") + kImageIndex);
  auto r = impl_->send(req, Impl::pull_scope(repo));
  if (!r) return r.error();
  std::string body;
  if (r->status == 200 && r->header("content-type").rfind(kImageIndex, 0) == 0) {
    body = std::move(r->body);
  } else if (r->status == 404 || r->status == 200) {
    // No referrers API (a 404, or something that is not an index): the tag schema.
    auto idx = get_manifest(repo, "sha256-" + subject_digest.substr(7), {kImageIndex});
    if (!idx) return idx.error();
    if (!*idx) return std::vector<Descriptor>();
    body = std::move((*idx)->bytes);
  } else {
    return make_error("GET " + req.url + ": " + error_text(*r));
  }
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("manifests") || !j["manifests"].is_array()) {
    return make_error("the referrers of " + subject_digest + " in " + repo + ": not an image index");
  }
  std::vector<Descriptor> out;
  for (const auto& m : j["manifests"]) {
    auto d = Descriptor::from_json(m, "referrer");
    if (!d) return d.error();
    if (!artifact_type.empty() && d->artifact_type != artifact_type) continue;
    out.push_back(std::move(*d));
  }
  return out;
}

Result<Descriptor> Client::push_referrer(const std::string& repo, const Descriptor& subject,
                                         const std::string& artifact_type, const std::string& blob,
                                         const std::string& blob_media_type, const json& annotations) {
  if (auto s = push_blob(repo, "{}", kEmptyDigest); !s) return s.error();
  const std::string blob_digest = "sha256:" + sha256_hex(blob);
  if (auto s = push_blob(repo, blob, blob_digest); !s) return s.error();
  json m = {{"schemaVersion", 2},
            {"mediaType", kImageManifest},
            {"artifactType", artifact_type},
            {"config", {{"mediaType", kEmptyMediaType}, {"digest", kEmptyDigest}, {"size", 2}}},
            {"layers", json::array({{{"mediaType", blob_media_type}, {"digest", blob_digest}, {"size", blob.size()}}})},
            {"subject", {{"mediaType", subject.media_type}, {"digest", subject.digest}, {"size", subject.size}}}};
  if (annotations.is_object() && !annotations.empty()) m["annotations"] = annotations;
  const std::string bytes = m.dump();
  Descriptor d;
  d.media_type = kImageManifest;
  d.digest = "sha256:" + sha256_hex(bytes);
  d.size = bytes.size();
  d.artifact_type = artifact_type;
  d.annotations = annotations.is_object() ? annotations : json::object();
  auto put = put_manifest(repo, d.digest, bytes, kImageManifest);
  if (!put) return put.error();
  if (put->subject_processed) return d;
  // The tag schema: the index tagged sha256-HEX lists the subject's referrers.
  const std::string tag = "sha256-" + subject.digest.substr(7);
  json index = {{"schemaVersion", 2}, {"mediaType", kImageIndex}, {"manifests", json::array()}};
  auto cur = get_manifest(repo, tag, {kImageIndex});
  if (!cur) return cur.error();
  if (*cur) {
    json j = json::parse((*cur)->bytes, nullptr, false);
    if (j.is_object() && j.contains("manifests") && j["manifests"].is_array()) index = std::move(j);
  }
  for (const auto& e : index["manifests"]) {
    if (e.is_object() && e.contains("digest") && e["digest"] == d.digest) return d;
  }
  index["manifests"].push_back(d.to_json());
  if (auto p = put_manifest(repo, tag, index.dump(), kImageIndex); !p) return p.error();
  return d;
}

}  // namespace soyaos::oci
