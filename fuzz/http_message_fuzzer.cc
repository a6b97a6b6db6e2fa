// libFuzzer target for the HTTP layer of intercepted connections (issue #12, STYLE.md: fuzz
// every parser): the path normaliser and rule matcher (policy/http_rules.h), the request head
// with its body framing and traits, the response head with its framing (network/http_message.h).
// The first input byte chooses what the rest is fed to:
//   0: a request path — normalise_http_path: when ok, the result starts with `/`, has no `//`,
//      no `.`/`..` segment, no escape of an unreserved byte, and normalising it again returns
//      it unchanged; matching it against a few patterns never crashes;
//   1: a request (head and body) — parse_http_head, request_traits, then the body fed to a
//      BodyFramer whole and in pieces: both end at the same byte with the same outcome;
//   2: a response (head and body) — parse_http_response_head, response_body, same framer check;
//   3: a chunked body alone, framed whole and byte-split the same way.
// Violations trap.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "network/http_head.h"
#include "network/http_message.h"
#include "policy/http_rules.h"

namespace {

using namespace soyaos;

struct Framed {
  size_t consumed = 0;
  bool done = false;
  bool error = false;
};

// Feeds `body` in pieces of `piece` bytes (0: all at once) until the framer finishes or fails.
Framed frame(network::BodyFraming f, std::span<const uint8_t> body, size_t piece) {
  network::BodyFramer framer(f);
  Framed out;
  size_t at = 0;
  while (at < body.size() && !framer.done()) {
    const size_t n = piece == 0 ? body.size() - at : std::min(piece, body.size() - at);
    const network::BodyFramer::Step s = framer.feed(body.subspan(at, n));
    if (s.consumed > n) __builtin_trap();
    at += s.consumed;
    if (!s.error.empty()) {
      out.error = true;
      break;
    }
    if (s.consumed < n && !s.done) __builtin_trap();  // a framer takes all it is given or finishes
    if (s.done != framer.done()) __builtin_trap();
  }
  out.consumed = at;
  out.done = framer.done();
  return out;
}

void check_framing(network::BodyFraming f, std::span<const uint8_t> body, uint8_t split) {
  const Framed whole = frame(f, body, 0);
  const Framed pieces = frame(f, body, 1 + split % 7);
  if (whole.consumed != pieces.consumed || whole.done != pieces.done || whole.error != pieces.error) __builtin_trap();
  if (f.kind == network::BodyKind::length && !whole.error &&
      whole.consumed != std::min<uint64_t>(f.length, body.size())) {
    __builtin_trap();
  }
  if (f.kind == network::BodyKind::until_close && (whole.consumed != body.size() || whole.done)) __builtin_trap();
}

bool is_unreserved(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // lower-case hex never survives normalisation
}

void check_path(std::string_view path) {
  const policy::NormalisedPath n = policy::normalise_http_path(path);
  if (!n.ok()) return;
  const std::string& p = n.path;
  if (p.empty() || p.front() != '/') __builtin_trap();
  if (p.find("//") != std::string::npos || p.find("/./") != std::string::npos || p.find("/../") != std::string::npos) {
    __builtin_trap();
  }
  if (p.ends_with("/.") || p.ends_with("/..")) __builtin_trap();
  for (size_t i = p.find('%'); i != std::string::npos; i = p.find('%', i + 1)) {
    if (i + 2 >= p.size() || hex(p[i + 1]) < 0 || hex(p[i + 2]) < 0) __builtin_trap();
    const auto v = static_cast<uint8_t>(hex(p[i + 1]) * 16 + hex(p[i + 2]));
    if (is_unreserved(v) || v == '/' || v == 0) __builtin_trap();
  }
  const policy::NormalisedPath again = policy::normalise_http_path(p);
  if (!again.ok() || again.path != p) __builtin_trap();
  for (std::string_view pattern : {"/", "/**", "/v1/*", "/v1/**", "/a/*/b/**"}) {
    (void)policy::http_path_matches(pattern, p);
  }
  (void)policy::http_pattern_error(path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0] % 4;
  const uint8_t split = data[1];
  const std::span<const uint8_t> in(data + 2, size - 2);
  const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
  switch (mode) {
    case 0: {
      const policy::TargetParts t = policy::split_target(text);
      if (t.path.size() + (t.has_query ? t.query.size() + 1 : 0) != text.size()) __builtin_trap();
      check_path(t.path);
      break;
    }
    case 1: {
      const network::HttpHeadParse p = network::parse_http_head(in);
      if (p.status != network::ParseStatus::complete) break;
      const network::RequestTraitsResult t = network::request_traits(p.head);
      if (!t.refusal.empty()) break;
      if (t.traits.body.kind == network::BodyKind::until_close) __builtin_trap();  // never for a request
      if (t.traits.upgrade && p.head.method != "GET") __builtin_trap();
      check_framing(t.traits.body, in.subspan(p.head.head_size), split);
      if (p.head.target_form == network::TargetForm::origin) check_path(policy::split_target(p.head.target).path);
      break;
    }
    case 2: {
      const network::HttpResponseParse p = network::parse_http_response_head(in);
      if (p.status == network::ParseStatus::invalid && p.reason.empty()) __builtin_trap();
      if (p.status != network::ParseStatus::complete) break;
      const network::HttpResponseHead& h = p.head;
      if (h.status < 100 || h.status > 999 || h.head_size > in.size() || h.head_size > network::kHttpMaxHead) {
        __builtin_trap();
      }
      if (h.chunked && h.other_coding) __builtin_trap();
      for (std::string_view method : {"GET", "HEAD"}) {
        const network::BodyFraming f = network::response_body(method, h);
        if (method == "HEAD" && f.kind != network::BodyKind::none) __builtin_trap();
        check_framing(f, in.subspan(h.head_size), split);
      }
      (void)network::response_is_upgrade(h);
      break;
    }
    default: check_framing({network::BodyKind::chunked, 0}, in, split); break;
  }
  return 0;
}
