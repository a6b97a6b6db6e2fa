// Builders of TLS handshake bytes for the parser tests (tls_client_hello_test.cc,
// tls_handshake_test.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "network/tls_client_hello.h"

namespace soyaos::network::tls_test {

using Bytes = std::vector<uint8_t>;

inline void put16(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

inline Bytes ext(uint16_t type, const Bytes& data) {
  Bytes b;
  put16(b, type);
  put16(b, data.size());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// server_name extension data with the given (type, name) entries.
inline Bytes sni_data(const std::vector<std::pair<uint8_t, std::string>>& names) {
  Bytes list;
  for (const auto& [type, name] : names) {
    list.push_back(type);
    put16(list, name.size());
    list.insert(list.end(), name.begin(), name.end());
  }
  Bytes b;
  put16(b, list.size());
  b.insert(b.end(), list.begin(), list.end());
  return b;
}

inline Bytes sni(const std::string& host) { return ext(tls_ext::server_name, sni_data({{0, host}})); }

// A ClientHello handshake message (header included) with the given extension blocks.
inline Bytes hello_message(const std::vector<Bytes>& exts, bool with_extensions = true) {
  Bytes body = {0x03, 0x03};
  body.insert(body.end(), 32, 0xab);                 // random
  body.push_back(0);                                 // session id
  body.insert(body.end(), {0x00, 0x02, 0x13, 0x01});  // TLS_AES_128_GCM_SHA256
  body.insert(body.end(), {0x01, 0x00});             // null compression
  if (with_extensions) {
    Bytes all;
    for (const Bytes& e : exts) all.insert(all.end(), e.begin(), e.end());
    put16(body, all.size());
    body.insert(body.end(), all.begin(), all.end());
  }
  Bytes msg = {1, static_cast<uint8_t>(body.size() >> 16), static_cast<uint8_t>(body.size() >> 8),
               static_cast<uint8_t>(body.size())};
  msg.insert(msg.end(), body.begin(), body.end());
  return msg;
}

// Wraps `msg` in handshake records of at most `fragment` payload bytes each.
inline Bytes records(const Bytes& msg, size_t fragment = 16384) {
  Bytes out;
  for (size_t at = 0; at < msg.size(); at += fragment) {
    const size_t n = std::min(fragment, msg.size() - at);
    out.insert(out.end(), {22, 0x03, 0x01});
    put16(out, n);
    out.insert(out.end(), msg.begin() + static_cast<std::ptrdiff_t>(at), msg.begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  return out;
}


}  // namespace soyaos::network::tls_test
