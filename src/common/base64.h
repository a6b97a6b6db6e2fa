// Base64 as RFC 4648 §4 has it: the standard alphabet (A-Z a-z 0-9 + /), '=' padding to a
// multiple of four characters, no line breaks and no white space. The one codec of the tree:
// minisign keys and signatures (common/minisign.cc), the Moon's PEM keys and checkpoint
// signatures (moon/chain.cc), Docker's `auths` credentials and HTTP Basic authentication
// (oci/). It is libsodium's (sodium_bin2base64 / sodium_base642bin), whose decoder runs in
// time independent of the characters it decodes: secrets pass through it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace soyaos {

std::string base64_encode(std::string_view bytes);

// The canonical decoding: the text must be exactly what base64_encode writes for some bytes
// (the alphabet only, '=' only as the last one or two characters and only as many as the
// length needs, the bits that pad the last byte zero), so that every byte string has one text.
// "" decodes to "". A refused text's decoded part is wiped (it may be a part of a key); the
// error starts "not base64 (" and says why, without quoting the text.
Result<std::string> base64_decode(std::string_view text);
// The same into `out` (a key's fixed buffer: no copy of it on the heap), the number of bytes
// decoded; a text that decodes to more than out.size() bytes is refused, and a refusal zeroes
// all of `out`.
Result<size_t> base64_decode_into(std::string_view text, std::span<unsigned char> out);

// What Go's base64.StdEncoding accepts, and so Docker in its config's `auth` entries
// (oci/credentials.cc): the canonical text, except that the bits padding the last byte may be
// set (they are ignored; tools that write those entries set them now and then) and that line
// breaks (CR, LF) anywhere are skipped (a wrapped `base64` output). Anything else is refused as
// base64_decode refuses it, what was decoded wiped.
Result<std::string> base64_decode_lenient(std::string_view text);

}  // namespace soyaos
