#include "supervisor/interception.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/libcrypto.h"
#include "common/libssl.h"

namespace soyaos::supervisor {
namespace {

bool is_web(const manifest::EgressEntry& e) {
  return e.protocol == manifest::Protocol::https || e.protocol == manifest::Protocol::http;
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

bool Interception::intercepts(const manifest::EgressEntry& entry, const std::string& host) const {
  if (!is_web(entry)) return false;
  if (!entry.http.empty()) return true;
  return std::any_of(secrets.begin(), secrets.end(), [&](const InterceptSecret& s) {
    return std::find(s.hosts.begin(), s.hosts.end(), host) != s.hosts.end();
  });
}

std::vector<std::string> intercepted_tls_names(const std::vector<manifest::EgressEntry>& egress,
                                               const std::vector<policy::RunSecret>& secrets) {
  std::vector<std::string> names;
  for (const auto& e : egress) {
    if (e.protocol != manifest::Protocol::https) continue;
    if (!e.http.empty()) add_unique(names, e.host);
    for (const auto& s : secrets) {
      for (const auto& h : s.hosts) {
        if (manifest::host_matches(e.host, h)) add_unique(names, h);
      }
    }
  }
  return names;
}

Result<std::unique_ptr<Interception>> make_interception(const std::vector<manifest::EgressEntry>& egress,
                                                        const std::vector<policy::RunSecret>& secrets,
                                                        const std::vector<std::string>& ca_files) {
  const bool any_rules = std::any_of(egress.begin(), egress.end(),
                                     [](const manifest::EgressEntry& e) { return is_web(e) && !e.http.empty(); });
  if (!any_rules && secrets.empty()) return std::unique_ptr<Interception>();
  auto icpt = std::make_unique<Interception>();
  for (const auto& s : secrets) icpt->secrets.push_back({s.name, s.placeholder, s.hosts, s.value.view()});
  const auto names = intercepted_tls_names(egress, secrets);
  if (!names.empty()) {
    // libcrypto and libssl are loaded on first use (common/libcrypto.h, common/libssl.h):
    // here, in the main thread before the Comet is cloned; a host without either refuses the
    // run (125) naming the library.
    if (auto s = load_libcrypto(); !s) return make_error("TLS interception: " + s.error().message, s.error().err);
    if (auto s = load_libssl(); !s) return make_error("TLS interception: " + s.error().message, s.error().err);
    auto authority = TlsAuthority::create(names);
    if (!authority) return make_error("the run's certificate authority: " + authority.error().describe());
    icpt->authority = std::move(authority.value());
    auto upstream = upstream_client_context(ca_files);
    if (!upstream) return make_error("upstream TLS verification: " + upstream.error().describe());
    icpt->upstream = std::move(upstream.value());
    TlsSessionCache::enable(icpt->upstream.get());
    icpt->upstream_sessions = std::make_unique<TlsSessionCache>();
  }
  return icpt;
}

Status trust_run_ca(policy::Policy& policy, const std::string& ca_pem) {
  std::ifstream in(kHostCaBundle, std::ios::binary);
  if (!in) return errno_error("read " + std::string(kHostCaBundle) + " (the Comet's CA bundle starts from it)");
  std::ostringstream bundle;
  bundle << in.rdbuf();
  std::string content = bundle.str();
  if (!content.empty() && content.back() != '\n') content += '\n';
  content += "# SoyaOS: this run's certificate authority (intercepted egress entries, SPEC C11)\n";
  content += ca_pem;
  policy.mounts.push_back({policy::MountSpec::Kind::file, {}, kRunCaBundle, std::move(content), 0});
  policy.fs.runtime.emplace_back(kRunCaBundle);
  for (const char* var : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"}) {
    const std::string prefix = std::string(var) + "=";
    const bool set = std::any_of(policy.env.begin(), policy.env.end(),
                                 [&](const std::string& e) { return e.starts_with(prefix); });
    if (!set) policy.env.push_back(prefix + kRunCaBundle);
  }
  return {};
}

}  // namespace soyaos::supervisor
