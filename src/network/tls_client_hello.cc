#include "network/tls_client_hello.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string_view>
#include <utility>

#include "network/byte_reader.h"
#include "network/host_name.h"

namespace soyaos::network {
namespace {

constexpr uint8_t kContentHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;

using Reader = ByteReader;

bool fail(std::string& why, std::string reason) {
  why = std::move(reason);
  return false;
}

ClientHelloParse invalid(std::string reason) {
  ClientHelloParse p;
  p.status = ParseStatus::invalid;
  p.reason = "tls: " + std::move(reason);
  return p;
}

ClientHelloParse need_more(size_t need) {
  ClientHelloParse p;
  p.need = need;
  return p;
}

// RFC 6066 3: server_name_list with exactly one host_name; we also require a plain DNS
// host name so that what the gateway matches is what the server will see.
bool parse_sni(std::span<const uint8_t> data, std::string& host, std::string& why) {
  Reader r(data);
  std::span<const uint8_t> list;
  if (!r.vec16(list) || !r.empty()) return fail(why, "server_name extension length mismatch");
  if (list.empty()) return fail(why, "empty server_name list");
  Reader l(list);
  bool seen = false;
  while (!l.empty()) {
    uint8_t type = 0;
    std::span<const uint8_t> name;
    if (!l.u8(type) || !l.vec16(name)) return fail(why, "server_name entry runs past its list");
    if (type != 0) return fail(why, "server_name entry of type " + std::to_string(type) + ", only host_name is accepted");
    if (seen) return fail(why, "more than one host_name in server_name");
    seen = true;
    if (name.empty() || name.size() > 253) return fail(why, "host_name of " + std::to_string(name.size()) + " bytes");
    const std::string raw(name.begin(), name.end());
    // RFC 6066 3: no trailing dot ("a.test." may select another virtual host than "a.test").
    if (raw.back() == '.') return fail(why, "host_name ends with a dot");
    if (raw.find('\0') != std::string::npos) return fail(why, "host_name contains NUL");
    // RFC 6066 forbids literal addresses, but some clients send a dotted IPv4 anyway; it is
    // kept as sent (it can only ever match an IP literal entry).
    if (in_addr a{}; ::inet_pton(AF_INET, raw.c_str(), &a) == 1) {
      host = raw;
      continue;
    }
    auto canonical = canonical_host_name(raw);
    if (!canonical) return fail(why, "SNI " + canonical.error().message);
    host = std::move(*canonical);
  }
  return true;
}

// RFC 7301 3.1: ProtocolNameList, non-empty, each name 1..255 bytes.
bool parse_alpn(std::span<const uint8_t> data, std::vector<std::string>& out, std::string& why) {
  Reader r(data);
  std::span<const uint8_t> list;
  if (!r.vec16(list) || !r.empty()) return fail(why, "ALPN extension length mismatch");
  if (list.empty()) return fail(why, "empty ALPN list");
  Reader l(list);
  while (!l.empty()) {
    std::span<const uint8_t> name;
    if (!l.vec8(name)) return fail(why, "ALPN name runs past its list");
    if (name.empty()) return fail(why, "empty ALPN protocol name");
    out.emplace_back(name.begin(), name.end());
  }
  return true;
}

// RFC 8446 4.2.1: ProtocolVersion versions<2..254>.
bool parse_versions(std::span<const uint8_t> data, std::vector<uint16_t>& out, std::string& why) {
  Reader r(data);
  std::span<const uint8_t> list;
  if (!r.vec8(list) || !r.empty()) return fail(why, "supported_versions length mismatch");
  if (list.size() < 2 || list.size() % 2 != 0) return fail(why, "supported_versions list of odd or zero length");
  for (size_t i = 0; i < list.size(); i += 2) out.push_back(static_cast<uint16_t>((list[i] << 8) | list[i + 1]));
  return true;
}

// The ClientHello body (after the 4-byte handshake header).
bool parse_body(std::span<const uint8_t> body, ClientHello& h, std::string& why) {
  Reader r(body);
  std::span<const uint8_t> random, session_id, suites, compression;
  if (!r.u16(h.legacy_version) || !r.bytes(32, random)) return fail(why, "ClientHello shorter than version and random");
  if (h.legacy_version < 0x0301 || h.legacy_version > 0x0303) {
    return fail(why, "ClientHello legacy_version " + std::to_string(h.legacy_version >> 8) + "." +
                 std::to_string(h.legacy_version & 0xff) + " is not TLS 1.0..1.2");
  }
  if (!r.vec8(session_id)) return fail(why, "session id runs past the message");
  if (session_id.size() > 32) return fail(why, "session id longer than 32 bytes");
  if (!r.vec16(suites)) return fail(why, "cipher suites run past the message");
  if (suites.empty() || suites.size() % 2 != 0) return fail(why, "cipher suite list of odd or zero length");
  for (size_t i = 0; i < suites.size(); i += 2) h.cipher_suites.push_back(static_cast<uint16_t>((suites[i] << 8) | suites[i + 1]));
  if (!r.vec8(compression)) return fail(why, "compression methods run past the message");
  if (compression.empty()) return fail(why, "no compression method");
  if (r.empty()) return true;  // TLS 1.0-1.2 allow a hello without extensions

  std::span<const uint8_t> exts;
  if (!r.vec16(exts)) return fail(why, "extensions run past the message");
  if (!r.empty()) return fail(why, "bytes after the extensions");
  std::vector<bool> seen(65536, false);
  Reader e(exts);
  while (!e.empty()) {
    uint16_t type = 0;
    std::span<const uint8_t> data;
    if (!e.u16(type) || !e.vec16(data)) return fail(why, "extension runs past the extension list");
    if (seen[type]) return fail(why, "extension " + std::to_string(type) + " appears twice");
    seen[type] = true;
    h.extension_types.push_back(type);
    switch (type) {
      case tls_ext::server_name: {
        std::string host;
        if (!parse_sni(data, host, why)) return false;
        h.server_name = std::move(host);
        break;
      }
      case tls_ext::alpn:
        if (!parse_alpn(data, h.alpn, why)) return false;
        break;
      case tls_ext::supported_versions:
        if (!parse_versions(data, h.supported_versions, why)) return false;
        break;
      default:
        if (tls_ext::is_ech_like(type) && h.ech_type == 0) {
          h.ech = true;
          h.ech_type = type;
        }
        break;
    }
  }
  return true;
}

}  // namespace

ClientHelloParse parse_client_hello(std::span<const uint8_t> in) {
  // Reassemble the handshake message from the record payloads.
  std::vector<uint8_t> msg;
  size_t at = 0;
  size_t records = 0;
  uint16_t record_version = 0;
  size_t msg_size = 0;  // 4 + handshake length, once the handshake header is known
  for (;;) {
    if (in.size() - at < kTlsRecordHeader) {
      // Check what we have of the header so that a non-TLS stream fails at once.
      if (in.size() > at && in[at] != kContentHandshake) {
        return invalid("record of content type " + std::to_string(in[at]) + ", not handshake");
      }
      if (in.size() > at + 1 && in[at + 1] != 3) return invalid("record version is not 3.x");
      // At least the next record header and one payload byte, or what the message lacks.
      size_t missing = 1;
      if (msg_size != 0) {
        missing = msg_size - msg.size();
      } else if (msg.size() < 4) {
        missing = 4 - msg.size();
      }
      return need_more(at + kTlsRecordHeader + missing);
    }
    const uint8_t type = in[at];
    const uint16_t version = static_cast<uint16_t>((in[at + 1] << 8) | in[at + 2]);
    const size_t len = static_cast<size_t>((in[at + 3] << 8) | in[at + 4]);
    if (type != kContentHandshake) return invalid("record of content type " + std::to_string(type) + ", not handshake");
    if ((version >> 8) != 3 || (version & 0xff) > 4) return invalid("record version is not 3.0..3.4");
    if (len == 0) return invalid("empty handshake record");
    if (len > kTlsMaxRecordPayload) return invalid("record of " + std::to_string(len) + " bytes is over 2^14");
    if (records == 0) record_version = version;
    if (++records > kTlsMaxHelloRecords) return invalid("ClientHello spans more than 16 records");
    const size_t end = at + kTlsRecordHeader + len;
    // Only the bytes this message still needs; the rest of the record must not exist.
    if (in.size() < end) {
      if (msg.empty() && in.size() > at + kTlsRecordHeader && in[at + kTlsRecordHeader] != kHandshakeClientHello) {
        return invalid("handshake message of type " + std::to_string(in[at + kTlsRecordHeader]) + ", not ClientHello");
      }
      return need_more(end);
    }
    const auto payload = in.subspan(at + kTlsRecordHeader, len);
    msg.insert(msg.end(), payload.begin(), payload.end());
    at = end;
    if (msg_size == 0 && msg.size() >= 4) {
      if (msg[0] != kHandshakeClientHello) return invalid("handshake message of type " + std::to_string(msg[0]) + ", not ClientHello");
      msg_size = 4 + ((static_cast<size_t>(msg[1]) << 16) | (static_cast<size_t>(msg[2]) << 8) | msg[3]);
      if (msg_size > kTlsMaxHello) return invalid("ClientHello of " + std::to_string(msg_size) + " bytes is over 64 KiB");
    } else if (msg_size == 0 && !msg.empty() && msg[0] != kHandshakeClientHello) {
      return invalid("handshake message of type " + std::to_string(msg[0]) + ", not ClientHello");
    }
    if (msg_size != 0 && msg.size() >= msg_size) break;
  }
  if (msg.size() > msg_size) return invalid("bytes after the ClientHello in its last record");

  ClientHelloParse p;
  p.hello.record_version = record_version;
  p.hello.records = records;
  p.hello.consumed = at;
  std::string why;
  if (!parse_body(std::span<const uint8_t>(msg).subspan(4), p.hello, why)) return invalid(std::move(why));
  p.status = ParseStatus::complete;
  return p;
}

std::string ech_refusal(uint16_t ech_type) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string code = "0x";
  for (int shift = 12; shift >= 0; shift -= 4) code += kHex[(ech_type >> shift) & 0xf];
  const std::string what = ech_type == 0xffce ? "legacy encrypted SNI (ESNI"
                           : ech_type == tls_ext::encrypted_client_hello ? "encrypted ClientHello (ECH"
                                                                         : "a draft encrypted ClientHello (ECH draft";
  return what + ", extension " + code +
         "): the real server name would be hidden from the gateway. ECH GREASE, which Chromium-based clients "
         "send on every connection, looks the same on the wire and is refused too on a passthrough https "
         "entry; turn ECH off in the client (Chromium: --disable-features=EncryptedClientHello)";
}

}  // namespace soyaos::network
