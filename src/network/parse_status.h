// The outcome of parsing the start of a byte stream that arrives incrementally
// (TLS ClientHello, HTTP request head, DNS over TCP framing).
#pragma once

#include <string_view>

namespace soyaos::network {

enum class ParseStatus {
  complete,   // a whole message was parsed
  need_more,  // every byte so far is valid, but the message is not finished
  invalid,    // the bytes can never become a valid message
};

constexpr std::string_view to_string(ParseStatus s) {
  switch (s) {
    case ParseStatus::complete: return "complete";
    case ParseStatus::need_more: return "need_more";
    case ParseStatus::invalid: return "invalid";
  }
  return "unknown";
}

}  // namespace soyaos::network
