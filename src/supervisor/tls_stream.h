// TLS over a non-blocking socket as a ByteStream (byte_stream.h), for the gateway's TLS
// termination (SPEC.md C11): the agent-facing server side presents a leaf of the run's CA
// (tls_authority.h); the upstream client side verifies the server (system store plus
// tls.ca_files) for the entry's host — SNI and the checked name are the entry's host even when
// egress.connect_to or dns.hosts sent the connection elsewhere.
//
// OpenSSL's own semantics are kept: a call that returned would_block is retried when
// wanted_events() is ready (reading can need POLLOUT and writing POLLIN during a handshake
// or a key update); a retried write passes at least the bytes it passed before.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "supervisor/byte_stream.h"
#include "supervisor/tls_authority.h"
#include "supervisor/tls_sessions.h"

namespace soyaos::supervisor {

class TlsStream final : public ByteStream {
 public:
  // Server side. `prefix`: bytes already read from `fd` (the ClientHello the gateway checked);
  // the handshake reads them first.
  static Result<std::unique_ptr<TlsStream>> server(UniqueFd fd, const SslCtxPtr& ctx, const std::string& prefix);
  // Client side: SNI and certificate check for `host` (a DNS name; an IP literal is checked
  // as an address and sends no SNI). With `sessions` (the context TlsSessionCache::enable()d),
  // a session cached under `session_key` is offered and the new ones are stored there.
  static Result<std::unique_ptr<TlsStream>> client(UniqueFd fd, const SslCtxPtr& ctx, const std::string& host,
                                                   TlsSessionCache* sessions = nullptr,
                                                   const std::string& session_key = {});

  ~TlsStream() override;

  // One step of the handshake: ok when it is complete, would_block (wanted_events()), or error
  // (describe in handshake_error()).
  IoResult handshake();
  [[nodiscard]] const std::string& handshake_error() const { return error_; }
  [[nodiscard]] bool handshake_done() const { return SSL_is_init_finished(ssl_) == 1; }
  // The handshake resumed a session (no certificate sent, no signature made).
  [[nodiscard]] bool resumed() const { return SSL_session_reused(ssl_) == 1; }
  // The negotiated version ("TLSv1.3") and ALPN ("http/1.1" or "").
  [[nodiscard]] std::string version() const;
  [[nodiscard]] std::string alpn() const;

  IoResult read(std::span<uint8_t> buf) override;
  IoResult write(std::span<const uint8_t> buf) override;
  IoResult shutdown_write() override;
  int fd() const override { return fd_.get(); }
  short wanted_events() const override { return wanted_; }
  bool has_buffered_input() const override;

 private:
  TlsStream(UniqueFd fd, SSL* ssl) : fd_(std::move(fd)), ssl_(ssl) {}
  // One OpenSSL I/O call, `op(&n)` returning its rc: ok with n bytes, or the failure mapped by
  // fail(); a WANT_READ once the prefix BIO ran dry retries on the socket. handshake, read,
  // write and close_notify all go through it (defined and instantiated in tls_stream.cc).
  template <typename Op>
  IoResult call(const char* what, Op op);
  // Maps an OpenSSL failure of `rc` to an IoResult (and wanted_).
  IoResult fail(int rc, const char* what);
  // The prefix BIO ran dry: the socket becomes the read BIO. True when it switched.
  bool switch_to_socket();

  UniqueFd fd_;
  SSL* ssl_ = nullptr;
  BIO* prefix_ = nullptr;  // owned by ssl_ while it is its read BIO
  short wanted_ = POLLIN;
  bool shut_ = false;
  std::string error_;
};

}  // namespace soyaos::supervisor
