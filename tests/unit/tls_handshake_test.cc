#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "network/tls_handshake.h"
#include "tls_test_util.h"

namespace soyaos::network {
namespace {

using tls_test::Bytes;
using tls_test::ext;
using tls_test::hello_message;
using tls_test::put16;
using tls_test::records;
using tls_test::sni;

using State = TlsHandshakeWatch::State;

// A ServerHello (hrr: a HelloRetryRequest asking for x25519) in one record.
Bytes server_hello(bool hrr, bool tls13 = true) {
  Bytes body = {0x03, 0x03};
  if (hrr) {
    body.insert(body.end(), kHelloRetryRandom.begin(), kHelloRetryRandom.end());
  } else {
    body.insert(body.end(), 32, 0x5a);
  }
  body.push_back(32);
  body.insert(body.end(), 32, 0x77);                  // session id echo
  body.insert(body.end(), {0x13, 0x01, 0x00});         // TLS_AES_128_GCM_SHA256, null compression
  Bytes exts;
  if (tls13) {
    const Bytes v = ext(tls_ext::supported_versions, {0x03, 0x04});
    exts.insert(exts.end(), v.begin(), v.end());
    const Bytes ks = hrr ? ext(tls_ext::key_share, {0x00, 0x1d}) : ext(tls_ext::key_share, {0x00, 0x1d, 0, 1, 9});
    exts.insert(exts.end(), ks.begin(), ks.end());
  }
  put16(body, exts.size());
  body.insert(body.end(), exts.begin(), exts.end());
  Bytes msg = {2, 0, static_cast<uint8_t>(body.size() >> 8), static_cast<uint8_t>(body.size())};
  msg.insert(msg.end(), body.begin(), body.end());
  return records(msg);
}

const Bytes kCcs = {20, 3, 3, 0, 1, 1};
const Bytes kEarlyData = {23, 3, 3, 0, 4, 0xde, 0xad, 0xbe, 0xef};

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(ServerFlight, ClassifiesServerHelloHelloRetryRequestAndAlert) {
  ServerFlightParse p = parse_server_flight(server_hello(false));
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.flight.kind, ServerFlightKind::server_hello);
  EXPECT_EQ(p.flight.selected_version, 0x0304);
  p = parse_server_flight(server_hello(true));
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.flight.kind, ServerFlightKind::hello_retry_request);
  EXPECT_EQ(p.flight.selected_group, 0x001d);
  p = parse_server_flight(server_hello(false, false));  // TLS 1.2 ServerHello
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.flight.kind, ServerFlightKind::server_hello);
  p = parse_server_flight(Bytes{21, 3, 3, 0, 2, 2, 40});
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.flight.kind, ServerFlightKind::alert);
  // Messages after the ServerHello in its record (TLS 1.2 coalesces the flight) are fine.
  Bytes coalesced = server_hello(false, false);
  coalesced.insert(coalesced.end(), {11, 0, 0, 0});
  coalesced[4] = static_cast<uint8_t>(coalesced[4] + 4);
  EXPECT_EQ(parse_server_flight(coalesced).status, ParseStatus::complete);
}

TEST(ServerFlight, PrefixesNeedMoreAndFragmentsReassemble) {
  const Bytes full = server_hello(true);
  for (size_t n = 0; n < full.size(); ++n) {
    const ServerFlightParse p = parse_server_flight(std::span<const uint8_t>(full).first(n));
    ASSERT_EQ(p.status, ParseStatus::need_more) << n << ": " << p.reason;
    EXPECT_GT(p.need, n);
  }
  Bytes msg(full.begin() + 5, full.end());
  const ServerFlightParse p = parse_server_flight(records(msg, 10));
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.flight.kind, ServerFlightKind::hello_retry_request);
}

TEST(ServerFlight, RefusesWhatIsNoServerHello) {
  Bytes hello_request = records(Bytes{0, 0, 0, 0});
  Bytes client_hello = records(hello_message({sni("a.example")}));
  for (const Bytes& bad : {Bytes{'H', 'T', 'T', 'P', '/'}, Bytes{23, 3, 3, 0, 1, 0}, Bytes{22, 3, 3, 0, 0},
                           Bytes{22, 2, 0, 0, 1}, hello_request, client_hello}) {
    const ServerFlightParse p = parse_server_flight(bad);
    EXPECT_EQ(p.status, ParseStatus::invalid);
    EXPECT_FALSE(p.reason.empty());
  }
}

TEST(HandshakeWatch, OrdinaryServerHelloLetsEverythingThrough) {
  TlsHandshakeWatch w(std::string("a.example"));
  const Bytes later = cat({kCcs, kEarlyData});
  EXPECT_EQ(w.client_bytes(later), later.size());  // CCS and early data pass at once
  w.server_bytes(server_hello(false));
  EXPECT_EQ(w.state(), State::done);
  const Bytes anything = {22, 3, 3, 0, 2, 1, 2, 99, 99};
  EXPECT_EQ(w.client_bytes(anything), anything.size());
}

TEST(HandshakeWatch, SecondHelloWithTheSameSniPasses) {
  TlsHandshakeWatch w(std::string("a.example"));
  const Bytes second = records(hello_message({sni("A.Example")}));
  const Bytes stream = cat({kCcs, second, kEarlyData});
  // Before the server answers, the CCS passes and the handshake record is held.
  EXPECT_EQ(w.client_bytes(stream), kCcs.size());
  EXPECT_TRUE(w.holding());
  const Bytes rest(stream.begin() + static_cast<std::ptrdiff_t>(kCcs.size()), stream.end());
  const Bytes hrr = server_hello(true);
  w.server_bytes(std::span<const uint8_t>(hrr).first(10));
  EXPECT_EQ(w.state(), State::await_server);
  w.server_bytes(std::span<const uint8_t>(hrr).subspan(10));
  EXPECT_EQ(w.state(), State::await_second_hello);
  // Part of the second hello: held; all of it: checked, passed, and the rest flows.
  EXPECT_EQ(w.client_bytes(std::span<const uint8_t>(rest).first(20)), 0U);
  EXPECT_TRUE(w.holding());
  EXPECT_EQ(w.client_bytes(rest), rest.size());
  EXPECT_EQ(w.state(), State::done);
  EXPECT_EQ(w.second_sni(), "a.example");
}

TEST(HandshakeWatch, SecondHelloNamingAnotherHostIsRefused) {
  for (const Bytes& second : {records(hello_message({sni("secret.pw.test")})), records(hello_message({})),
                              records(hello_message({sni("a.example"), ext(tls_ext::encrypted_client_hello, {0})})),
                              records(hello_message({sni("a.example"), ext(0xffce, {0})})),
                              records(hello_message({sni("secre\\t.pw.test")})), Bytes{22, 3, 3, 0, 1, 2}}) {
    TlsHandshakeWatch w(std::string("a.example"));
    w.server_bytes(server_hello(true));
    ASSERT_EQ(w.state(), State::await_second_hello);
    const Bytes stream = cat({kCcs, second});
    EXPECT_EQ(w.client_bytes(stream), kCcs.size());
    EXPECT_EQ(w.state(), State::refused);
    EXPECT_NE(w.reason().find("second ClientHello"), std::string::npos) << w.reason();
  }
  // No SNI first, an SNI second: refused too.
  TlsHandshakeWatch w(std::nullopt);
  w.server_bytes(server_hello(true));
  w.client_bytes(records(hello_message({sni("a.example")})));
  EXPECT_EQ(w.state(), State::refused);
}

TEST(HandshakeWatch, ByteByByteDelivery) {
  TlsHandshakeWatch w(std::string("a.example"));
  const Bytes hrr = cat({server_hello(true), kCcs});
  for (uint8_t b : hrr) w.server_bytes(std::span<const uint8_t>(&b, 1));
  ASSERT_EQ(w.state(), State::await_second_hello);
  const Bytes stream = cat({kEarlyData, kCcs, records(hello_message({sni("a.example")}), 7), kEarlyData});
  Bytes pending;
  size_t forwarded = 0;
  for (uint8_t b : stream) {
    pending.push_back(b);
    const size_t n = w.client_bytes(pending);
    ASSERT_NE(w.state(), State::refused) << w.reason();
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
    forwarded += n;
  }
  EXPECT_EQ(forwarded, stream.size());
  EXPECT_EQ(w.state(), State::done);
}

TEST(HandshakeWatch, RefusesOddClientRecordsAndServerGarbage) {
  for (const Bytes& bad : {Bytes{24, 3, 3, 0, 1, 0}, Bytes{22, 2, 0, 0, 1, 0}, Bytes{23, 3, 3, 0xff, 0xff}}) {
    TlsHandshakeWatch w(std::string("a.example"));
    EXPECT_EQ(w.client_bytes(bad), 0U);
    EXPECT_EQ(w.state(), State::refused);
    EXPECT_FALSE(w.server_fault());  // the agent's doing: a violation
  }
  TlsHandshakeWatch w(std::string("a.example"));
  const Bytes http = {'H', 'T', 'T', 'P', '/', '1', '.', '1'};
  w.server_bytes(http);
  EXPECT_EQ(w.state(), State::refused);
  EXPECT_NE(w.reason().find("server"), std::string::npos);
  EXPECT_TRUE(w.server_fault());  // the upstream's failure, not the agent's violation
  TlsHandshakeWatch echoed(std::string("a.example"));  // a server echoing the ClientHello
  echoed.server_bytes(records(hello_message({sni("a.example")})));
  EXPECT_EQ(echoed.state(), State::refused);
  EXPECT_TRUE(echoed.server_fault());
  TlsHandshakeWatch alert(std::string("a.example"));
  alert.server_bytes(Bytes{21, 3, 3, 0, 2, 2, 112});
  EXPECT_EQ(alert.state(), State::done);
}

}  // namespace
}  // namespace soyaos::network
