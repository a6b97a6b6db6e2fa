// HTTP/1.1 messages after the request head (RFC 9112): the response head, body framing
// (Content-Length, chunked with trailers, until close, none) and what a request asks of the
// connection (Expect: 100-continue, Upgrade). The request head itself is parse_http_head
// (http_head.h), shared with the gateway's first-request check. Used by the HTTP exchange
// (supervisor/http_exchange.h), which forwards bytes unchanged as they arrive: the framers
// here only say where a message ends, they never buffer a body. Strict wherever a lenient
// peer could read the same bytes as another message (request smuggling); pure functions and
// small state machines, no I/O, never crash. docs/network-parsers.md explains the choices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "network/http_head.h"
#include "network/parse_status.h"

namespace soyaos::network {

enum class BodyKind {
  none,         // no body (a request without Content-Length/Transfer-Encoding, HEAD, 1xx, 204, 304)
  length,       // Content-Length bytes
  chunked,      // chunked coding up to the last chunk and its trailer section
  until_close,  // a response without a length: the body ends when the server closes
};
std::string_view to_string(BodyKind k);

struct BodyFraming {
  BodyKind kind = BodyKind::none;
  uint64_t length = 0;  // BodyKind::length
};

// What a request head asks of the connection.
struct RequestTraits {
  BodyFraming body;
  bool expect_continue = false;   // Expect: 100-continue
  bool upgrade = false;           // Upgrade: websocket (with Connection: upgrade), on a GET
  bool close = false;             // Connection: close, or HTTP/1.0 without keep-alive
};

// Whether a method's semantics define no request body (RFC 9110 9.3): GET, HEAD, DELETE,
// OPTIONS, TRACE, CONNECT. Compared case-insensitively: a server that folds `get` into GET
// ignores its body just the same.
bool method_defines_no_body(std::string_view method);

// The body framing and connection traits of a parsed request head, or why the exchange refuses
// it on top of parse_http_head's own checks: a body (Content-Length > 0, or any
// Transfer-Encoding) on a method that defines none (an upstream that never reads a GET's body
// parses it as the next request, one the exchange never checked: request smuggling;
// `Content-Length: 0` is no body), a Transfer-Encoding other than exactly `chunked`
// (a coding list can be read differently by the upstream), an Upgrade to anything but
// websocket (after a 101 the exchange only relays bytes, so only a protocol whose opening
// request it checked may follow), a websocket upgrade that is not a GET.
struct RequestTraitsResult {
  RequestTraits traits;
  std::string refusal;  // empty when the request may go on
};
RequestTraitsResult request_traits(const HttpHead& head);

struct HttpResponseHead {
  int minor_version = 1;
  int status = 0;  // 100..999
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;  // OWS trimmed
  std::optional<uint64_t> content_length;
  bool chunked = false;           // Transfer-Encoding whose last coding is chunked
  bool other_coding = false;      // Transfer-Encoding whose last coding is not chunked: until close
  size_t head_size = 0;
};

struct HttpResponseParse {
  ParseStatus status = ParseStatus::need_more;
  HttpResponseHead head;
  std::string reason;  // invalid: why
};

// `HTTP/1.0|HTTP/1.1 SP 3DIGIT [SP reason] CRLF`, then at most 100 fields, then CRLF; at most
// 16 KiB. Lines end with CRLF only; no obs-fold; field names are tokens; Content-Length
// repeated with different values, or alongside Transfer-Encoding, is invalid (the exchange
// cannot know where the body ends).
HttpResponseParse parse_http_response_head(std::span<const uint8_t> bytes);

// RFC 9112 6.3: the response body's framing, given the request's method.
BodyFraming response_body(std::string_view request_method, const HttpResponseHead& head);

// True for `Connection: upgrade` + `Upgrade: websocket` and a 101 status.
bool response_is_upgrade(const HttpResponseHead& head);

// A run of bytes of a fed buffer that are the message's data (not chunked framing).
struct DataSpan {
  size_t offset = 0;
  size_t size = 0;
};

// Follows one body as its bytes arrive and says where it ends. The bytes are not changed.
class BodyFramer {
 public:
  static constexpr size_t kMaxChunkLine = 4096;     // chunk-size + extensions + CRLF
  static constexpr size_t kMaxTrailers = kHttpMaxHead;

  BodyFramer() = default;
  explicit BodyFramer(BodyFraming framing);

  struct Step {
    size_t consumed = 0;  // bytes of `in` that belong to this body (forward them)
    bool done = false;    // the body ended after `consumed` bytes
    std::string error;    // non-empty: invalid framing (forward nothing more)
    // Which of the consumed bytes are data, in order: the body of a Content-Length or
    // until-close message, chunk data and trailer field lines; not chunk-size lines, the
    // CRLFs around them or the CRLF ending a trailer line. A scanner of the content (the
    // secret echo guard) reads these, so a value split across two chunks is still contiguous.
    std::vector<DataSpan> data;
  };
  // Takes as much of `in` as belongs to the body. until_close never finishes here: the
  // caller ends it at EOF (eof_ok() says whether an EOF now is a clean end).
  Step feed(std::span<const uint8_t> in);
  [[nodiscard]] bool done() const { return state_ == State::done; }
  [[nodiscard]] bool eof_ok() const { return state_ == State::done || kind_ == BodyKind::until_close; }

 private:
  enum class State { size_line, data, data_cr, data_lf, trailer_line, length, until_close, done };
  BodyKind kind_ = BodyKind::none;
  State state_ = State::done;
  uint64_t remaining_ = 0;
  std::string line_;       // the current chunk-size or trailer line, without its CRLF
  size_t trailer_bytes_ = 0;
  size_t trailer_fields_ = 0;
  bool line_cr_ = false;   // the CR of the current line was seen
  std::string end_line(bool* last_chunk);
  std::string end_trailer_line(bool* end);
};

}  // namespace soyaos::network
