#include "supervisor/tls_sessions.h"

#include <openssl/x509.h>

#include <ctime>
#include <memory>
#include <utility>

namespace soyaos::supervisor {
namespace {

// What an SSL of an enable()d context is keyed as: kept in the SSL's ex_data, freed with it.
struct Binding {
  TlsSessionCache* cache = nullptr;
  std::string key;
  bool offered = false;  // a cached session was set on the SSL
};

void free_binding(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
                  void* /*argp*/) {
  delete static_cast<Binding*>(ptr);  // NOLINT(cppcoreguidelines-owning-memory): ex_data owns it
}

int binding_index() {
  static const int index = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, nullptr, nullptr, nullptr, free_binding);
  return index;
}

Binding* binding_of(SSL* ssl) {
  const int idx = binding_index();
  return idx < 0 ? nullptr : static_cast<Binding*>(SSL_get_ex_data(ssl, idx));
}

// OpenSSL's client-side "new session" callback (0: the reference it hands over is not kept).
int on_new_session(SSL* ssl, SSL_SESSION* session) {
  Binding* b = binding_of(ssl);
  if (b == nullptr || b->cache == nullptr) return 0;
  // The chain was verified for the key's host: SSL_VERIFY_PEER fails the handshake
  // otherwise, and this is checked again rather than assumed.
  const bool verified = SSL_get_verify_result(ssl) == X509_V_OK && SSL_get0_peer_certificate(ssl) != nullptr;
  // A copy: the connection keeps using `session`, and OpenSSL marks a connection's session
  // not resumable when it is freed without a close_notify sent (ssl_clear_bad_session) —
  // an upstream that closes first would spoil every stored ticket.
  if (SSL_SESSION* copy = SSL_SESSION_dup(session)) b->cache->put(b->key, copy, verified);
  return 0;  // OpenSSL drops the reference it handed over
}

}  // namespace

TlsSessionCache::~TlsSessionCache() {
  for (auto& [key, e] : entries_) SSL_SESSION_free(e.session);
}

bool TlsSessionCache::usable(const SSL_SESSION* s, std::chrono::steady_clock::time_point stored) {
  if (SSL_SESSION_is_resumable(s) != 1) return false;
  if (std::chrono::steady_clock::now() - stored > kMaxSessionAge) return false;
  const auto now = static_cast<long>(std::time(nullptr));
  if (SSL_SESSION_get_time(s) + SSL_SESSION_get_timeout(s) <= now) return false;  // the server's lifetime
  // Never past the verified certificate's end: a resumed handshake does not look at it again.
  X509* peer = SSL_SESSION_get0_peer(const_cast<SSL_SESSION*>(s));
  return peer != nullptr && X509_cmp_current_time(X509_get0_notAfter(peer)) > 0;
}

void TlsSessionCache::erase_locked(std::map<std::string, Entry>::iterator it) {
  SSL_SESSION_free(it->second.session);
  entries_.erase(it);
}

SSL_SESSION* TlsSessionCache::take(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  if (!usable(it->second.session, it->second.stored)) {
    erase_locked(it);
    return nullptr;
  }
  SSL_SESSION* s = it->second.session;
  if (SSL_SESSION_get_protocol_version(s) >= TLS1_3_VERSION) {
    entries_.erase(it);  // the caller gets the cache's reference: a ticket is used once
  } else if (SSL_SESSION_up_ref(s) != 1) {
    return nullptr;
  }
  ++offered_;
  return s;
}

void TlsSessionCache::put(const std::string& key, SSL_SESSION* session, bool verified) {
  const auto now = std::chrono::steady_clock::now();
  if (!verified || !usable(session, now)) {
    SSL_SESSION_free(session);
    return;
  }
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    SSL_SESSION_free(it->second.session);
    it->second = {session, now};
    return;
  }
  if (entries_.size() >= kMaxEntries) {  // bounded: the oldest destination goes
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.stored < oldest->second.stored) oldest = it;
    }
    erase_locked(oldest);
  }
  entries_.emplace(key, Entry{session, now});
}

void TlsSessionCache::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) erase_locked(it);
}

size_t TlsSessionCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

uint64_t TlsSessionCache::offered() const {
  std::lock_guard lock(mu_);
  return offered_;
}

void TlsSessionCache::enable(SSL_CTX* ctx) {
  // The cache is ours (per destination, bounded); OpenSSL's own internal store is off.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, on_new_session);
}

void TlsSessionCache::attach(SSL* ssl, TlsSessionCache* cache, const std::string& key) {
  const int idx = binding_index();
  if (cache == nullptr || idx < 0) return;
  auto b = std::make_unique<Binding>();
  b->cache = cache;
  b->key = key;
  if (SSL_SESSION* s = cache->take(key)) {
    b->offered = SSL_set_session(ssl, s) == 1;
    SSL_SESSION_free(s);  // SSL_set_session took its own reference
  }
  if (SSL_set_ex_data(ssl, idx, b.get()) == 1) (void)b.release();
}

void TlsSessionCache::failed(SSL* ssl) {
  Binding* b = binding_of(ssl);
  if (b != nullptr && b->cache != nullptr && b->offered) b->cache->forget(b->key);
}

}  // namespace soyaos::supervisor
