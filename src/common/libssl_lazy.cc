// Forwarders for the libssl functions soyaos calls (see common/libssl.h): each has the
// exact declaration of <openssl/ssl.h> (a mismatch does not compile) and calls the
// function of the same name in libssl.so.3. All of them are resolved together when the
// library is loaded (common/dl_library.h), by their symbol version OPENSSL_3.0.0: a libssl
// lacking one is refused by load_libssl(), before any Comet starts, not at the function's
// first call in a running Comet's gateway thread.
// The list is what `nm -D --undefined-only soyaos` showed from libssl.so.3, and
// SSL_session_reused (TlsStream::resumed); a libssl function called without a forwarder
// here fails to link (soyaos does not link libssl).
#include "common/libssl.h"

#include <openssl/ssl.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/dl_library.h"

// NOLINTBEGIN(bugprone-macro-parentheses): X(name) expands to declarations and lookups.
#define SOYAOS_LIBSSL_FUNCTIONS(X) \
  X(SSL_CTX_check_private_key) \
  X(SSL_CTX_ctrl) \
  X(SSL_CTX_free) \
  X(SSL_CTX_get_cert_store) \
  X(SSL_CTX_load_verify_locations) \
  X(SSL_CTX_new) \
  X(SSL_CTX_sess_set_new_cb) \
  X(SSL_CTX_set_alpn_protos) \
  X(SSL_CTX_set_alpn_select_cb) \
  X(SSL_CTX_set_default_verify_paths) \
  X(SSL_CTX_set_options) \
  X(SSL_CTX_set_verify) \
  X(SSL_CTX_use_PrivateKey) \
  X(SSL_CTX_use_certificate) \
  X(SSL_SESSION_dup) \
  X(SSL_SESSION_free) \
  X(SSL_SESSION_get0_peer) \
  X(SSL_SESSION_get_protocol_version) \
  X(SSL_SESSION_get_time) \
  X(SSL_SESSION_get_timeout) \
  X(SSL_SESSION_is_resumable) \
  X(SSL_SESSION_up_ref) \
  X(SSL_ctrl) \
  X(SSL_do_handshake) \
  X(SSL_free) \
  X(SSL_get0_alpn_selected) \
  X(SSL_get0_param) \
  X(SSL_get0_peer_certificate) \
  X(SSL_get_error) \
  X(SSL_get_ex_data) \
  X(SSL_get_verify_result) \
  X(SSL_get_version) \
  X(SSL_get_wbio) \
  X(SSL_is_init_finished) \
  X(SSL_is_server) \
  X(SSL_new) \
  X(SSL_pending) \
  X(SSL_read_ex) \
  X(SSL_select_next_proto) \
  X(SSL_session_reused) \
  X(SSL_set0_rbio) \
  X(SSL_set1_host) \
  X(SSL_set_accept_state) \
  X(SSL_set_bio) \
  X(SSL_set_connect_state) \
  X(SSL_set_ex_data) \
  X(SSL_set_session) \
  X(SSL_shutdown) \
  X(SSL_write_ex) \
  X(TLS_client_method) \
  X(TLS_server_method)

namespace soyaos {
namespace {

// Every forwarded function, resolved at once.
struct LibSsl {
#define SOYAOS_LIBSSL_POINTER(name) decltype(&::name) name = nullptr;
  SOYAOS_LIBSSL_FUNCTIONS(SOYAOS_LIBSSL_POINTER)
#undef SOYAOS_LIBSSL_POINTER
  std::string error;  // empty when the library loaded and every function resolved
};

const LibSsl& loaded() {
  static LibSsl l;
  static std::once_flag once;
  std::call_once(once, [] {
    DlLibrary lib("libssl.so.3", "libssl3", "OPENSSL_3.0.0");
#define SOYAOS_LIBSSL_RESOLVE(name) lib.function(#name, l.name);
    SOYAOS_LIBSSL_FUNCTIONS(SOYAOS_LIBSSL_RESOLVE)
#undef SOYAOS_LIBSSL_RESOLVE
    l.error = lib.error();
  });
  return l;
}
// NOLINTEND(bugprone-macro-parentheses)

// The functions, for a forwarder. Callers ran load_libssl() and stopped on its error, so a
// forwarder only gets here with the library loaded; should one be reached without it, the
// run cannot go on without the layer it asked for: say why and exit 125.
const LibSsl& libssl() {
  const LibSsl& l = loaded();
  if (!l.error.empty()) {
    std::fprintf(stderr, "soyaos: %s\n", l.error.c_str());
    std::_Exit(125);
  }
  return l;
}

}  // namespace

Status load_libssl() {
  const LibSsl& l = loaded();
  if (!l.error.empty()) return make_error(l.error, ELIBACC);
  return {};
}

}  // namespace soyaos

using soyaos::libssl;

extern "C" {

int SSL_CTX_check_private_key(const SSL_CTX *ctx) {
  return libssl().SSL_CTX_check_private_key(ctx);
}

long SSL_CTX_ctrl(SSL_CTX *ctx, int cmd, long larg, void *parg) {
  return libssl().SSL_CTX_ctrl(ctx, cmd, larg, parg);
}

void SSL_CTX_free(SSL_CTX *a) {
  libssl().SSL_CTX_free(a);
}

X509_STORE * SSL_CTX_get_cert_store(const SSL_CTX *a) {
  return libssl().SSL_CTX_get_cert_store(a);
}

int SSL_CTX_load_verify_locations(SSL_CTX *ctx, const char *CAfile, const char *CApath) {
  return libssl().SSL_CTX_load_verify_locations(ctx, CAfile, CApath);
}

SSL_CTX * SSL_CTX_new(const SSL_METHOD *meth) {
  return libssl().SSL_CTX_new(meth);
}

void SSL_CTX_sess_set_new_cb(SSL_CTX *ctx, int (*new_session_cb)(struct ssl_st *ssl, SSL_SESSION *sess)) {
  libssl().SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
}

int SSL_CTX_set_alpn_protos(SSL_CTX *ctx, const unsigned char *protos, unsigned int protos_len) {
  return libssl().SSL_CTX_set_alpn_protos(ctx, protos, protos_len);
}

void SSL_CTX_set_alpn_select_cb(SSL_CTX *ctx, SSL_CTX_alpn_select_cb_func cb, void *arg) {
  libssl().SSL_CTX_set_alpn_select_cb(ctx, cb, arg);
}

int SSL_CTX_set_default_verify_paths(SSL_CTX *ctx) {
  return libssl().SSL_CTX_set_default_verify_paths(ctx);
}

uint64_t SSL_CTX_set_options(SSL_CTX *ctx, uint64_t op) {
  return libssl().SSL_CTX_set_options(ctx, op);
}

void SSL_CTX_set_verify(SSL_CTX *ctx, int mode, SSL_verify_cb callback) {
  libssl().SSL_CTX_set_verify(ctx, mode, callback);
}

int SSL_CTX_use_PrivateKey(SSL_CTX *ctx, EVP_PKEY *pkey) {
  return libssl().SSL_CTX_use_PrivateKey(ctx, pkey);
}

int SSL_CTX_use_certificate(SSL_CTX *ctx, X509 *x) {
  return libssl().SSL_CTX_use_certificate(ctx, x);
}

SSL_SESSION * SSL_SESSION_dup(const SSL_SESSION *src) {
  return libssl().SSL_SESSION_dup(src);
}

void SSL_SESSION_free(SSL_SESSION *ses) {
  libssl().SSL_SESSION_free(ses);
}

X509 * SSL_SESSION_get0_peer(SSL_SESSION *s) {
  return libssl().SSL_SESSION_get0_peer(s);
}

int SSL_SESSION_get_protocol_version(const SSL_SESSION *s) {
  return libssl().SSL_SESSION_get_protocol_version(s);
}

long SSL_SESSION_get_time(const SSL_SESSION *s) {
  return libssl().SSL_SESSION_get_time(s);
}

long SSL_SESSION_get_timeout(const SSL_SESSION *s) {
  return libssl().SSL_SESSION_get_timeout(s);
}

int SSL_SESSION_is_resumable(const SSL_SESSION *s) {
  return libssl().SSL_SESSION_is_resumable(s);
}

int SSL_SESSION_up_ref(SSL_SESSION *ses) {
  return libssl().SSL_SESSION_up_ref(ses);
}

long SSL_ctrl(SSL *ssl, int cmd, long larg, void *parg) {
  return libssl().SSL_ctrl(ssl, cmd, larg, parg);
}

int SSL_do_handshake(SSL *s) {
  return libssl().SSL_do_handshake(s);
}

void SSL_free(SSL *ssl) {
  libssl().SSL_free(ssl);
}

void SSL_get0_alpn_selected(const SSL *ssl, const unsigned char **data, unsigned int *len) {
  libssl().SSL_get0_alpn_selected(ssl, data, len);
}

X509_VERIFY_PARAM * SSL_get0_param(SSL *ssl) {
  return libssl().SSL_get0_param(ssl);
}

X509 * SSL_get0_peer_certificate(const SSL *s) {
  return libssl().SSL_get0_peer_certificate(s);
}

int SSL_get_error(const SSL *s, int ret_code) {
  return libssl().SSL_get_error(s, ret_code);
}

void * SSL_get_ex_data(const SSL *ssl, int idx) {
  return libssl().SSL_get_ex_data(ssl, idx);
}

long SSL_get_verify_result(const SSL *ssl) {
  return libssl().SSL_get_verify_result(ssl);
}

const char * SSL_get_version(const SSL *s) {
  return libssl().SSL_get_version(s);
}

BIO * SSL_get_wbio(const SSL *s) {
  return libssl().SSL_get_wbio(s);
}

int SSL_is_init_finished(const SSL *s) {
  return libssl().SSL_is_init_finished(s);
}

int SSL_is_server(const SSL *s) {
  return libssl().SSL_is_server(s);
}

SSL * SSL_new(SSL_CTX *ctx) {
  return libssl().SSL_new(ctx);
}

int SSL_pending(const SSL *s) {
  return libssl().SSL_pending(s);
}

int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes) {
  return libssl().SSL_read_ex(ssl, buf, num, readbytes);
}

int SSL_select_next_proto(unsigned char **out, unsigned char *outlen, const unsigned char *in, unsigned int inlen, const unsigned char *client, unsigned int client_len) {
  return libssl().SSL_select_next_proto(out, outlen, in, inlen, client, client_len);
}

int SSL_session_reused(const SSL *s) {
  return libssl().SSL_session_reused(s);
}

void SSL_set0_rbio(SSL *s, BIO *rbio) {
  libssl().SSL_set0_rbio(s, rbio);
}

int SSL_set1_host(SSL *s, const char *hostname) {
  return libssl().SSL_set1_host(s, hostname);
}

void SSL_set_accept_state(SSL *s) {
  libssl().SSL_set_accept_state(s);
}

void SSL_set_bio(SSL *s, BIO *rbio, BIO *wbio) {
  libssl().SSL_set_bio(s, rbio, wbio);
}

void SSL_set_connect_state(SSL *s) {
  libssl().SSL_set_connect_state(s);
}

int SSL_set_ex_data(SSL *ssl, int idx, void *data) {
  return libssl().SSL_set_ex_data(ssl, idx, data);
}

int SSL_set_session(SSL *to, SSL_SESSION *session) {
  return libssl().SSL_set_session(to, session);
}

int SSL_shutdown(SSL *s) {
  return libssl().SSL_shutdown(s);
}

int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t *written) {
  return libssl().SSL_write_ex(s, buf, num, written);
}

const SSL_METHOD * TLS_client_method(void) {
  return libssl().TLS_client_method();
}

const SSL_METHOD * TLS_server_method(void) {
  return libssl().TLS_server_method();
}

}  // extern "C"
