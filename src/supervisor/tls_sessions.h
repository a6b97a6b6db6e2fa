// TLS session resumption towards the upstreams of intercepted connections (SPEC.md C11,
// issue #16): the gateway's client side keeps the last resumable session of each
// destination (entry host and port) for the run, so the next connection to it skips the
// full handshake — the server's signature and the whole chain verification.
//
// Verification stays exactly as strict: a session is stored only from a handshake that
// completed with the chain verified for that host (SSL_VERIFY_PEER, SSL_set1_host), under the
// run's one trust store; it is offered only for the same host and port (the name the SNI
// carries and the certificate was checked for), never past the verified leaf's notAfter nor
// kMaxSessionAge, nor past the server's own ticket lifetime. A TLS 1.3 ticket is used once
// (RFC 8446, C.4: taken out when offered; the resumed handshake brings fresh ones). The cache
// dies with the run; nothing is written anywhere.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace soyaos::supervisor {

class TlsSessionCache {
 public:
  static constexpr size_t kMaxEntries = 256;
  static constexpr std::chrono::seconds kMaxSessionAge{3600};

  TlsSessionCache() = default;
  ~TlsSessionCache();
  TlsSessionCache(const TlsSessionCache&) = delete;
  TlsSessionCache& operator=(const TlsSessionCache&) = delete;

  // The session to offer for `key` (one reference for the caller, SSL_SESSION_free), or null.
  // A TLS 1.3 session leaves the cache (one use); a TLS 1.2 one stays.
  SSL_SESSION* take(const std::string& key);
  // Stores `session` for `key` (takes the caller's reference), replacing the older one,
  // when it is resumable, was verified, and is still within its bounds; else frees it.
  void put(const std::string& key, SSL_SESSION* session, bool verified);
  // A handshake offering a session of `key` failed: forget what is stored for it.
  void forget(const std::string& key);

  [[nodiscard]] size_t size() const;
  [[nodiscard]] uint64_t offered() const;  // sessions handed out by take()

  // Installs the client-side callback on `ctx`: every new session of an SSL that carries a
  // key (attach()) lands in its cache. Call once per context, before any SSL_new.
  static void enable(SSL_CTX* ctx);
  // Marks `ssl` (a client of an enable()d context) as keyed `key` in `cache`, and sets the
  // cached session, if any, to be offered. The SSL must not outlive `cache`.
  static void attach(SSL* ssl, TlsSessionCache* cache, const std::string& key);
  // After a failed handshake of `ssl`: its cached session, if one was offered, is dropped.
  static void failed(SSL* ssl);

 private:
  struct Entry {
    SSL_SESSION* session = nullptr;
    std::chrono::steady_clock::time_point stored;
  };
  static bool usable(const SSL_SESSION* s, std::chrono::steady_clock::time_point stored);
  void erase_locked(std::map<std::string, Entry>::iterator it);

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  uint64_t offered_ = 0;
};

}  // namespace soyaos::supervisor
