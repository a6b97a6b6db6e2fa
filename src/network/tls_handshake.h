// The cleartext part of a TLS handshake after the first ClientHello, for the egress
// gateway's `https` check and the Moon proxy's CONNECT tunnels (SPEC.md C6, C7). A TLS 1.3
// server that cannot use any of the client's key shares answers with a HelloRetryRequest
// (a ServerHello whose random is a fixed value, RFC 8446 4.1.3/4.1.4) and the client then
// sends a second ClientHello, still in cleartext. Servers (OpenSSL among them) take the
// second hello's SNI, so an agent could name another host there: the second hello is
// checked like the first, and must keep the first one's SNI. Pure code: no I/O, bounded
// memory, never crashes. docs/network.md ("What the gateway checks") and
// docs/network-parsers.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "network/parse_status.h"
#include "network/tls_client_hello.h"

namespace soyaos::network {

// SHA-256("HelloRetryRequest"), the random of every HelloRetryRequest (RFC 8446 4.1.3).
inline constexpr std::array<uint8_t, 32> kHelloRetryRandom = {
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c};

enum class ServerFlightKind {
  server_hello,         // an ordinary ServerHello: the handshake goes on encrypted (1.3) or as 1.2
  hello_retry_request,  // the client will send a second ClientHello
  alert,                // the server refused the first hello (an alert record)
};

struct ServerFlight {
  ServerFlightKind kind = ServerFlightKind::server_hello;
  uint16_t legacy_version = 0;
  uint16_t cipher_suite = 0;
  std::optional<uint16_t> selected_version;  // supported_versions extension
  std::optional<uint16_t> selected_group;    // key_share of a HelloRetryRequest
};

struct ServerFlightParse {
  ParseStatus status = ParseStatus::need_more;
  ServerFlight flight;
  size_t need = 0;     // need_more: the input size to wait for
  std::string reason;  // invalid: what was wrong
};

// Classifies the first bytes a TLS server sent: an alert record, or handshake records whose
// first message is a ServerHello (at most 64 KiB, spanning at most 16 records; messages
// after it in the same record are not looked at). Anything else is invalid.
ServerFlightParse parse_server_flight(std::span<const uint8_t> bytes);

// Follows one TLS connection after its first ClientHello was checked and forwarded. The
// caller shows it every byte the server sends (server_bytes) and asks, before forwarding
// client bytes, how many of them may go now (client_bytes).
class TlsHandshakeWatch {
 public:
  enum class State {
    await_server,        // the server has not answered the first hello yet
    await_second_hello,  // the server sent a HelloRetryRequest
    done,                // nothing more to check: every byte flows
    refused,             // reset the connection; reason() says why
  };

  explicit TlsHandshakeWatch(std::optional<std::string> first_sni) : first_sni_(std::move(first_sni)) {}

  // `pending` is the client's unforwarded bytes after the first ClientHello, from the same
  // position as the previous call's unforwarded rest. Returns how many may be forwarded
  // now; the caller forwards exactly those and calls again with the rest plus new bytes.
  // Records pass whole or piecewise except a handshake record: before the server's answer
  // it waits (a client must not send a second hello unasked), after a HelloRetryRequest it
  // waits until the whole second ClientHello is here and checked. Once done, everything.
  size_t client_bytes(std::span<const uint8_t> pending);
  // Every byte the server sends, in order; the watch keeps only what the first handshake
  // message needs (at most kTlsMaxHello plus record headers).
  void server_bytes(std::span<const uint8_t> data);

  [[nodiscard]] State state() const { return state_; }
  [[nodiscard]] const std::string& reason() const { return reason_; }
  // Refused because of what the server sent (not a ServerHello, an alert or a
  // HelloRetryRequest): the upstream's failure, not the agent's violation.
  [[nodiscard]] bool server_fault() const { return server_fault_; }
  // The second ClientHello's SNI (nullopt until one was checked).
  [[nodiscard]] const std::optional<std::string>& second_sni() const { return second_sni_; }
  // The client is waiting for something the watch holds back for the server's answer.
  [[nodiscard]] bool holding() const { return holding_; }

 private:
  void refuse(std::string why, bool server = false);

  std::optional<std::string> first_sni_;
  std::optional<std::string> second_sni_;
  State state_ = State::await_server;
  std::string reason_;
  size_t client_skip_ = 0;           // bytes of the current client record still to pass
  std::vector<uint8_t> server_buf_;  // the server's first bytes, until classified
  bool holding_ = false;
  bool server_fault_ = false;
};

}  // namespace soyaos::network
