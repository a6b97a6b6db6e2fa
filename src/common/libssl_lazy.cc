// Forwarders for the libssl functions soyaos calls (see common/libssl.h): each has the
// exact declaration of <openssl/ssl.h> (a mismatch does not compile) and calls the
// function of the same name in libssl.so.3, loaded by the first call of any of them.
// The list is what `nm -D --undefined-only soyaos` showed from libssl.so.3, and
// SSL_session_reused (TlsStream::resumed); a libssl function called without a forwarder
// here fails to link (soyaos does not link libssl).
#include "common/libssl.h"

#include <dlfcn.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace soyaos {
namespace {

struct Loaded {
  void* lib = nullptr;
  std::string error;
};

const Loaded& loaded() {
  static Loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    l.lib = ::dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (l.lib == nullptr) {
      const char* e = ::dlerror();
      l.error = std::string("cannot load libssl.so.3 (the libssl3 package): ") + (e != nullptr ? e : "dlopen failed");
    }
  });
  return l;
}

// The function `name` of libssl, as type F. Unreachable failure in practice (callers ran
// load_libssl(), and every name here is in libssl 3.0): then it says why and exits 125.
template <typename F>
F forward(const char* name) {
  const Loaded& l = loaded();
  void* sym = l.lib != nullptr ? ::dlsym(l.lib, name) : nullptr;
  if (sym == nullptr) {
    std::fprintf(stderr, "soyaos: %s\n", l.lib == nullptr ? l.error.c_str() : (std::string("libssl.so.3 lacks ") + name).c_str());
    std::_Exit(125);
  }
  // dlsym returns an object pointer; the conversion to a function pointer is what POSIX
  // specifies for dlsym.
  return reinterpret_cast<F>(sym);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

}  // namespace

Status load_libssl() {
  const Loaded& l = loaded();
  if (l.lib == nullptr) return make_error(l.error, ELIBACC);
  return {};
}

}  // namespace soyaos

using soyaos::forward;

extern "C" {

int SSL_CTX_check_private_key(const SSL_CTX *ctx) {
  static const auto fn = forward<decltype(&SSL_CTX_check_private_key)>("SSL_CTX_check_private_key");
  return fn(ctx);
}

long SSL_CTX_ctrl(SSL_CTX *ctx, int cmd, long larg, void *parg) {
  static const auto fn = forward<decltype(&SSL_CTX_ctrl)>("SSL_CTX_ctrl");
  return fn(ctx, cmd, larg, parg);
}

void SSL_CTX_free(SSL_CTX *a) {
  static const auto fn = forward<decltype(&SSL_CTX_free)>("SSL_CTX_free");
  fn(a);
}

X509_STORE * SSL_CTX_get_cert_store(const SSL_CTX *a) {
  static const auto fn = forward<decltype(&SSL_CTX_get_cert_store)>("SSL_CTX_get_cert_store");
  return fn(a);
}

int SSL_CTX_load_verify_locations(SSL_CTX *ctx, const char *CAfile, const char *CApath) {
  static const auto fn = forward<decltype(&SSL_CTX_load_verify_locations)>("SSL_CTX_load_verify_locations");
  return fn(ctx, CAfile, CApath);
}

SSL_CTX * SSL_CTX_new(const SSL_METHOD *meth) {
  static const auto fn = forward<decltype(&SSL_CTX_new)>("SSL_CTX_new");
  return fn(meth);
}

void SSL_CTX_sess_set_new_cb(SSL_CTX *ctx, int (*new_session_cb)(struct ssl_st *ssl, SSL_SESSION *sess)) {
  static const auto fn = forward<decltype(&SSL_CTX_sess_set_new_cb)>("SSL_CTX_sess_set_new_cb");
  fn(ctx, new_session_cb);
}

int SSL_CTX_set_alpn_protos(SSL_CTX *ctx, const unsigned char *protos, unsigned int protos_len) {
  static const auto fn = forward<decltype(&SSL_CTX_set_alpn_protos)>("SSL_CTX_set_alpn_protos");
  return fn(ctx, protos, protos_len);
}

void SSL_CTX_set_alpn_select_cb(SSL_CTX *ctx, SSL_CTX_alpn_select_cb_func cb, void *arg) {
  static const auto fn = forward<decltype(&SSL_CTX_set_alpn_select_cb)>("SSL_CTX_set_alpn_select_cb");
  fn(ctx, cb, arg);
}

int SSL_CTX_set_default_verify_paths(SSL_CTX *ctx) {
  static const auto fn = forward<decltype(&SSL_CTX_set_default_verify_paths)>("SSL_CTX_set_default_verify_paths");
  return fn(ctx);
}

uint64_t SSL_CTX_set_options(SSL_CTX *ctx, uint64_t op) {
  static const auto fn = forward<decltype(&SSL_CTX_set_options)>("SSL_CTX_set_options");
  return fn(ctx, op);
}

void SSL_CTX_set_verify(SSL_CTX *ctx, int mode, SSL_verify_cb callback) {
  static const auto fn = forward<decltype(&SSL_CTX_set_verify)>("SSL_CTX_set_verify");
  fn(ctx, mode, callback);
}

int SSL_CTX_use_PrivateKey(SSL_CTX *ctx, EVP_PKEY *pkey) {
  static const auto fn = forward<decltype(&SSL_CTX_use_PrivateKey)>("SSL_CTX_use_PrivateKey");
  return fn(ctx, pkey);
}

int SSL_CTX_use_certificate(SSL_CTX *ctx, X509 *x) {
  static const auto fn = forward<decltype(&SSL_CTX_use_certificate)>("SSL_CTX_use_certificate");
  return fn(ctx, x);
}

SSL_SESSION * SSL_SESSION_dup(const SSL_SESSION *src) {
  static const auto fn = forward<decltype(&SSL_SESSION_dup)>("SSL_SESSION_dup");
  return fn(src);
}

void SSL_SESSION_free(SSL_SESSION *ses) {
  static const auto fn = forward<decltype(&SSL_SESSION_free)>("SSL_SESSION_free");
  fn(ses);
}

X509 * SSL_SESSION_get0_peer(SSL_SESSION *s) {
  static const auto fn = forward<decltype(&SSL_SESSION_get0_peer)>("SSL_SESSION_get0_peer");
  return fn(s);
}

int SSL_SESSION_get_protocol_version(const SSL_SESSION *s) {
  static const auto fn = forward<decltype(&SSL_SESSION_get_protocol_version)>("SSL_SESSION_get_protocol_version");
  return fn(s);
}

long SSL_SESSION_get_time(const SSL_SESSION *s) {
  static const auto fn = forward<decltype(&SSL_SESSION_get_time)>("SSL_SESSION_get_time");
  return fn(s);
}

long SSL_SESSION_get_timeout(const SSL_SESSION *s) {
  static const auto fn = forward<decltype(&SSL_SESSION_get_timeout)>("SSL_SESSION_get_timeout");
  return fn(s);
}

int SSL_SESSION_is_resumable(const SSL_SESSION *s) {
  static const auto fn = forward<decltype(&SSL_SESSION_is_resumable)>("SSL_SESSION_is_resumable");
  return fn(s);
}

int SSL_SESSION_up_ref(SSL_SESSION *ses) {
  static const auto fn = forward<decltype(&SSL_SESSION_up_ref)>("SSL_SESSION_up_ref");
  return fn(ses);
}

long SSL_ctrl(SSL *ssl, int cmd, long larg, void *parg) {
  static const auto fn = forward<decltype(&SSL_ctrl)>("SSL_ctrl");
  return fn(ssl, cmd, larg, parg);
}

int SSL_do_handshake(SSL *s) {
  static const auto fn = forward<decltype(&SSL_do_handshake)>("SSL_do_handshake");
  return fn(s);
}

void SSL_free(SSL *ssl) {
  static const auto fn = forward<decltype(&SSL_free)>("SSL_free");
  fn(ssl);
}

void SSL_get0_alpn_selected(const SSL *ssl, const unsigned char **data, unsigned int *len) {
  static const auto fn = forward<decltype(&SSL_get0_alpn_selected)>("SSL_get0_alpn_selected");
  fn(ssl, data, len);
}

X509_VERIFY_PARAM * SSL_get0_param(SSL *ssl) {
  static const auto fn = forward<decltype(&SSL_get0_param)>("SSL_get0_param");
  return fn(ssl);
}

X509 * SSL_get0_peer_certificate(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_get0_peer_certificate)>("SSL_get0_peer_certificate");
  return fn(s);
}

int SSL_get_error(const SSL *s, int ret_code) {
  static const auto fn = forward<decltype(&SSL_get_error)>("SSL_get_error");
  return fn(s, ret_code);
}

void * SSL_get_ex_data(const SSL *ssl, int idx) {
  static const auto fn = forward<decltype(&SSL_get_ex_data)>("SSL_get_ex_data");
  return fn(ssl, idx);
}

long SSL_get_verify_result(const SSL *ssl) {
  static const auto fn = forward<decltype(&SSL_get_verify_result)>("SSL_get_verify_result");
  return fn(ssl);
}

const char * SSL_get_version(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_get_version)>("SSL_get_version");
  return fn(s);
}

BIO * SSL_get_wbio(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_get_wbio)>("SSL_get_wbio");
  return fn(s);
}

int SSL_is_init_finished(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_is_init_finished)>("SSL_is_init_finished");
  return fn(s);
}

int SSL_is_server(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_is_server)>("SSL_is_server");
  return fn(s);
}

SSL * SSL_new(SSL_CTX *ctx) {
  static const auto fn = forward<decltype(&SSL_new)>("SSL_new");
  return fn(ctx);
}

int SSL_pending(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_pending)>("SSL_pending");
  return fn(s);
}

int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes) {
  static const auto fn = forward<decltype(&SSL_read_ex)>("SSL_read_ex");
  return fn(ssl, buf, num, readbytes);
}

int SSL_select_next_proto(unsigned char **out, unsigned char *outlen, const unsigned char *in, unsigned int inlen, const unsigned char *client, unsigned int client_len) {
  static const auto fn = forward<decltype(&SSL_select_next_proto)>("SSL_select_next_proto");
  return fn(out, outlen, in, inlen, client, client_len);
}

int SSL_session_reused(const SSL *s) {
  static const auto fn = forward<decltype(&SSL_session_reused)>("SSL_session_reused");
  return fn(s);
}

void SSL_set0_rbio(SSL *s, BIO *rbio) {
  static const auto fn = forward<decltype(&SSL_set0_rbio)>("SSL_set0_rbio");
  fn(s, rbio);
}

int SSL_set1_host(SSL *s, const char *hostname) {
  static const auto fn = forward<decltype(&SSL_set1_host)>("SSL_set1_host");
  return fn(s, hostname);
}

void SSL_set_accept_state(SSL *s) {
  static const auto fn = forward<decltype(&SSL_set_accept_state)>("SSL_set_accept_state");
  fn(s);
}

void SSL_set_bio(SSL *s, BIO *rbio, BIO *wbio) {
  static const auto fn = forward<decltype(&SSL_set_bio)>("SSL_set_bio");
  fn(s, rbio, wbio);
}

void SSL_set_connect_state(SSL *s) {
  static const auto fn = forward<decltype(&SSL_set_connect_state)>("SSL_set_connect_state");
  fn(s);
}

int SSL_set_ex_data(SSL *ssl, int idx, void *data) {
  static const auto fn = forward<decltype(&SSL_set_ex_data)>("SSL_set_ex_data");
  return fn(ssl, idx, data);
}

int SSL_set_session(SSL *to, SSL_SESSION *session) {
  static const auto fn = forward<decltype(&SSL_set_session)>("SSL_set_session");
  return fn(to, session);
}

int SSL_shutdown(SSL *s) {
  static const auto fn = forward<decltype(&SSL_shutdown)>("SSL_shutdown");
  return fn(s);
}

int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t *written) {
  static const auto fn = forward<decltype(&SSL_write_ex)>("SSL_write_ex");
  return fn(s, buf, num, written);
}

const SSL_METHOD * TLS_client_method(void) {
  static const auto fn = forward<decltype(&TLS_client_method)>("TLS_client_method");
  return fn();
}

const SSL_METHOD * TLS_server_method(void) {
  static const auto fn = forward<decltype(&TLS_server_method)>("TLS_server_method");
  return fn();
}

}  // extern "C"
