// Which connections of a run the egress gateway intercepts (SPEC.md C11, issue #12), and what
// it needs to do so: an https or http entry is intercepted for a connection when the entry has
// `http` rules or a secret is bound to the connection's host; every other https entry stays
// SNI-checked passthrough (every plain http connection is read request by request regardless). For intercepted https the run gets its own CA (tls_authority.h),
// which the Comet trusts through a CA bundle of its own (trust_run_ca).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "manifest/manifest.h"
#include "policy/policy.h"
#include "policy/secrets.h"
#include "supervisor/tls_authority.h"
#include "supervisor/tls_sessions.h"

namespace soyaos::supervisor {

// The Comet's CA bundle when the run intercepts https: the host's bundle plus the run's CA.
// SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS and CURL_CA_BUNDLE name it.
inline constexpr const char* kRunCaBundle = "/etc/soyaos/ca-certificates.crt";
inline constexpr const char* kHostCaBundle = "/etc/ssl/certs/ca-certificates.crt";

struct InterceptSecret {
  std::string name, placeholder;
  std::vector<std::string> hosts;
  std::string_view value;  // the RunSecret's SecretBytes: outlives the run's egress service
};

struct Interception {
  std::unique_ptr<TlsAuthority> authority;  // null when no https connection can be intercepted
  SslCtxPtr upstream;                       // verification: system store + tls.ca_files
  // Resumable sessions of `upstream`, per destination (host:port), for the run (tls_sessions.h).
  std::unique_ptr<TlsSessionCache> upstream_sessions;
  std::vector<InterceptSecret> secrets;

  // True when a connection to `host` allowed by `entry` (https or http) is intercepted: rules
  // apply and bound secrets are substituted. (The gateway reads every plain http connection
  // request by request anyway, for each request's Host and for placeholders: egress_gateway.cc.)
  [[nodiscard]] bool intercepts(const manifest::EgressEntry& entry, const std::string& host) const;
};

// The names an https connection could be intercepted for: the hosts of https entries with
// `http` rules (a wildcard entry as its pattern) and every secret host an https entry covers.
std::vector<std::string> intercepted_tls_names(const std::vector<manifest::EgressEntry>& egress,
                                               const std::vector<policy::RunSecret>& secrets);

// Nothing to intercept (no rules, no secrets): nullptr, the gateway is pure passthrough.
// A CA or upstream context that cannot be set up fails the run (125), never a downgrade.
Result<std::unique_ptr<Interception>> make_interception(const std::vector<manifest::EgressEntry>& egress,
                                                        const std::vector<policy::RunSecret>& secrets,
                                                        const std::vector<std::string>& ca_files);

// Adds the run's CA bundle (the host's bundle + `ca_pem`) to the Comet at kRunCaBundle and
// points the four CA variables at it — each unless the manifest's agent.env sets it (the pack's
// explicit choice wins; docs/secrets.md).
Status trust_run_ca(policy::Policy& policy, const std::string& ca_pem);

}  // namespace soyaos::supervisor
