// libFuzzer target for the minisign parsers (common/minisign.h): the input is tried as a
// public key, a secret key and a signature file. Invariants checked (violations trap): a
// parse never crashes and errors carry a message; a parsed public key formats back to a
// file that parses to the same key; a parsed signature's comments are single lines within
// minisign's bounds; verifying a parsed signature against a fixed key never crashes and
// never succeeds (the fuzzer cannot forge Ed25519). An unencrypted secret key is decrypted
// (checksum only: no scrypt, whose cost the parser bounds but the fuzzer must not pay).
// The input is also tried as base64 (common/base64.h, whose decoders those parsers and the
// Docker credentials use): a text the canonical decoder takes is what the encoder writes for
// its bytes, and the lenient decoder takes it to the same bytes; what the lenient one takes
// re-encodes to a text the canonical one takes back; a refusal says "not base64 (".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/base64.h"
#include "common/minisign.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ms = soyaos::minisign;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto pub = ms::parse_public_key(text); pub) {
    auto again = ms::parse_public_key(ms::format_public_key(*pub));
    if (!again || again->key != pub->key || again->key_id != pub->key_id) __builtin_trap();
  } else if (pub.error().message.empty()) {
    __builtin_trap();
  }

  if (auto sec = ms::parse_secret_key(text); sec) {
    if (!sec->encrypted) (void)ms::decrypt(*sec, "");
  } else if (sec.error().message.empty()) {
    __builtin_trap();
  }

  if (auto sig = ms::parse_signature(text); sig) {
    if (sig->trusted_comment.size() > ms::kMaxTrustedCommentBytes ||
        sig->untrusted_comment.size() > ms::kMaxCommentBytes ||
        sig->trusted_comment.find('\n') != std::string::npos)
      __builtin_trap();
    static const ms::PublicKey fixed = [] {
      ms::PublicKey k;
      for (size_t i = 0; i < k.key.size(); ++i) k.key[i] = static_cast<uint8_t>(i * 13 + 5);
      return k;
    }();
    ms::PublicKey key = fixed;
    key.key_id = sig->key_id;
    if (ms::verify(key, *sig, text)) __builtin_trap();
  } else if (sig.error().message.empty()) {
    __builtin_trap();
  }

  if (auto d = soyaos::base64_decode(text); d) {
    auto lenient = soyaos::base64_decode_lenient(text);
    if (soyaos::base64_encode(*d) != text || !lenient || *lenient != *d) __builtin_trap();
  } else if (d.error().message.rfind("not base64 (", 0) != 0) {
    __builtin_trap();
  }
  if (auto l = soyaos::base64_decode_lenient(text); l) {
    auto again = soyaos::base64_decode(soyaos::base64_encode(*l));
    if (!again || *again != *l) __builtin_trap();
  } else if (l.error().message.rfind("not base64 (", 0) != 0) {
    __builtin_trap();
  }
  return 0;
}
