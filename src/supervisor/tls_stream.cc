#include "supervisor/tls_stream.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <cstring>

#include "policy/operator_network.h"

namespace soyaos::supervisor {

Result<std::unique_ptr<TlsStream>> TlsStream::server(UniqueFd fd, const SslCtxPtr& ctx, const std::string& prefix) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) return make_error("SSL_new: " + openssl_error());
  std::unique_ptr<TlsStream> s(new TlsStream(std::move(fd), ssl));
  BIO* sock = BIO_new_socket(s->fd_.get(), BIO_NOCLOSE);
  if (sock == nullptr) return make_error("BIO_new_socket: " + openssl_error());
  BIO* rbio = sock;
  if (!prefix.empty()) {
    // The bytes the gateway already read (the checked ClientHello) come first; when they
    // are used up the socket becomes the read BIO (switch_to_socket).
    BIO* mem = BIO_new(BIO_s_mem());
    if (mem == nullptr || BIO_write(mem, prefix.data(), static_cast<int>(prefix.size())) != static_cast<int>(prefix.size())) {
      BIO_free(mem);
      BIO_free(sock);
      return make_error("TLS prefix buffer: " + openssl_error());
    }
    BIO_set_mem_eof_return(mem, -1);  // empty = "retry", not end of stream
    rbio = mem;
    s->prefix_ = mem;
  }
  SSL_set_bio(ssl, rbio, sock);
  SSL_set_accept_state(ssl);
  return s;
}

Result<std::unique_ptr<TlsStream>> TlsStream::client(UniqueFd fd, const SslCtxPtr& ctx, const std::string& host,
                                                     TlsSessionCache* sessions, const std::string& session_key) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) return make_error("SSL_new: " + openssl_error());
  std::unique_ptr<TlsStream> s(new TlsStream(std::move(fd), ssl));
  BIO* sock = BIO_new_socket(s->fd_.get(), BIO_NOCLOSE);
  if (sock == nullptr) return make_error("BIO_new_socket: " + openssl_error());
  SSL_set_bio(ssl, sock, sock);
  if (auto ip = policy::parse_ip(host)) {
    // An address entry: the certificate must name the address (no SNI carries an address).
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), policy::to_string(*ip).c_str()) != 1) {
      return make_error("verify address " + host + ": " + openssl_error());
    }
  } else if (SSL_set_tlsext_host_name(ssl, host.c_str()) != 1 || SSL_set1_host(ssl, host.c_str()) != 1) {
    return make_error("verify name " + host + ": " + openssl_error());
  }
  // After the name is set: a session is only ever offered for the name it was verified for.
  if (sessions != nullptr) TlsSessionCache::attach(ssl, sessions, session_key);
  SSL_set_connect_state(ssl);
  return s;
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

bool TlsStream::switch_to_socket() {
  if (prefix_ == nullptr || BIO_ctrl_pending(prefix_) > 0) return false;
  BIO* sock = SSL_get_wbio(ssl_);
  BIO_up_ref(sock);
  SSL_set0_rbio(ssl_, sock);  // frees the drained prefix BIO
  prefix_ = nullptr;
  return true;
}

IoResult TlsStream::fail(int rc, const char* what) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, rc)) {
    case SSL_ERROR_WANT_READ:
      wanted_ = POLLIN;
      return {IoStatus::would_block, 0, 0};
    case SSL_ERROR_WANT_WRITE:
      wanted_ = POLLOUT;
      return {IoStatus::would_block, 0, 0};
    case SSL_ERROR_ZERO_RETURN:
      return {IoStatus::eof, 0, 0};
    case SSL_ERROR_SYSCALL:
      if (saved_errno == 0) return {IoStatus::eof, 0, 0};
      error_ = std::string(what) + ": " + std::strerror(saved_errno);
      ERR_clear_error();
      return {IoStatus::error, 0, saved_errno};
    default: {
      const long vr = SSL_get_verify_result(ssl_);
      if (vr != X509_V_OK && !SSL_is_server(ssl_)) {
        error_ = std::string(what) + ": certificate verification failed: " + X509_verify_cert_error_string(vr);
        ERR_clear_error();
      } else {
        error_ = std::string(what) + ": " + openssl_error();
      }
      return {IoStatus::error, 0, EPROTO};
    }
  }
}

template <typename Op>
IoResult TlsStream::call(const char* what, Op op) {
  for (;;) {
    ERR_clear_error();
    errno = 0;
    size_t n = 0;
    const int rc = op(&n);
    if (rc == 1) return {IoStatus::ok, n, 0};
    if (SSL_get_error(ssl_, rc) == SSL_ERROR_WANT_READ && switch_to_socket()) continue;
    return fail(rc, what);
  }
}

IoResult TlsStream::handshake() {
  auto r = call("TLS handshake", [this](size_t*) { return SSL_do_handshake(ssl_); });
  // A resumption the server refused falls back to a full handshake inside OpenSSL; a
  // handshake that failed outright does not offer the same session again.
  if (r.status == IoStatus::error && !SSL_is_server(ssl_)) TlsSessionCache::failed(ssl_);
  return r;
}

IoResult TlsStream::read(std::span<uint8_t> buf) {
  if (buf.empty()) return {IoStatus::error, 0, EINVAL};
  return call("TLS read", [&](size_t* n) { return SSL_read_ex(ssl_, buf.data(), buf.size(), n); });
}

IoResult TlsStream::write(std::span<const uint8_t> buf) {
  if (buf.empty()) return {IoStatus::ok, 0, 0};
  return call("TLS write", [&](size_t* n) { return SSL_write_ex(ssl_, buf.data(), buf.size(), n); });
}

IoResult TlsStream::shutdown_write() {
  if (shut_) return {IoStatus::ok, 0, 0};
  // SSL_shutdown: 0 = close_notify sent, the peer's not yet seen (fine: we only half-close).
  auto r = call("TLS close_notify", [this](size_t*) { return SSL_shutdown(ssl_) >= 0 ? 1 : -1; });
  if (r.status != IoStatus::ok) return r;
  shut_ = true;
  // Then FIN: the peer learns the end from either, and our read side stays open (TLS 1.3
  // half-close; an HTTP response may still come).
  if (::shutdown(fd_.get(), SHUT_WR) != 0 && errno != ENOTCONN) return {IoStatus::error, 0, errno};
  return {IoStatus::ok, 0, 0};
}

bool TlsStream::has_buffered_input() const {
  return SSL_pending(ssl_) > 0 || (prefix_ != nullptr && BIO_ctrl_pending(prefix_) > 0);
}

std::string TlsStream::version() const { return SSL_get_version(ssl_); }

std::string TlsStream::alpn() const {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &p, &len);
  return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p), len);
}

}  // namespace soyaos::supervisor
