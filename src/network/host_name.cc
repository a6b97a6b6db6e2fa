#include "network/host_name.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace soyaos::network {
namespace {

// RFC 3492 6.1 parameters for IDNA.
constexpr uint32_t kBase = 36, kTmin = 1, kTmax = 26, kSkew = 38, kDamp = 700, kInitialBias = 72,
                   kInitialN = 128;
constexpr uint32_t kMaxInt = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

uint32_t adapt(uint32_t delta, uint32_t points, bool first) {
  delta = first ? delta / kDamp : delta / 2;
  delta += delta / points;
  uint32_t k = 0;
  while (delta > ((kBase - kTmin) * kTmax) / 2) {
    delta /= kBase - kTmin;
    k += kBase;
  }
  return k + (kBase - kTmin + 1) * delta / (delta + kSkew);
}

// a-z = 0..25, 0-9 = 26..35 (upper case accepted as RFC 3492 allows; callers lower first).
uint32_t decode_digit(char c) {
  if (c >= 'a' && c <= 'z') return static_cast<uint32_t>(c - 'a');
  if (c >= 'A' && c <= 'Z') return static_cast<uint32_t>(c - 'A');
  if (c >= '0' && c <= '9') return static_cast<uint32_t>(c - '0') + 26;
  return kBase;
}

char encode_digit(uint32_t d) { return d < 26 ? static_cast<char>('a' + d) : static_cast<char>('0' + (d - 26)); }

uint32_t threshold(uint32_t k, uint32_t bias) {
  if (k <= bias) return kTmin;
  if (k >= bias + kTmax) return kTmax;
  return k - bias;
}

bool is_ldh(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The raw text for an error message: printable ASCII as is, every other byte as \xNN, at
// most 80 bytes of input shown (the text comes from the agent and ends up on a terminal).
std::string shown(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < raw.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (raw.size() > 80) out += "...";
  return out;
}

Error refused(std::string_view raw, const std::string& why) {
  return make_error("host name `" + shown(raw) + "`: " + why, EINVAL);
}

// Why an A-label ("xn--" + Punycode) is not one, or "" when it is valid: the Punycode
// decodes, yields at least one non-ASCII code point (else it is an ASCII name in disguise),
// no surrogate or control code point, and encodes back to exactly the same text.
std::string a_label_problem(std::string_view label) {
  const std::string_view encoded = label.substr(4);
  if (encoded.empty()) return "`xn--` label with nothing after the prefix";
  const auto decoded = punycode_decode(encoded);
  if (!decoded) return "label `" + std::string(label) + "` is not valid Punycode";
  const bool any_non_ascii = std::any_of(decoded->begin(), decoded->end(), [](char32_t c) { return c >= 0x80; });
  if (!any_non_ascii) return "label `" + std::string(label) + "` decodes to plain ASCII (not an IDN A-label)";
  for (char32_t c : *decoded) {
    if ((c >= 0xD800 && c <= 0xDFFF) || c > kMaxCodePoint || (c >= 0x80 && c < 0xA0)) {
      return "label `" + std::string(label) + "` decodes to an invalid or control code point";
    }
  }
  const auto again = punycode_encode(*decoded);
  if (!again || *again != encoded) return "label `" + std::string(label) + "` is not in canonical Punycode form";
  return "";
}

}  // namespace

std::optional<std::u32string> punycode_decode(std::string_view input) {
  std::u32string out;
  size_t basic = input.rfind('-');
  size_t in = 0;
  if (basic == std::string_view::npos) {
    basic = 0;
  } else {
    for (size_t j = 0; j < basic; ++j) {
      const auto c = static_cast<unsigned char>(input[j]);
      if (c >= 0x80) return std::nullopt;
      out.push_back(c);
    }
    // RFC 3492 6.2: a delimiter at position 0 is not one (then there are no basic code
    // points, and '-' is read as a digit, which is invalid).
    in = basic > 0 ? basic + 1 : 0;
  }
  uint32_t n = kInitialN, i = 0, bias = kInitialBias;
  while (in < input.size()) {
    const uint32_t old_i = i;
    uint32_t w = 1;
    for (uint32_t k = kBase;; k += kBase) {
      if (in >= input.size()) return std::nullopt;
      const uint32_t digit = decode_digit(input[in++]);
      if (digit >= kBase) return std::nullopt;
      if (digit > (kMaxInt - i) / w) return std::nullopt;
      i += digit * w;
      const uint32_t t = threshold(k, bias);
      if (digit < t) break;
      if (w > kMaxInt / (kBase - t)) return std::nullopt;
      w *= kBase - t;
      if (k > kMaxInt - kBase) return std::nullopt;
    }
    const auto points = static_cast<uint32_t>(out.size() + 1);
    bias = adapt(i - old_i, points, old_i == 0);
    if (i / points > kMaxInt - n) return std::nullopt;
    n += i / points;
    i %= points;
    if (n > kMaxCodePoint) return std::nullopt;
    out.insert(out.begin() + i, static_cast<char32_t>(n));
    ++i;
  }
  return out;
}

std::optional<std::string> punycode_encode(std::u32string_view input) {
  std::string out;
  for (char32_t c : input) {
    if (c > kMaxCodePoint) return std::nullopt;
    if (c < 0x80) out += static_cast<char>(c);
  }
  const auto basic = static_cast<uint32_t>(out.size());
  uint32_t handled = basic;
  if (basic > 0) out += '-';
  uint32_t n = kInitialN, delta = 0, bias = kInitialBias;
  while (handled < input.size()) {
    uint32_t m = kMaxInt;
    for (char32_t c : input) {
      if (c >= n && c < m) m = c;
    }
    if (m - n > (kMaxInt - delta) / (handled + 1)) return std::nullopt;
    delta += (m - n) * (handled + 1);
    n = m;
    for (char32_t c : input) {
      if (c < n && ++delta == 0) return std::nullopt;
      if (c != n) continue;
      uint32_t q = delta;
      for (uint32_t k = kBase;; k += kBase) {
        const uint32_t t = threshold(k, bias);
        if (q < t) break;
        out += encode_digit(t + (q - t) % (kBase - t));
        q = (q - t) / (kBase - t);
      }
      out += encode_digit(q);
      bias = adapt(delta, handled + 1, handled == basic);
      delta = 0;
      ++handled;
    }
    ++delta;
    ++n;
  }
  return out;
}

Result<std::string> canonical_host_name(std::string_view raw) {
  if (raw.empty()) return refused(raw, "empty");
  // One byte at a time first, so that the message names the worst problem plainly.
  for (char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return refused(raw, "contains a control character");
    if (c >= 0x80) return refused(raw, "is not ASCII (send an IDN as its A-label, xn--...)");
    if (c == '\\') return refused(raw, "contains a backslash (zone-file escapes are not host names)");
    if (c == '%') return refused(raw, "contains '%' (percent-escapes are not host names)");
  }
  std::string name(raw);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  if (name.back() == '.') name.pop_back();
  if (name.empty()) return refused(raw, "is the root, not a host");
  if (name.size() > kHostMaxName) return refused(raw, "longer than 253 bytes");
  size_t start = 0;
  std::string_view last;
  for (;;) {
    const size_t dot = name.find('.', start);
    const std::string_view label = std::string_view(name).substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty()) return refused(raw, "has an empty label");
    if (label.size() > kHostMaxLabel) return refused(raw, "has a label longer than 63 bytes");
    for (char c : label) {
      if (!is_ldh(c)) {
        return refused(raw, std::string("has a character outside letters, digits and '-' (`") + shown({&c, 1}) + "`)");
      }
    }
    if (label.front() == '-' || label.back() == '-') return refused(raw, "has a label starting or ending with '-'");
    if (label.size() >= 4 && label.substr(0, 4) == "xn--") {
      if (std::string problem = a_label_problem(label); !problem.empty()) return refused(raw, problem);
    }
    last = label;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (std::all_of(last.begin(), last.end(), is_digit)) return refused(raw, "ends with an all-numeric label");
  // inet_aton reads "127.1", "0x7f.0.0.1", "2130706433" as addresses, and getaddrinfo (the
  // system resolver the Moon proxy uses) with it: such a spelling is an address, not a name.
  in_addr a{};
  if (::inet_aton(name.c_str(), &a) != 0) return refused(raw, "is a numeric address spelling, not a name");
  return name;
}

}  // namespace soyaos::network
