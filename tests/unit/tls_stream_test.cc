// The gateway's TLS termination pieces (issue #12): the per-run CA (tls_authority.h) and
// TlsStream over real non-blocking sockets (a socketpair), both sides in one thread.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "supervisor/tls_authority.h"
#include "supervisor/tls_sessions.h"
#include "supervisor/tls_stream.h"

namespace soyaos::supervisor {
namespace {

std::pair<UniqueFd, UniqueFd> socket_pair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

// Runs both handshakes until each is ok or one fails.
bool handshake_both(TlsStream& a, TlsStream& b) {
  bool da = false, db = false;
  for (int round = 0; round < 200 && !(da && db); ++round) {
    for (auto [s, done] : {std::pair{&a, &da}, std::pair{&b, &db}}) {
      if (*done) continue;
      auto r = s->handshake();
      if (r.status == IoStatus::ok) *done = true;
      if (r.status == IoStatus::error) return false;
    }
    struct pollfd p[2] = {{a.fd(), a.wanted_events(), 0}, {b.fd(), b.wanted_events(), 0}};
    (void)::poll(p, 2, 50);
  }
  return da && db;
}

std::string ca_file(const TlsAuthority& ca) {
  static int counter = 0;
  auto path = std::filesystem::temp_directory_path() /
              ("soyaos-tls-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + ".pem");
  std::ofstream(path) << ca.ca_pem();
  return path.string();
}

struct Pair {
  std::unique_ptr<TlsStream> server, client;
};

Pair connect(TlsAuthority& ca, const std::string& leaf_name, const std::string& client_name,
             const std::vector<std::string>& trust, const std::string& prefix_bytes = {}) {
  auto [s, c] = socket_pair();
  auto sctx = ca.server_context(leaf_name);
  EXPECT_TRUE(sctx) << sctx.error().describe();
  auto cctx = upstream_client_context(trust);
  EXPECT_TRUE(cctx) << cctx.error().describe();
  auto client = TlsStream::client(std::move(c), *cctx, client_name);
  EXPECT_TRUE(client);
  std::string prefix;
  if (!prefix_bytes.empty()) {
    // The gateway's case: the ClientHello was read before the server side existed.
    EXPECT_EQ(client.value()->handshake().status, IoStatus::would_block);
    char buf[8192];
    ssize_t n = ::recv(s.get(), buf, sizeof buf, 0);
    EXPECT_GT(n, 0);
    prefix.assign(buf, static_cast<size_t>(n));
  }
  auto server = TlsStream::server(std::move(s), *sctx, prefix);
  EXPECT_TRUE(server);
  return {std::move(server.value()), std::move(client.value())};
}

TEST(TlsAuthority, RefusesAnUnconstrainedCa) { EXPECT_FALSE(TlsAuthority::create({})); }

TEST(TlsAuthority, CaIsConstrainedAndPublicOnly) {
  auto ca = TlsAuthority::create({"api.example.com", "*.example.org", "192.0.2.7"});
  ASSERT_TRUE(ca) << ca.error().describe();
  const std::string& pem = ca.value()->ca_pem();
  EXPECT_NE(pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(pem.find("PRIVATE"), std::string::npos);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  std::unique_ptr<X509, X509Free> x(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ASSERT_TRUE(x);
  int crit = 0;
  auto* nc = static_cast<NAME_CONSTRAINTS*>(X509_get_ext_d2i(x.get(), NID_name_constraints, &crit, nullptr));
  ASSERT_NE(nc, nullptr);
  EXPECT_EQ(crit, 1);
  EXPECT_EQ(sk_GENERAL_SUBTREE_num(nc->permittedSubtrees), 3);
  NAME_CONSTRAINTS_free(nc);
}

TEST(TlsStream, TerminatesWithAMintedLeafAndAlpnHttp11) {
  auto ca = TlsAuthority::create({"api.example.com"});
  ASSERT_TRUE(ca);
  const std::string trust = ca_file(**ca);
  auto p = connect(**ca, "api.example.com", "api.example.com", {trust}, "prefix");
  ASSERT_TRUE(handshake_both(*p.server, *p.client)) << p.server->handshake_error() << " / "
                                                    << p.client->handshake_error();
  EXPECT_EQ(p.server->alpn(), "http/1.1");
  EXPECT_EQ(p.client->alpn(), "http/1.1");
  const std::string msg = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
  auto w = p.client->write(std::span(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()));
  ASSERT_EQ(w.status, IoStatus::ok);
  EXPECT_EQ(w.n, msg.size());
  std::string got;
  uint8_t buf[256];
  for (int i = 0; i < 50 && got.size() < msg.size(); ++i) {
    auto r = p.server->read(buf);
    if (r.status == IoStatus::ok) {
      got.append(reinterpret_cast<char*>(buf), r.n);
    } else {
      ASSERT_EQ(r.status, IoStatus::would_block);
      struct pollfd pf{p.server->fd(), p.server->wanted_events(), 0};
      (void)::poll(&pf, 1, 50);
    }
  }
  EXPECT_EQ(got, msg);
  // close_notify, then the peer's read is eof.
  EXPECT_EQ(p.server->shutdown_write().status, IoStatus::ok);
  IoResult r;
  for (int i = 0; i < 50; ++i) {
    r = p.client->read(buf);
    if (r.status != IoStatus::would_block) break;
    struct pollfd pf{p.client->fd(), POLLIN, 0};
    (void)::poll(&pf, 1, 50);
  }
  EXPECT_EQ(r.status, IoStatus::eof);
  // The leaf is cached for the run.
  ASSERT_TRUE(ca.value()->server_context("api.example.com"));
  EXPECT_EQ(ca.value()->minted(), 1U);
  std::filesystem::remove(trust);
}

TEST(TlsStream, NameConstraintsRefuseALeafForAnotherName) {
  auto ca = TlsAuthority::create({"api.example.com"});
  ASSERT_TRUE(ca);
  const std::string trust = ca_file(**ca);
  auto p = connect(**ca, "evil.example.net", "evil.example.net", {trust});
  EXPECT_FALSE(handshake_both(*p.server, *p.client));
  EXPECT_NE(p.client->handshake_error().find("subtree"), std::string::npos) << p.client->handshake_error();
  std::filesystem::remove(trust);
}

TEST(TlsStream, UpstreamVerificationChecksTheStoreAndTheName) {
  auto ca = TlsAuthority::create({"api.example.com", "other.example.com"});
  ASSERT_TRUE(ca);
  {  // not in the system store, no tls.ca_files: refused
    auto p = connect(**ca, "api.example.com", "api.example.com", {});
    EXPECT_FALSE(handshake_both(*p.server, *p.client));
    EXPECT_NE(p.client->handshake_error().find("certificate verification failed"), std::string::npos)
        << p.client->handshake_error();
  }
  const std::string trust = ca_file(**ca);
  {  // trusted, but the certificate names another host
    auto p = connect(**ca, "other.example.com", "api.example.com", {trust});
    EXPECT_FALSE(handshake_both(*p.server, *p.client));
    EXPECT_NE(p.client->handshake_error().find("hostname mismatch"), std::string::npos) << p.client->handshake_error();
  }
  {  // an IP-literal entry: the certificate must carry the address
    auto ipca = TlsAuthority::create({"192.0.2.7"});
    ASSERT_TRUE(ipca);
    const std::string iptrust = ca_file(**ipca);
    auto p = connect(**ipca, "192.0.2.7", "192.0.2.7", {iptrust});
    EXPECT_TRUE(handshake_both(*p.server, *p.client)) << p.client->handshake_error();
    std::filesystem::remove(iptrust);
  }
  std::filesystem::remove(trust);
}

// ---- upstream session resumption (tls_sessions.h, issue #16) ----

// The server writes one byte and the client reads it: a TLS 1.3 client learns its tickets from
// the records after the handshake, so only then is the session stored.
void exchange_a_byte(TlsStream& server, TlsStream& client) {
  const uint8_t x = 'x';
  ASSERT_EQ(server.write(std::span(&x, 1)).status, IoStatus::ok);
  uint8_t buf[16];
  for (int i = 0; i < 50; ++i) {
    auto r = client.read(buf);
    if (r.status == IoStatus::ok) return;
    ASSERT_EQ(r.status, IoStatus::would_block);
    struct pollfd pf{client.fd(), client.wanted_events(), 0};
    (void)::poll(&pf, 1, 50);
  }
  ADD_FAILURE() << "the byte never arrived";
}

struct SessionPair {
  std::unique_ptr<TlsStream> server, client;
  bool ok = false;
};

// A client of `cctx` (enable()d) keyed `key` in `cache`, against the leaf of `leaf_name`.
SessionPair session_connect(TlsAuthority& ca, const SslCtxPtr& cctx, TlsSessionCache& cache,
                            const std::string& leaf_name, const std::string& client_name, const std::string& key) {
  auto [s, c] = socket_pair();
  auto sctx = ca.server_context(leaf_name);
  EXPECT_TRUE(sctx);
  auto client = TlsStream::client(std::move(c), cctx, client_name, &cache, key);
  auto server = TlsStream::server(std::move(s), *sctx, "");
  EXPECT_TRUE(client && server);
  SessionPair p{std::move(server.value()), std::move(client.value())};
  p.ok = handshake_both(*p.server, *p.client);
  if (p.ok) exchange_a_byte(*p.server, *p.client);
  return p;
}

TEST(TlsSessions, UpstreamSessionsResumePerDestinationOnly) {
  auto ca = TlsAuthority::create({"api.example.com", "other.example.com"});
  ASSERT_TRUE(ca);
  const std::string trust = ca_file(**ca);
  auto cctx = upstream_client_context({trust});
  ASSERT_TRUE(cctx);
  TlsSessionCache::enable(cctx->get());
  TlsSessionCache cache;

  auto first = session_connect(**ca, *cctx, cache, "api.example.com", "api.example.com", "api.example.com:443");
  ASSERT_TRUE(first.ok) << first.client->handshake_error();
  EXPECT_FALSE(first.client->resumed());
  EXPECT_EQ(cache.size(), 1U);  // the verified session, stored under its destination
  // The connection ends without a close_notify from the client (an upstream that closes
  // first): OpenSSL then marks that connection's session not resumable — the cache's copy
  // must not be.
  first.client.reset();
  first.server.reset();

  auto second = session_connect(**ca, *cctx, cache, "api.example.com", "api.example.com", "api.example.com:443");
  ASSERT_TRUE(second.ok) << second.client->handshake_error();
  EXPECT_TRUE(second.client->resumed());
  EXPECT_TRUE(second.server->resumed());
  EXPECT_EQ(cache.offered(), 1U);

  // Another destination has nothing to offer: a full handshake, its certificate verified.
  auto other = session_connect(**ca, *cctx, cache, "other.example.com", "other.example.com", "other.example.com:443");
  ASSERT_TRUE(other.ok) << other.client->handshake_error();
  EXPECT_FALSE(other.client->resumed());
  EXPECT_EQ(cache.offered(), 1U);
  std::filesystem::remove(trust);
}

TEST(TlsSessions, ASessionOfferedToAnotherNameIsNotResumedThere) {
  // As if a session of api.example.com were offered for other.example.com (the agent-facing
  // side's case: a client may offer any ticket it holds): every leaf's context has its own
  // ticket key, so the other name's server cannot open it and makes a full handshake, whose
  // certificate is verified for the name asked.
  auto ca = TlsAuthority::create({"api.example.com", "other.example.com"});
  ASSERT_TRUE(ca);
  const std::string trust = ca_file(**ca);
  auto cctx = upstream_client_context({trust});
  ASSERT_TRUE(cctx);
  TlsSessionCache::enable(cctx->get());
  TlsSessionCache cache;
  auto first = session_connect(**ca, *cctx, cache, "api.example.com", "api.example.com", "shared-key");
  ASSERT_TRUE(first.ok) << first.client->handshake_error();
  ASSERT_EQ(cache.size(), 1U);
  auto other = session_connect(**ca, *cctx, cache, "other.example.com", "other.example.com", "shared-key");
  ASSERT_TRUE(other.ok) << other.client->handshake_error();
  EXPECT_EQ(cache.offered(), 1U);  // it was offered
  EXPECT_FALSE(other.server->resumed());
  EXPECT_FALSE(other.client->resumed());
  std::filesystem::remove(trust);
}

TEST(TlsSessions, AFailedVerificationStoresNothingAndAFailedResumptionForgets) {
  auto ca = TlsAuthority::create({"api.example.com", "other.example.com"});
  ASSERT_TRUE(ca);
  const std::string trust = ca_file(**ca);
  {  // not trusted: the handshake fails, nothing is cached
    auto cctx = upstream_client_context({});
    ASSERT_TRUE(cctx);
    TlsSessionCache::enable(cctx->get());
    TlsSessionCache cache;
    auto p = session_connect(**ca, *cctx, cache, "api.example.com", "api.example.com", "api.example.com:443");
    EXPECT_FALSE(p.ok);
    EXPECT_EQ(cache.size(), 0U);
  }
  {  // a verified session, then the same destination answers with a leaf for another name:
     // the offered session is not resumed there, the full handshake fails verification, and
     // nothing of that destination stays cached
    auto cctx = upstream_client_context({trust});
    ASSERT_TRUE(cctx);
    TlsSessionCache::enable(cctx->get());
    TlsSessionCache cache;
    auto good = session_connect(**ca, *cctx, cache, "api.example.com", "api.example.com", "api.example.com:443");
    ASSERT_TRUE(good.ok) << good.client->handshake_error();
    ASSERT_EQ(cache.size(), 1U);
    auto bad = session_connect(**ca, *cctx, cache, "other.example.com", "api.example.com", "api.example.com:443");
    EXPECT_FALSE(bad.ok);
    EXPECT_NE(bad.client->handshake_error().find("hostname mismatch"), std::string::npos)
        << bad.client->handshake_error();
    EXPECT_EQ(cache.size(), 0U);
  }
  std::filesystem::remove(trust);
}

}  // namespace
}  // namespace soyaos::supervisor
