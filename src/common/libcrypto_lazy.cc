// Forwarders for the libcrypto functions soyaos calls (see common/libcrypto.h): each has the
// exact declaration of OpenSSL's headers (a mismatch does not compile) and calls the function
// of the same name in libcrypto.so.3. All of them are resolved together when the library is
// loaded (common/dl_library.h), by their symbol version OPENSSL_3.0.0: a libcrypto lacking
// one is refused by load_libcrypto(), not at the function's first call.
// The list is what `nm -D --undefined-only soyaos` showed from libcrypto.so.3 when it was
// linked, less EVP_PKEY_Q_keygen (variadic, no longer called) and what libsodium now does
// (Ed25519, random bytes, wiping, constant-time compare, base64); the declarations were taken from
// clang's AST of the headers. A libcrypto function called without a forwarder here
// fails to link (soyaos does not link libcrypto).
#include "common/libcrypto.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/dl_library.h"

// NOLINTBEGIN(bugprone-macro-parentheses): X(name) expands to declarations and lookups.
#define SOYAOS_LIBCRYPTO_FUNCTIONS(X) \
  X(BIO_ctrl) \
  X(BIO_ctrl_pending) \
  X(BIO_free) \
  X(BIO_new) \
  X(BIO_new_mem_buf) \
  X(BIO_new_socket) \
  X(BIO_s_mem) \
  X(BIO_up_ref) \
  X(BIO_write) \
  X(BN_bin2bn) \
  X(BN_free) \
  X(BN_to_ASN1_INTEGER) \
  X(CRYPTO_get_ex_new_index) \
  X(CRYPTO_secure_malloc_init) \
  X(CRYPTO_secure_malloc_initialized) \
  X(ERR_clear_error) \
  X(ERR_error_string_n) \
  X(ERR_get_error) \
  X(EVP_DigestFinal_ex) \
  X(EVP_DigestInit_ex) \
  X(EVP_DigestUpdate) \
  X(EVP_MD_CTX_free) \
  X(EVP_MD_CTX_new) \
  X(EVP_PBE_scrypt) \
  X(EVP_PKEY_CTX_free) \
  X(EVP_PKEY_CTX_new_id) \
  X(EVP_PKEY_CTX_set_ec_paramgen_curve_nid) \
  X(EVP_PKEY_free) \
  X(EVP_PKEY_get_id) \
  X(EVP_PKEY_get_raw_private_key) \
  X(EVP_PKEY_get_raw_public_key) \
  X(EVP_PKEY_keygen) \
  X(EVP_PKEY_keygen_init) \
  X(EVP_sha256) \
  X(OBJ_nid2sn) \
  X(PEM_read_bio_PUBKEY) \
  X(PEM_read_bio_PrivateKey) \
  X(PEM_read_bio_X509) \
  X(PEM_write_bio_X509) \
  X(RAND_bytes) \
  X(X509V3_EXT_conf_nid) \
  X(X509V3_set_ctx) \
  X(X509_EXTENSION_free) \
  X(X509_NAME_add_entry_by_txt) \
  X(X509_STORE_add_cert) \
  X(X509_VERIFY_PARAM_set1_ip_asc) \
  X(X509_add_ext) \
  X(X509_cmp_current_time) \
  X(X509_free) \
  X(X509_get0_notAfter) \
  X(X509_get_serialNumber) \
  X(X509_get_subject_name) \
  X(X509_getm_notAfter) \
  X(X509_getm_notBefore) \
  X(X509_gmtime_adj) \
  X(X509_new) \
  X(X509_set_issuer_name) \
  X(X509_set_pubkey) \
  X(X509_set_version) \
  X(X509_sign) \
  X(X509_verify_cert_error_string)

namespace soyaos {
namespace {

constexpr const char* kSoname = "libcrypto.so.3";

// Every forwarded function, resolved at once.
struct LibCrypto {
#define SOYAOS_LIBCRYPTO_POINTER(name) decltype(&::name) name = nullptr;
  SOYAOS_LIBCRYPTO_FUNCTIONS(SOYAOS_LIBCRYPTO_POINTER)
#undef SOYAOS_LIBCRYPTO_POINTER
  std::string error;  // empty when the library loaded and every function resolved
};

std::atomic<bool>& known_loaded() {
  static std::atomic<bool> loaded{false};
  return loaded;
}

const LibCrypto& loaded() {
  static LibCrypto l;
  static std::once_flag once;
  std::call_once(once, [] {
    DlLibrary lib(kSoname, "libssl3", "OPENSSL_3.0.0");
#define SOYAOS_LIBCRYPTO_RESOLVE(name) lib.function(#name, l.name);
    SOYAOS_LIBCRYPTO_FUNCTIONS(SOYAOS_LIBCRYPTO_RESOLVE)
#undef SOYAOS_LIBCRYPTO_RESOLVE
    l.error = lib.error();
    if (l.error.empty()) known_loaded().store(true, std::memory_order_release);
  });
  return l;
}
// NOLINTEND(bugprone-macro-parentheses)

// The functions, for a forwarder. Callers that can fail cleanly ran load_libcrypto() and
// stopped on its error; should a forwarder be reached without the library, the command
// cannot go on without what it asked for: say why and exit 125.
const LibCrypto& libcrypto() {
  const LibCrypto& l = loaded();
  if (!l.error.empty()) {
    std::fprintf(stderr, "soyaos: %s\n", l.error.c_str());
    std::_Exit(125);
  }
  return l;
}

}  // namespace

Status load_libcrypto() {
  const LibCrypto& l = loaded();
  if (!l.error.empty()) return make_error(l.error, ELIBACC);
  return {};
}

bool libcrypto_loaded() { return known_loaded().load(std::memory_order_acquire); }

}  // namespace soyaos

using soyaos::libcrypto;

extern "C" {

long BIO_ctrl(BIO *bp, int cmd, long larg, void *parg) {
  return libcrypto().BIO_ctrl(bp, cmd, larg, parg);
}

size_t BIO_ctrl_pending(BIO *b) {
  return libcrypto().BIO_ctrl_pending(b);
}

int BIO_free(BIO *a) {
  return libcrypto().BIO_free(a);
}

BIO *BIO_new(const BIO_METHOD *type) {
  return libcrypto().BIO_new(type);
}

BIO *BIO_new_mem_buf(const void *buf, int len) {
  return libcrypto().BIO_new_mem_buf(buf, len);
}

BIO *BIO_new_socket(int sock, int close_flag) {
  return libcrypto().BIO_new_socket(sock, close_flag);
}

const BIO_METHOD *BIO_s_mem() {
  return libcrypto().BIO_s_mem();
}

int BIO_up_ref(BIO *a) {
  return libcrypto().BIO_up_ref(a);
}

int BIO_write(BIO *b, const void *data, int dlen) {
  return libcrypto().BIO_write(b, data, dlen);
}

BIGNUM *BN_bin2bn(const unsigned char *s, int len, BIGNUM *ret) {
  return libcrypto().BN_bin2bn(s, len, ret);
}

void BN_free(BIGNUM *a) {
  libcrypto().BN_free(a);
}

ASN1_INTEGER *BN_to_ASN1_INTEGER(const BIGNUM *bn, ASN1_INTEGER *ai) {
  return libcrypto().BN_to_ASN1_INTEGER(bn, ai);
}

int CRYPTO_get_ex_new_index(int class_index, long argl, void *argp, CRYPTO_EX_new *new_func, CRYPTO_EX_dup *dup_func, CRYPTO_EX_free *free_func) {
  return libcrypto().CRYPTO_get_ex_new_index(class_index, argl, argp, new_func, dup_func, free_func);
}

int CRYPTO_secure_malloc_init(size_t sz, size_t minsize) {
  return libcrypto().CRYPTO_secure_malloc_init(sz, minsize);
}

int CRYPTO_secure_malloc_initialized() {
  return libcrypto().CRYPTO_secure_malloc_initialized();
}

void ERR_clear_error() {
  libcrypto().ERR_clear_error();
}

void ERR_error_string_n(unsigned long e, char *buf, size_t len) {
  libcrypto().ERR_error_string_n(e, buf, len);
}

unsigned long ERR_get_error() {
  return libcrypto().ERR_get_error();
}

int EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s) {
  return libcrypto().EVP_DigestFinal_ex(ctx, md, s);
}

int EVP_DigestInit_ex(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl) {
  return libcrypto().EVP_DigestInit_ex(ctx, type, impl);
}

int EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt) {
  return libcrypto().EVP_DigestUpdate(ctx, d, cnt);
}

void EVP_MD_CTX_free(EVP_MD_CTX *ctx) {
  libcrypto().EVP_MD_CTX_free(ctx);
}

EVP_MD_CTX *EVP_MD_CTX_new() {
  return libcrypto().EVP_MD_CTX_new();
}

int EVP_PBE_scrypt(const char *pass, size_t passlen, const unsigned char *salt, size_t saltlen, uint64_t N, uint64_t r, uint64_t p, uint64_t maxmem, unsigned char *key, size_t keylen) {
  return libcrypto().EVP_PBE_scrypt(pass, passlen, salt, saltlen, N, r, p, maxmem, key, keylen);
}

void EVP_PKEY_CTX_free(EVP_PKEY_CTX *ctx) {
  libcrypto().EVP_PKEY_CTX_free(ctx);
}

EVP_PKEY_CTX *EVP_PKEY_CTX_new_id(int id, ENGINE *e) {
  return libcrypto().EVP_PKEY_CTX_new_id(id, e);
}

int EVP_PKEY_CTX_set_ec_paramgen_curve_nid(EVP_PKEY_CTX *ctx, int nid) {
  return libcrypto().EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, nid);
}

void EVP_PKEY_free(EVP_PKEY *pkey) {
  libcrypto().EVP_PKEY_free(pkey);
}

int EVP_PKEY_get_id(const EVP_PKEY *pkey) {
  return libcrypto().EVP_PKEY_get_id(pkey);
}

int EVP_PKEY_get_raw_private_key(const EVP_PKEY *pkey, unsigned char *priv, size_t *len) {
  return libcrypto().EVP_PKEY_get_raw_private_key(pkey, priv, len);
}

int EVP_PKEY_get_raw_public_key(const EVP_PKEY *pkey, unsigned char *pub, size_t *len) {
  return libcrypto().EVP_PKEY_get_raw_public_key(pkey, pub, len);
}

int EVP_PKEY_keygen(EVP_PKEY_CTX *ctx, EVP_PKEY **ppkey) {
  return libcrypto().EVP_PKEY_keygen(ctx, ppkey);
}

int EVP_PKEY_keygen_init(EVP_PKEY_CTX *ctx) {
  return libcrypto().EVP_PKEY_keygen_init(ctx);
}

const EVP_MD *EVP_sha256() {
  return libcrypto().EVP_sha256();
}

const char *OBJ_nid2sn(int n) {
  return libcrypto().OBJ_nid2sn(n);
}

EVP_PKEY *PEM_read_bio_PUBKEY(BIO *out, EVP_PKEY **x, pem_password_cb *cb, void *u) {
  return libcrypto().PEM_read_bio_PUBKEY(out, x, cb, u);
}

EVP_PKEY *PEM_read_bio_PrivateKey(BIO *out, EVP_PKEY **x, pem_password_cb *cb, void *u) {
  return libcrypto().PEM_read_bio_PrivateKey(out, x, cb, u);
}

X509 *PEM_read_bio_X509(BIO *out, X509 **x, pem_password_cb *cb, void *u) {
  return libcrypto().PEM_read_bio_X509(out, x, cb, u);
}

int PEM_write_bio_X509(BIO *out, const X509 *x) {
  return libcrypto().PEM_write_bio_X509(out, x);
}

int RAND_bytes(unsigned char *buf, int num) {
  return libcrypto().RAND_bytes(buf, num);
}

X509_EXTENSION *X509V3_EXT_conf_nid(struct lhash_st_CONF_VALUE *conf, X509V3_CTX *ctx, int ext_nid, const char *value) {
  return libcrypto().X509V3_EXT_conf_nid(conf, ctx, ext_nid, value);
}

void X509V3_set_ctx(X509V3_CTX *ctx, X509 *issuer, X509 *subject, X509_REQ *req, X509_CRL *crl, int flags) {
  libcrypto().X509V3_set_ctx(ctx, issuer, subject, req, crl, flags);
}

void X509_EXTENSION_free(X509_EXTENSION *a) {
  libcrypto().X509_EXTENSION_free(a);
}

int X509_NAME_add_entry_by_txt(X509_NAME *name, const char *field, int type, const unsigned char *bytes, int len, int loc, int set) {
  return libcrypto().X509_NAME_add_entry_by_txt(name, field, type, bytes, len, loc, set);
}

int X509_STORE_add_cert(X509_STORE *ctx, X509 *x) {
  return libcrypto().X509_STORE_add_cert(ctx, x);
}

int X509_VERIFY_PARAM_set1_ip_asc(X509_VERIFY_PARAM *param, const char *ipasc) {
  return libcrypto().X509_VERIFY_PARAM_set1_ip_asc(param, ipasc);
}

int X509_add_ext(X509 *x, X509_EXTENSION *ex, int loc) {
  return libcrypto().X509_add_ext(x, ex, loc);
}

int X509_cmp_current_time(const ASN1_TIME *s) {
  return libcrypto().X509_cmp_current_time(s);
}

void X509_free(X509 *a) {
  libcrypto().X509_free(a);
}

const ASN1_TIME *X509_get0_notAfter(const X509 *x) {
  return libcrypto().X509_get0_notAfter(x);
}

ASN1_INTEGER *X509_get_serialNumber(X509 *x) {
  return libcrypto().X509_get_serialNumber(x);
}

X509_NAME *X509_get_subject_name(const X509 *a) {
  return libcrypto().X509_get_subject_name(a);
}

ASN1_TIME *X509_getm_notAfter(const X509 *x) {
  return libcrypto().X509_getm_notAfter(x);
}

ASN1_TIME *X509_getm_notBefore(const X509 *x) {
  return libcrypto().X509_getm_notBefore(x);
}

ASN1_TIME *X509_gmtime_adj(ASN1_TIME *s, long adj) {
  return libcrypto().X509_gmtime_adj(s, adj);
}

X509 *X509_new() {
  return libcrypto().X509_new();
}

int X509_set_issuer_name(X509 *x, const X509_NAME *name) {
  return libcrypto().X509_set_issuer_name(x, name);
}

int X509_set_pubkey(X509 *x, EVP_PKEY *pkey) {
  return libcrypto().X509_set_pubkey(x, pkey);
}

int X509_set_version(X509 *x, long version) {
  return libcrypto().X509_set_version(x, version);
}

int X509_sign(X509 *x, EVP_PKEY *pkey, const EVP_MD *md) {
  return libcrypto().X509_sign(x, pkey, md);
}

const char *X509_verify_cert_error_string(long n) {
  return libcrypto().X509_verify_cert_error_string(n);
}

}  // extern "C"
