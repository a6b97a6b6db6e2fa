#include "oci/client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/digest.h"
#include "manifest/diagnostic_text.h"
#include "moon/config.h"
#include "oci/client_internal.h"
#include "oci/reference.h"

namespace soyaos::oci {
namespace detail {

using json = nlohmann::ordered_json;

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

}  // namespace detail

namespace {

using json = nlohmann::ordered_json;
using detail::is_2xx;
using detail::lower;
using detail::error_text;
using detail::kMaxSmallBody;
using detail::retryable_status;

constexpr uint64_t kMaxJsonInt = uint64_t{1} << 53;

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
    // One line, the first diagnostic raw (escaped where it is printed), as remote_gate.cc says it.
    return make_error("moon configuration invalid: " +
                      (cfg.errors.empty() ? std::string() : manifest::raw_text(cfg.errors.front())));
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

Client::Impl::Impl(std::string reg, ClientOptions opts)
    : registry(std::move(reg)), options(std::move(opts)), http(options.transport) {
  base = std::string(options.insecure ? "http://" : "https://") + registry + "/v2/";
  origin = url_origin(base);
}

void Client::Impl::backoff(int attempt, const HttpResponse* r) {
  long ms = options.backoff_ms << std::min(attempt, 6);
  if (r != nullptr) {
    const std::string ra = r->header("retry-after");
    if (!ra.empty() && std::all_of(ra.begin(), ra.end(), ::isdigit) && ra.size() < 4) ms = std::stol(ra) * 1000;
  }
  ++stats.retries;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 10000L)));
}

Status Client::Impl::follow_blob_redirect(std::string& url, const HttpResponse& r, bool& foreign) {
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

bool Client::Impl::insecure_origin(const std::string& url) {
  const std::string o = url_origin(url);
  for (const auto& h : options.insecure_hosts) {
    if (o == "http://" + lower(h)) return true;
  }
  return false;
}

Result<HttpResponse> Client::Impl::send(HttpRequest req, const std::string& scope, bool retry) {
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

}  // namespace soyaos::oci
