// libFuzzer target for the TLS second-flight checks (src/network/tls_handshake.h): the
// server's first flight parser and the watch that holds and checks a second ClientHello
// after a HelloRetryRequest. Input: one byte choosing how the rest is split, then the
// server's bytes and the client's bytes separated at a position the first bytes choose.
// Invariants (violations trap): parse_server_flight's need_more asks for more than it got,
// complete gives the same answer on a copy, invalid says why; the watch never lets more
// client bytes through than it was shown, refuses with a reason (blaming the server only
// when it refused), and once done passes all.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "network/tls_handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soyaos::network;
  if (size < 3) return 0;
  const size_t chunk = 1 + data[0] % 64;
  const size_t split = 3 + ((static_cast<size_t>(data[1]) << 8 | data[2]) % (size - 2));
  const std::span<const uint8_t> server(data + 3, split - 3);
  const std::span<const uint8_t> client(data + split, size - split);

  const ServerFlightParse p = parse_server_flight(server);
  if (p.status == ParseStatus::need_more && p.need <= server.size()) __builtin_trap();
  if (p.status == ParseStatus::invalid && p.reason.empty()) __builtin_trap();
  if (p.status == ParseStatus::complete) {
    const std::vector<uint8_t> copy(server.begin(), server.end());
    const ServerFlightParse again = parse_server_flight(copy);
    if (again.status != ParseStatus::complete || again.flight.kind != p.flight.kind) __builtin_trap();
  }

  TlsHandshakeWatch w(std::string("a.example"));
  std::vector<uint8_t> pending;
  size_t s = 0, c = 0;
  while (s < server.size() || c < client.size()) {
    if (s < server.size()) {
      const size_t n = std::min(chunk, server.size() - s);
      w.server_bytes(server.subspan(s, n));
      s += n;
    }
    if (c < client.size()) {
      const size_t n = std::min(chunk, client.size() - c);
      pending.insert(pending.end(), client.begin() + static_cast<std::ptrdiff_t>(c),
                     client.begin() + static_cast<std::ptrdiff_t>(c + n));
      c += n;
    }
    const auto before = w.state();
    const size_t fwd = w.client_bytes(pending);
    if (fwd > pending.size()) __builtin_trap();
    if (before == TlsHandshakeWatch::State::done && fwd != pending.size()) __builtin_trap();
    if (w.server_fault() && w.state() != TlsHandshakeWatch::State::refused) __builtin_trap();
    if (w.state() == TlsHandshakeWatch::State::refused) {
      if (w.reason().empty()) __builtin_trap();
      break;
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(fwd));
  }
  return 0;
}
