// The response side of C11 (docs/secrets.md): no byte sequence equal to a secret's value is
// delivered to the agent on a connection the gateway reads. The gateway puts a bound secret's
// value into the request line and headers; a server may reflect those (a 404 quoting the path,
// a CORS `Origin` echo, `X-Request-Id`), so every response's head and body data pass through
// this matcher before the agent gets a byte of them.
//
// A streaming multi-pattern matcher (one KMP state per value) over the *data* bytes of what
// the upstream sends (chunked framing is skipped, so a value split across two chunks is still
// found). It masks a complete value's data bytes in place with '*': same length, so
// Content-Length and chunk sizes stay valid and the connection stays framed. Only whole values
// are masked, and what is held back does not depend on the bytes: each feed's last
// (longest value - 1) data bytes wait for the next feed, the end of the message or the
// caller's short deadline (kHoldMs), whether or not they begin a value. A hold or a mask that
// followed a partial match would be an oracle: an agent whose bytes a host echoes (a websocket
// echo, a realtime API quoting its input) could learn the value a byte at a time (review R2 G1).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "network/http_message.h"

namespace soyaos::supervisor {

class SecretEchoGuard {
 public:
  struct Secret {
    std::string_view name;
    std::string_view value;  // a SecretBytes view that outlives the guard; never copied here
  };
  static constexpr char kMask = '*';
  // How long the caller lets held bytes wait for the next feed before release(): long enough
  // for the rest of a response written at once, short for an event stream's latency.
  static constexpr int kHoldMs = 50;

  SecretEchoGuard() = default;
  explicit SecretEchoGuard(const std::vector<Secret>& secrets);  // empty values are skipped

  // Takes the next `raw` bytes from the upstream, of which `data` (ascending offsets within
  // `raw`) are message data, the only bytes matched. Appends to `out` what may go to the agent
  // now, with every complete value masked; keeps the last (longest value - 1) data bytes (and
  // what follows them) until the next feed or release(). Returns the name of the first secret masked by this call, or "" when none was.
  std::string_view feed(std::string_view raw, std::span<const network::DataSpan> data, std::string& out);
  // All of `raw` is data (a response head, a relayed websocket stream).
  std::string_view feed_data(std::string_view raw, std::string& out);

  // The end of a message (or of the stream, or the hold's deadline): appends what is held to
  // `out`. A partial match goes out as it is (the agent is owed the whole message); the
  // matching state carries on, so a value completed by later bytes still has its not-yet-sent
  // part masked.
  void release(std::string& out);

  [[nodiscard]] size_t held() const { return held_.size(); }
  [[nodiscard]] bool active() const { return !patterns_.empty(); }

 private:
  struct Pattern {
    std::string_view name, value;
    std::vector<size_t> fail;  // KMP: fail[i] = longest proper prefix of value[0..i] that is also its suffix
    size_t matched = 0;        // bytes of value matched by the data seen last
  };
  void mask_last(size_t n);

  std::vector<Pattern> patterns_;
  size_t longest_ = 0;
  std::array<bool, 256> starts_{};  // bytes that begin some value
  bool idle_ = true;               // no pattern has a partial match
  std::string held_;               // raw bytes not yet released
  std::vector<size_t> data_pos_;   // offsets in held_ of its most recent data bytes, ascending
};

}  // namespace soyaos::supervisor
