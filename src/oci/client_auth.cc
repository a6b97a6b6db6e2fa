#include <map>
#include <string>

#include "common/base64.h"
#include "oci/client_internal.h"

namespace soyaos::oci {
namespace {

using json = nlohmann::ordered_json;
using detail::error_text;
using detail::is_2xx;
using detail::kMaxSmallBody;
using detail::lower;
using detail::retryable_status;
using detail::url_escape;

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

}  // namespace

std::string Client::Impl::basic_header() const {
  const auto& c = *options.credentials;
  return "Authorization: Basic " + base64_encode(c.username + ":" + c.password);
}

Result<bool> Client::Impl::authenticate(const HttpResponse& r, const std::string& scope) {
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

}  // namespace soyaos::oci
