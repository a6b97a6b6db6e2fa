#include "common/text.h"

#include <cstdint>
#include <cstdio>

namespace soyaos {
namespace {

// Length of the well-formed UTF-8 sequence at text[i] (1..4), with its code point; 0 when
// the bytes there are not one (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF).
size_t utf8_sequence(std::string_view text, size_t i, uint32_t& cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1Fu;
    min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0Fu;
    min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07u;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void append_byte_escape(std::string& out, uint8_t b) {
  char buf[8];
  (void)std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(b));
  out += buf;
}

void append_codepoint_escape(std::string& out, uint32_t cp) {
  char buf[16];
  (void)std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
  out += buf;
}

// Code points that change how the following text is shown without being visible.
bool is_display_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x2028 || cp == 0x2029;
}

}  // namespace

std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    size_t len = utf8_sequence(text, i, cp);
    if (len == 0) {
      append_byte_escape(out, static_cast<uint8_t>(text[i]));
      ++i;
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      append_byte_escape(out, static_cast<uint8_t>(cp));
    } else if (is_display_control(cp)) {
      append_codepoint_escape(out, cp);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string escape_lines_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (true) {
    size_t end = text.find('\n', start);
    out += escape_for_terminal(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string valid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    size_t len = utf8_sequence(text, i, cp);
    if (len == 0) {
      append_byte_escape(out, static_cast<uint8_t>(text[i]));
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    size_t len = utf8_sequence(text, i, cp);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string truncate_utf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back off continuation bytes so that a multi-byte character is never split.
  while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string out(text.substr(0, cut));
  out += "\u2026[+" + std::to_string(text.size() - cut) + " bytes]";
  return out;
}

}  // namespace soyaos
