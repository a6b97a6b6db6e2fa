// The per-run certificate authority of the egress gateway's TLS termination (SPEC.md C11,
// issue #12): for an entry that a secret is bound to or that has `http` rules, the gateway
// answers the agent's TLS itself, with a leaf certificate this authority mints for the name.
//
//   - One ECDSA P-256 key per run for the CA (the curve every TLS client accepts), one more for
//     every leaf. Both live only in this process's memory: OpenSSL's secure heap (mlock'd,
//     MADV_DONTDUMP pages, zeroed when freed) holds the private scalars, nothing is written to
//     disk, and the keys die with the run.
//   - The CA certificate carries critical name constraints: only the names the run intercepts
//     (DNS subtrees, IP addresses). A leaf for any other name fails verification in the Comet,
//     so the CA the agent trusts cannot vouch for a site the run does not intercept.
//   - Leaves: SAN = the one name, serverAuth, valid from 5 minutes ago for one day; minted on
//     first use and cached for the run (a fresh one when a cached leaf has under an hour left).
// docs/secrets.md ("The gateway") describes what the agent sees.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"

namespace soyaos::supervisor {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct EvpPkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using SslCtxPtr = std::shared_ptr<SSL_CTX>;

class TlsAuthority {
 public:
  // `names`: what the run intercepts — concrete DNS names (lower case), "*.suffix" wildcard
  // patterns (constrained to the suffix's subtree) and IP literals. Empty is an error: a CA
  // with no constraint would vouch for anything.
  static Result<std::unique_ptr<TlsAuthority>> create(const std::vector<std::string>& names);

  TlsAuthority(const TlsAuthority&) = delete;
  TlsAuthority& operator=(const TlsAuthority&) = delete;
  ~TlsAuthority() = default;

  // The CA certificate, PEM: public, what the Comet's CA bundle gains.
  [[nodiscard]] const std::string& ca_pem() const { return ca_pem_; }
  // A server context presenting the leaf for `name` (a DNS name or an IP literal), ALPN
  // http/1.1 only, TLS 1.2 and 1.3. Thread-safe: the exchange threads call it.
  Result<SslCtxPtr> server_context(const std::string& name);
  // How many leaves were minted (tests: the cache is used).
  [[nodiscard]] size_t minted() const;

 private:
  TlsAuthority() = default;
  struct Leaf {
    SslCtxPtr ctx;
    std::chrono::system_clock::time_point not_after;
  };
  Result<Leaf> mint(const std::string& name);

  std::unique_ptr<EVP_PKEY, EvpPkeyFree> ca_key_, leaf_key_;
  std::unique_ptr<X509, X509Free> ca_cert_;
  std::string ca_pem_;
  mutable std::mutex mu_;
  std::map<std::string, Leaf> leaves_;
  size_t minted_ = 0;
};

// A client context for the upstream side: verification against the system store plus
// `ca_files` (moon.yaml tls.ca_files), ALPN http/1.1, TLS 1.2 minimum. The peer name is set
// per connection (TlsStream::client).
Result<SslCtxPtr> upstream_client_context(const std::vector<std::string>& ca_files);

// The last OpenSSL error of this thread, in words (and the queue cleared).
std::string openssl_error();

}  // namespace soyaos::supervisor
