#include "common/base64.h"

#include <sodium.h>
#include <string.h>  // explicit_bzero

#include <string>

#include "common/wipe.h"

namespace soyaos {
namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Why sodium_base642bin refused `text` (whose length is a multiple of 4): the first character
// out of place, else the padding bits. Only a position is said: the text may be a secret.
std::string why_refused(std::string_view text) {
  bool padding = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=' && i + 2 >= text.size()) {
      padding = true;
    } else if (c == '=' || padding || kAlphabet.find(c) == std::string_view::npos) {
      return "not base64 (unexpected character at " + std::to_string(i) + ")";
    }
  }
  return "not base64 (non-canonical padding)";
}

}  // namespace

// libsodium's codec needs no sodium_init(): it is plain code over the caller's buffers.
std::string base64_encode(std::string_view bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the terminating NUL
  return out;
}

Result<size_t> base64_decode_into(std::string_view text, std::span<unsigned char> out) {
  // Refused before libsodium sees it: a length that is not whole quads; a byte past 0x7F, which
  // libsodium 1.0.18 (Debian 12's) decodes as if it were '/' (it reads the text as signed
  // chars); a text that cannot fit. The high bits are gathered over the whole text, not
  // searched: the time does not depend on where a secret's characters are.
  unsigned char high = 0;
  for (const char c : text) high |= static_cast<unsigned char>(c);
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  std::string why;
  if (text.size() % 4 != 0) {
    why = "not base64 (length is not a multiple of 4)";
  } else if ((high & 0x80) != 0) {
    why = why_refused(text);
  } else if (text.size() / 4 * 3 - pad > out.size()) {
    why = "not base64 (more than " + std::to_string(out.size()) + " bytes)";
  }
  size_t n = 0;
  // No `ignore` characters and no end pointer: the whole text must be base64, padded. libsodium
  // also refuses set padding bits, so what it accepts is canonical.
  if (why.empty() && sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &n, nullptr,
                                       sodium_base64_VARIANT_ORIGINAL) != 0) {
    why = why_refused(text);
  }
  if (!why.empty()) {
    // A refusal leaves what was decoded before the bad character in the buffer.
    explicit_bzero(out.data(), out.size());
    return make_error(why);
  }
  return n;
}

Result<std::string> base64_decode(std::string_view text) {
  std::string out(text.size() / 4 * 3, '\0');
  auto n = base64_decode_into(text, {reinterpret_cast<unsigned char*>(out.data()), out.size()});
  if (!n) return n.error();  // `out` is zeroed
  out.resize(*n);
  return out;
}

Result<std::string> base64_decode_lenient(std::string_view text) {
  // The canonical text made of `text` (the same bytes decoded), then decoded canonically:
  // without its line breaks, the last character's padding bits (2 under "=", 4 under "==")
  // cleared. The copy is as secret as the text.
  std::string canonical;
  const WipeOnExit wipe_canonical(canonical);
  canonical.reserve(text.size());
  for (const char c : text) {
    if (c != '\r' && c != '\n') canonical += c;
  }
  size_t pad = 0;
  while (pad < canonical.size() && canonical[canonical.size() - 1 - pad] == '=') ++pad;
  if (canonical.size() % 4 == 0 && (pad == 1 || pad == 2)) {
    char& last = canonical[canonical.size() - pad - 1];
    const size_t v = kAlphabet.find(last);
    if (v != std::string_view::npos) last = kAlphabet[v & (pad == 1 ? 0x3C : 0x30)];
  }
  return base64_decode(canonical);
}

}  // namespace soyaos
