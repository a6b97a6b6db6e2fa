#include "supervisor/tls_authority.h"

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <array>
#include <cstring>

#include "policy/operator_network.h"

namespace soyaos::supervisor {
namespace {

constexpr long kBackdateSeconds = 300;             // clocks of the Comet and the host are one, but
                                                   // a client may round: valid from 5 minutes ago
constexpr long kCaLifetimeSeconds = 7L * 86400;    // longer than any run's timeout allows in practice
constexpr long kLeafLifetimeSeconds = 86400;
constexpr auto kLeafRenewMargin = std::chrono::hours(1);

// The secure heap holds every BIGNUM OpenSSL marks secret (an EC private scalar among them):
// mlock'd pages excluded from core dumps (MADV_DONTDUMP), cleansed when freed. 64 KiB holds
// the run's two keys and the signing temporaries many times over.
Status init_secure_heap() {
  static std::once_flag once;
  static int rc = 0;
  std::call_once(once, [] {
    rc = CRYPTO_secure_malloc_initialized() != 0 ? 1 : CRYPTO_secure_malloc_init(size_t{64} * 1024, 16);
  });
  // 2: the heap exists but mlock (RLIMIT_MEMLOCK, rootless) or madvise failed; the pages are
  // still OpenSSL's own and cleansed on free. Only a heap that does not exist refuses the run.
  if (rc == 0) return make_error("OpenSSL secure heap for the run's CA key: " + openssl_error());
  return {};
}

Result<std::unique_ptr<EVP_PKEY, EvpPkeyFree>> p256_key() {
  // Not EVP_EC_gen: it is a macro over the variadic EVP_PKEY_Q_keygen, which libcrypto's
  // forwarders (common/libcrypto.h) cannot pass on; this is the same key generation.
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr),
                                                                  &EVP_PKEY_CTX_free);
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1) != 1 ||
      EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return make_error("generate a P-256 key: " + openssl_error());
  }
  return std::unique_ptr<EVP_PKEY, EvpPkeyFree>(raw);
}

Status set_serial(X509* x) {
  std::array<unsigned char, 16> raw{};
  if (RAND_bytes(raw.data(), static_cast<int>(raw.size())) != 1) return make_error("RAND_bytes: " + openssl_error());
  raw[0] &= 0x7f;  // positive
  raw[0] |= 0x01;  // and never zero
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(BN_bin2bn(raw.data(), static_cast<int>(raw.size()), nullptr),
                                                 BN_free);
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x)) == nullptr) {
    return make_error("certificate serial: " + openssl_error());
  }
  return {};
}

Status add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return make_error("certificate extension " + std::string(OBJ_nid2sn(nid)) + ": " + openssl_error());
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return make_error("add certificate extension: " + openssl_error());
  return {};
}

Status set_name(X509_NAME* n, const std::string& cn, bool with_org) {
  if (with_org && X509_NAME_add_entry_by_txt(n, "O", MBSTRING_UTF8,
                                             reinterpret_cast<const unsigned char*>("SoyaOS"), -1, -1, 0) != 1) {
    return make_error("certificate name: " + openssl_error());
  }
  if (X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1) {
    return make_error("certificate name: " + openssl_error());
  }
  return {};
}

// "IP:192.0.2.1" / "DNS:api.example.com" for a SAN; "IP:a/mask" / "DNS:suffix" for a constraint.
std::string general_name(const std::string& name, bool constraint) {
  if (auto ip = policy::parse_ip(name)) {
    const std::string a = policy::to_string(*ip);
    if (!constraint) return "IP:" + a;
    return "IP:" + a + (ip->v6 ? "/ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff" : "/255.255.255.255");
  }
  // A wildcard entry "*.example.com": its subtree (a DNS constraint covers the name and
  // everything below it).
  if (constraint && name.starts_with("*.")) return "DNS:" + name.substr(2);
  return "DNS:" + name;
}

Result<std::string> to_pem(X509* x) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio || PEM_write_bio_X509(bio.get(), x) != 1) return make_error("PEM: " + openssl_error());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

int select_http11(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void* /*arg*/) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof kHttp11, in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    // Only h2 (or something else) offered: no ALPN answer; the client then speaks HTTP/1.1 or
    // the exchange refuses what it speaks.
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

std::string openssl_error() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Result<std::unique_ptr<TlsAuthority>> TlsAuthority::create(const std::vector<std::string>& names) {
  if (names.empty()) return make_error("a run CA needs at least one intercepted name");
  if (auto s = init_secure_heap(); !s) return s.error();
  std::unique_ptr<TlsAuthority> a(new TlsAuthority());
  auto ca_key = p256_key();
  if (!ca_key) return ca_key.error();
  auto leaf_key = p256_key();
  if (!leaf_key) return leaf_key.error();
  a->ca_key_ = std::move(ca_key.value());
  a->leaf_key_ = std::move(leaf_key.value());

  a->ca_cert_.reset(X509_new());
  X509* x = a->ca_cert_.get();
  if (x == nullptr || X509_set_version(x, 2) != 1) return make_error("X509_new: " + openssl_error());
  if (auto s = set_serial(x); !s) return s.error();
  if (X509_gmtime_adj(X509_getm_notBefore(x), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x), kCaLifetimeSeconds) == nullptr) {
    return make_error("CA validity: " + openssl_error());
  }
  if (auto s = set_name(X509_get_subject_name(x), "SoyaOS Comet run CA", true); !s) return s.error();
  if (X509_set_issuer_name(x, X509_get_subject_name(x)) != 1 || X509_set_pubkey(x, a->ca_key_.get()) != 1) {
    return make_error("CA certificate: " + openssl_error());
  }
  // Name constraints: the intercepted names only. With no IP name, every address is
  // excluded, so a leaf naming an address could not pass either.
  std::string nc = "critical";
  bool any_ip = false;
  for (const auto& n : names) {
    nc += ",permitted;" + general_name(n, true);
    any_ip = any_ip || policy::parse_ip(n).has_value();
  }
  if (!any_ip) nc += ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:::/::";
  const std::pair<int, std::string> exts[] = {
      {NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
      {NID_key_usage, "critical,keyCertSign,cRLSign"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"},
      {NID_name_constraints, nc},
  };
  for (const auto& [nid, value] : exts) {
    if (auto s = add_ext(x, x, nid, value); !s) return s.error();
  }
  if (X509_sign(x, a->ca_key_.get(), EVP_sha256()) == 0) return make_error("sign the CA: " + openssl_error());
  auto pem = to_pem(x);
  if (!pem) return pem.error();
  a->ca_pem_ = std::move(pem.value());
  return a;
}

auto TlsAuthority::mint(const std::string& name) -> Result<Leaf> {
  std::unique_ptr<X509, X509Free> leaf(X509_new());
  X509* x = leaf.get();
  if (x == nullptr || X509_set_version(x, 2) != 1) return make_error("X509_new: " + openssl_error());
  if (auto s = set_serial(x); !s) return s.error();
  if (X509_gmtime_adj(X509_getm_notBefore(x), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x), kLeafLifetimeSeconds) == nullptr) {
    return make_error("leaf validity: " + openssl_error());
  }
  if (auto s = set_name(X509_get_subject_name(x), name, false); !s) return s.error();
  if (X509_set_issuer_name(x, X509_get_subject_name(ca_cert_.get())) != 1 ||
      X509_set_pubkey(x, leaf_key_.get()) != 1) {
    return make_error("leaf certificate: " + openssl_error());
  }
  const std::pair<int, std::string> exts[] = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature"},
      {NID_ext_key_usage, "serverAuth"},
      {NID_subject_alt_name, general_name(name, false)},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"},
  };
  for (const auto& [nid, value] : exts) {
    if (auto s = add_ext(x, ca_cert_.get(), nid, value); !s) return s.error();
  }
  if (X509_sign(x, ca_key_.get(), EVP_sha256()) == 0) return make_error("sign a leaf: " + openssl_error());

  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()), SslCtxFree{});
  if (!ctx) return make_error("SSL_CTX_new: " + openssl_error());
  SSL_CTX* c = ctx.get();
  if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1 || SSL_CTX_use_certificate(c, x) != 1 ||
      SSL_CTX_use_PrivateKey(c, leaf_key_.get()) != 1 || SSL_CTX_check_private_key(c) != 1) {
    return make_error("server context for " + name + ": " + openssl_error());
  }
  SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(c, select_http11, nullptr);
  // Session tickets (OpenSSL's default: the ticket keys are random per context, made here, in
  // the secure heap, never exported) let the agent resume: a new connection to the same name
  // then costs no signature. A context per name means a ticket of one name cannot be opened
  // for another: that connection makes a full handshake with its own leaf (issue #16; tested by
  // TlsSessions.ASessionOfferedToAnotherNameIsNotResumedThere and the compat suite).
  return Leaf{std::move(ctx), std::chrono::system_clock::now() + std::chrono::seconds(kLeafLifetimeSeconds)};
}

Result<SslCtxPtr> TlsAuthority::server_context(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = leaves_.find(name);
  if (it != leaves_.end() && it->second.not_after - std::chrono::system_clock::now() > kLeafRenewMargin) {
    return it->second.ctx;
  }
  auto leaf = mint(name);
  if (!leaf) return leaf.error();
  ++minted_;
  SslCtxPtr ctx = leaf->ctx;
  leaves_[name] = std::move(leaf.value());
  return ctx;
}

size_t TlsAuthority::minted() const {
  std::lock_guard lock(mu_);
  return minted_;
}

Result<SslCtxPtr> upstream_client_context(const std::vector<std::string>& ca_files) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()), SslCtxFree{});
  if (!ctx) return make_error("SSL_CTX_new: " + openssl_error());
  SSL_CTX* c = ctx.get();
  if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1) return make_error("TLS 1.2 minimum: " + openssl_error());
  if (SSL_CTX_set_default_verify_paths(c) != 1) return make_error("the system's CA store: " + openssl_error());
  for (const auto& f : ca_files) {
    if (SSL_CTX_load_verify_locations(c, f.c_str(), nullptr) != 1) {
      return make_error("tls.ca_files " + f + ": " + openssl_error());
    }
  }
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  if (SSL_CTX_set_alpn_protos(c, kHttp11, sizeof kHttp11) != 0) return make_error("ALPN: " + openssl_error());
  return ctx;
}

}  // namespace soyaos::supervisor
