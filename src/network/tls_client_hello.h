// The TLS ClientHello at the start of a TCP stream (RFC 8446 4.1.2, RFC 5246 7.4.1.2,
// RFC 6066 3, RFC 7301), for the egress gateway's `https` check (SPEC.md C6): the SNI
// must name the entry's host. Pure function over the bytes read so far: no I/O, time and
// memory linear in the input (at most 64 KiB is ever looked at), never crashes.
// docs/network-parsers.md explains what is refused and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "network/parse_status.h"

namespace soyaos::network {

inline constexpr size_t kTlsRecordHeader = 5;
inline constexpr size_t kTlsMaxRecordPayload = 16384;  // 2^14 (RFC 8446 5.1)
inline constexpr size_t kTlsMaxHelloRecords = 16;       // records one ClientHello may span
inline constexpr size_t kTlsMaxHello = 65536;           // handshake message bound, header included

namespace tls_ext {
inline constexpr uint16_t server_name = 0, alpn = 16, supported_versions = 43, key_share = 51,
                          encrypted_client_hello = 0xfe0d;
// Every code point that has carried an encrypted server name: the final ECH (0xfe0d), the
// ECH drafts' (draft-ietf-tls-esni-07/08 0xff02, -09..-12 0xfe09..0xfe0c, and the
// ech_outer_extensions 0xfd00 that must never appear in an outer hello), the drafts' nonce
// and outer-extension helpers (0xff03, 0xff04) and legacy ESNI (0xffce). A server that
// still speaks one of the drafts would decrypt a hidden name the gateway never saw.
constexpr bool is_ech_like(uint16_t type) {
  return type == encrypted_client_hello || type == 0xffce || type == 0xff02 || type == 0xff03 ||
         type == 0xff04 || (type >= 0xfe08 && type <= 0xfe0c) || type == 0xfd00;
}
}  // namespace tls_ext

struct ClientHello {
  uint16_t record_version = 0;  // legacy_record_version of the first record
  uint16_t legacy_version = 0;  // 0x0303 for TLS 1.2 and 1.3
  // host_name of the server_name extension, canonical (network::canonical_host_name: LDH
  // labels or valid A-labels, lower-cased; escapes, '_', trailing dot refused), or a dotted
  // IPv4 address exactly as sent. nullopt when the client sent no SNI.
  std::optional<std::string> server_name;
  std::vector<std::string> alpn;               // protocol names, in the client's order
  std::vector<uint16_t> supported_versions;    // empty when the extension is absent
  std::vector<uint16_t> cipher_suites;
  std::vector<uint16_t> extension_types;       // in the client's order
  // An encrypted_client_hello extension (or a draft/ESNI code point, tls_ext::is_ech_like)
  // is present: the server_name above is then only the ECH public name and the real one is
  // encrypted; the gateway refuses it. ECH GREASE (Chromium sends it on every connection)
  // looks exactly the same on the wire. ech_type is the first such code point.
  bool ech = false;
  uint16_t ech_type = 0;
  size_t records = 0;                          // TLS records the message spans
  size_t consumed = 0;                         // bytes of those records, headers included
};

struct ClientHelloParse {
  ParseStatus status = ParseStatus::need_more;
  ClientHello hello;   // complete: the parsed message
  size_t need = 0;     // need_more: the input size to wait for before parsing again
  std::string reason;  // invalid: what was wrong, for the violation event
};

// Parses the first bytes of a TLS connection: one or more handshake records (type 22,
// version 3.x, 1..2^14 bytes each, at most 16) carrying exactly one ClientHello of at
// most 64 KiB and nothing else. Bytes after the last record (early data) are not looked
// at. Prefixes of a valid stream are need_more; invalid is final.
ClientHelloParse parse_client_hello(std::span<const uint8_t> record_bytes);

// The refusal text for a ClientHello with ech set, for the violation event and stderr:
// names the code point and says plainly that ECH GREASE (Chromium's default) cannot be
// told from real ECH on a passthrough entry. docs/network.md ("ECH").
std::string ech_refusal(uint16_t ech_type);

}  // namespace soyaos::network
