// Host names as they enter the egress path (SPEC.md C6, C6a, C7): a DNS stub query, a
// Moon proxy CONNECT target or Host field, a TLS SNI, an http entry's Host field, a name
// recorded in learn mode. Each is canonicalised once, strictly, before any policy check, so
// that the name a rule is checked against is exactly the name the upstream resolver will
// look up: no zone-file escapes (`secre\t`, `\115ecret`) that a resolver decodes into a
// denied name, no percent-escapes, no Unicode spellings, no numeric forms that
// inet_aton/getaddrinfo read as an address ("0x7f.1"). Pure functions, no I/O.
// docs/network.md ("Names") says what is refused.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace soyaos::network {

inline constexpr size_t kHostMaxName = 253;   // presentation form without the trailing dot
inline constexpr size_t kHostMaxLabel = 63;

// The canonical form of a host name, or an error (errno EINVAL) saying what was refused.
// Accepts ASCII letters, digits and '-' in labels of 1..63 bytes that neither start nor
// end with '-', at most 253 bytes in all, with one optional trailing dot; upper case is
// lowered and the trailing dot dropped. Refused: empty input or labels, backslashes,
// control characters, '%', '_', any byte outside ASCII (a Unicode U-label must be sent as
// its A-label), an A-label ("xn--") whose Punycode does not decode to a non-ASCII label
// that encodes back to the same text, a last label that is all digits or that
// inet_aton reads as a number ("0x7f"), and any name inet_aton would take for an address.
// IP literals are not host names: callers try policy::parse_ip first.
Result<std::string> canonical_host_name(std::string_view raw);

// RFC 3492 Punycode, for A-label validation: decodes the part after "xn--" into code
// points (nullopt on any malformed input or overflow), and encodes code points back.
std::optional<std::u32string> punycode_decode(std::string_view encoded);
std::optional<std::string> punycode_encode(std::u32string_view code_points);

}  // namespace soyaos::network
