#include "network/tls_handshake.h"

#include <algorithm>
#include <utility>

#include "network/byte_reader.h"

namespace soyaos::network {
namespace {

constexpr uint8_t kContentChangeCipherSpec = 20, kContentAlert = 21, kContentHandshake = 22,
                  kContentApplicationData = 23;
constexpr uint8_t kHandshakeServerHello = 2;
// The largest record a client may send after its first hello: TLSCiphertext of TLS 1.2
// (2^14 + 2048, RFC 5246 6.2.3); TLS 1.3 stays below (2^14 + 256).
constexpr size_t kTlsMaxCiphertext = kTlsMaxRecordPayload + 2048;

ServerFlightParse flight_invalid(std::string reason) {
  ServerFlightParse p;
  p.status = ParseStatus::invalid;
  p.reason = "tls: the server's first flight: " + std::move(reason);
  return p;
}

ServerFlightParse flight_need(size_t need) {
  ServerFlightParse p;
  p.need = need;
  return p;
}

bool fail(std::string& why, std::string reason) {
  why = std::move(reason);
  return false;
}

// RFC 8446 4.1.3 (and RFC 5246 7.4.1.3): the ServerHello body after its 4-byte header.
bool parse_server_hello_body(std::span<const uint8_t> body, ServerFlight& f, std::string& why) {
  ByteReader r(body);
  std::span<const uint8_t> random, session_id;
  uint8_t compression = 0;
  if (!r.u16(f.legacy_version) || !r.bytes(32, random)) return fail(why, "ServerHello shorter than version and random");
  if ((f.legacy_version >> 8) != 3 || (f.legacy_version & 0xff) > 3) return fail(why, "ServerHello legacy_version is not 3.0..3.3");
  if (!r.vec8(session_id) || session_id.size() > 32) return fail(why, "ServerHello session id malformed");
  if (!r.u16(f.cipher_suite) || !r.u8(compression)) return fail(why, "ServerHello shorter than its cipher suite");
  const bool hrr = std::equal(random.begin(), random.end(), kHelloRetryRandom.begin());
  f.kind = hrr ? ServerFlightKind::hello_retry_request : ServerFlightKind::server_hello;
  if (r.empty()) return true;  // TLS 1.0-1.2 without extensions
  std::span<const uint8_t> exts;
  if (!r.vec16(exts) || !r.empty()) return fail(why, "ServerHello extensions malformed");
  ByteReader e(exts);
  while (!e.empty()) {
    uint16_t type = 0;
    std::span<const uint8_t> data;
    if (!e.u16(type) || !e.vec16(data)) return fail(why, "ServerHello extension runs past the list");
    ByteReader d(data);
    uint16_t v = 0;
    if (type == tls_ext::supported_versions) {
      if (!d.u16(v) || !d.empty()) return fail(why, "ServerHello supported_versions is not one version");
      f.selected_version = v;
    } else if (type == tls_ext::key_share && hrr) {
      if (!d.u16(v) || !d.empty()) return fail(why, "HelloRetryRequest key_share is not one group");
      f.selected_group = v;
    }
  }
  return true;
}

}  // namespace

ServerFlightParse parse_server_flight(std::span<const uint8_t> in) {
  if (in.empty()) return flight_need(1);
  if (in[0] == kContentAlert) {
    if (in.size() < kTlsRecordHeader) return flight_need(kTlsRecordHeader);
    ServerFlightParse p;
    p.status = ParseStatus::complete;
    p.flight.kind = ServerFlightKind::alert;
    return p;
  }
  std::vector<uint8_t> msg;
  size_t at = 0, records = 0, msg_size = 0;
  for (;;) {
    if (in.size() - at < kTlsRecordHeader) {
      if (in.size() > at && in[at] != kContentHandshake) {
        return flight_invalid("record of content type " + std::to_string(in[at]) + " before the ServerHello");
      }
      if (in.size() > at + 1 && in[at + 1] != 3) return flight_invalid("record version is not 3.x");
      return flight_need(at + kTlsRecordHeader + 1);
    }
    const uint8_t type = in[at];
    const size_t len = static_cast<size_t>((in[at + 3] << 8) | in[at + 4]);
    if (type != kContentHandshake) {
      return flight_invalid("record of content type " + std::to_string(type) + " before the ServerHello");
    }
    if (in[at + 1] != 3 || in[at + 2] > 4) return flight_invalid("record version is not 3.0..3.4");
    if (len == 0 || len > kTlsMaxRecordPayload) return flight_invalid("handshake record of " + std::to_string(len) + " bytes");
    if (++records > kTlsMaxHelloRecords) return flight_invalid("ServerHello spans more than 16 records");
    const size_t end = at + kTlsRecordHeader + len;
    if (in.size() < end) {
      if (msg.empty() && in.size() > at + kTlsRecordHeader && in[at + kTlsRecordHeader] != kHandshakeServerHello) {
        return flight_invalid("handshake message of type " + std::to_string(in[at + kTlsRecordHeader]) + ", not ServerHello");
      }
      return flight_need(end);
    }
    const auto payload = in.subspan(at + kTlsRecordHeader, len);
    msg.insert(msg.end(), payload.begin(), payload.end());
    at = end;
    if (msg[0] != kHandshakeServerHello) {
      return flight_invalid("handshake message of type " + std::to_string(msg[0]) + ", not ServerHello");
    }
    if (msg_size == 0 && msg.size() >= 4) {
      msg_size = 4 + ((static_cast<size_t>(msg[1]) << 16) | (static_cast<size_t>(msg[2]) << 8) | msg[3]);
      if (msg_size > kTlsMaxHello) return flight_invalid("ServerHello of " + std::to_string(msg_size) + " bytes");
    }
    if (msg_size != 0 && msg.size() >= msg_size) break;
  }
  ServerFlightParse p;
  std::string why;
  if (!parse_server_hello_body(std::span<const uint8_t>(msg).subspan(4, msg_size - 4), p.flight, why)) {
    return flight_invalid(why);
  }
  p.status = ParseStatus::complete;
  return p;
}

void TlsHandshakeWatch::refuse(std::string why, bool server) {
  state_ = State::refused;
  server_fault_ = server;
  reason_ = std::move(why);
  holding_ = false;
}

size_t TlsHandshakeWatch::client_bytes(std::span<const uint8_t> pending) {
  holding_ = false;
  size_t pos = 0;
  while (pos < pending.size()) {
    if (state_ == State::done) return pending.size();
    if (state_ == State::refused) return pos;
    if (client_skip_ > 0) {
      const size_t n = std::min(client_skip_, pending.size() - pos);
      pos += n;
      client_skip_ -= n;
      continue;
    }
    // At a record boundary: wait for the whole header.
    if (pending.size() - pos < kTlsRecordHeader) {
      holding_ = true;
      return pos;
    }
    const uint8_t type = pending[pos];
    const size_t len = static_cast<size_t>((pending[pos + 3] << 8) | pending[pos + 4]);
    if (pending[pos + 1] != 3 || pending[pos + 2] > 4) {
      refuse("tls: a client record after the first ClientHello is not TLS 3.0..3.4");
      return pos;
    }
    if (len > kTlsMaxCiphertext) {
      refuse("tls: a client record of " + std::to_string(len) + " bytes after the first ClientHello");
      return pos;
    }
    switch (type) {
      case kContentChangeCipherSpec:  // RFC 8446 D.4 middlebox compatibility
      case kContentAlert:
      case kContentApplicationData:   // 0-RTT early data, or the encrypted handshake
        pos += kTlsRecordHeader;
        client_skip_ = len;
        break;
      case kContentHandshake: {
        if (state_ == State::await_server) {
          // A cleartext handshake record before the server answered: held until the server's
          // first flight says whether it is a (checked) second ClientHello.
          holding_ = true;
          return pos;
        }
        const ClientHelloParse hello = parse_client_hello(pending.subspan(pos));
        if (hello.status == ParseStatus::need_more) {
          holding_ = true;
          return pos;
        }
        if (hello.status == ParseStatus::invalid) {
          refuse("tls: the second ClientHello (after a HelloRetryRequest) is not valid: " + hello.reason);
          return pos;
        }
        if (hello.hello.ech) {
          refuse("tls: the second ClientHello: " + ech_refusal(hello.hello.ech_type));
          return pos;
        }
        second_sni_ = hello.hello.server_name;
        if (hello.hello.server_name != first_sni_) {
          auto shown = [](const std::optional<std::string>& s) { return s ? "`" + *s + "`" : std::string("none"); };
          refuse("tls: the second ClientHello (after a HelloRetryRequest) names SNI " + shown(hello.hello.server_name) +
                 ", the first named " + shown(first_sni_));
          return pos;
        }
        pos += hello.hello.consumed;
        state_ = State::done;
        break;
      }
      default:
        refuse("tls: a client record of content type " + std::to_string(type) + " after the first ClientHello");
        return pos;
    }
  }
  return pos;
}

void TlsHandshakeWatch::server_bytes(std::span<const uint8_t> data) {
  if (state_ != State::await_server || data.empty()) return;
  // Never more than the largest first message needs (16 full records).
  const size_t cap = kTlsMaxHelloRecords * (kTlsRecordHeader + kTlsMaxRecordPayload);
  const size_t take = std::min(data.size(), cap - std::min(cap, server_buf_.size()));
  server_buf_.insert(server_buf_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(take));
  const ServerFlightParse p = parse_server_flight(server_buf_);
  if (p.status == ParseStatus::need_more) {
    if (server_buf_.size() >= cap) refuse("tls: the server's first flight: no ServerHello in 16 records", true);
    return;
  }
  server_buf_.clear();
  server_buf_.shrink_to_fit();
  if (p.status == ParseStatus::invalid) {
    refuse(p.reason, true);
    return;
  }
  state_ = p.flight.kind == ServerFlightKind::hello_retry_request ? State::await_second_hello : State::done;
}

}  // namespace soyaos::network
