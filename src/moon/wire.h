// The Moon daemon's wire format (docs/moon.md "Daemon mode"), over a unix stream socket.
//
// A message is one JSON object on one line (UTF-8, ending in '\n', at most
// kMaxHeaderBytes), optionally followed by a binary attachment: when the object has
// "attachment": N, exactly N raw bytes (at most kMaxAttachmentBytes) follow the newline.
// Pack archives travel as attachments (no base64); everything else is in the JSON.
//
// Requests: {"op": "...", ...}; the first request of a connection may be anything, and a
// connection may carry several requests in turn. Responses: {"ok": true, ...} or
// {"ok": false, "error": "message", "errno": N}. A response with "more": true is followed
// by further responses to the same request (long query results are sent in chunks).
// A message over a limit, or a line that is not a JSON object, ends the connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace soyaos::moon::wire {

// 2: runs are streamed on a connection of their own (run_begin … run_end, moon/server_runs.h);
// append_events and flag only for a run started on the same connection.
inline constexpr int kProtocolVersion = 2;
inline constexpr size_t kMaxHeaderBytes = size_t{256} << 20;        // 256 MiB
inline constexpr uint64_t kMaxAttachmentBytes = uint64_t{4} << 30;  // 4 GiB (a pack archive)

// A buffered connection. Not thread-safe; one per thread.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  [[nodiscard]] int fd() const { return fd_; }

  // Sends `header` (its "attachment" field is set from the attachment's size when there
  // is one) and then the attachment: bytes in memory, or `size` bytes read from `file_fd`.
  Status send(nlohmann::ordered_json header, std::string_view attachment = {});
  Status send_file(nlohmann::ordered_json header, int file_fd, uint64_t size);

  // Reads the next message's JSON. An orderly end of the stream before any byte of it is
  // an error with err == 0 and message "eof". When the header announces an attachment the
  // caller must consume it with read_attachment() before the next receive().
  Result<nlohmann::ordered_json> receive();
  // The attachment announced by the last header, into `out_fd` (written whole).
  Status read_attachment(uint64_t size, int out_fd);
  Result<std::string> read_attachment(uint64_t size);

 private:
  Status write_all(std::string_view data);
  Status fill();  // reads more into buf_
  int fd_;
  std::string buf_;
  size_t pos_ = 0;
};

// {"ok": false, "error": ..., "errno": ...}
nlohmann::ordered_json error_reply(const Error& e);
// The Error a non-ok reply carries (message as sent, errno kept).
Error reply_error(const nlohmann::ordered_json& reply);

}  // namespace soyaos::moon::wire
