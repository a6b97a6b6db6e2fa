// The byte stream the HTTP exchange (http_exchange.h) runs on: one side of a connection the
// gateway reads, plain TCP (FdStream, here) or TLS (TlsStream, tls_stream.h). Non-blocking:
// a call that cannot progress returns would_block, and wanted_events() says what poll(2)
// must report before the call is retried (TLS can need POLLOUT to read and POLLIN to write).
// One thread uses one stream. Interface shared by issue #12's helpers
// (coord: secrets-interface.md, section 3).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "common/unique_fd.h"

namespace soyaos::supervisor {

enum class IoStatus { ok, would_block, eof, error };

constexpr std::string_view to_string(IoStatus s) {
  switch (s) {
    case IoStatus::ok: return "ok";
    case IoStatus::would_block: return "would_block";
    case IoStatus::eof: return "eof";
    case IoStatus::error: return "error";
  }
  return "unknown";
}

struct IoResult {
  IoStatus status = IoStatus::ok;
  size_t n = 0;   // ok: bytes read (> 0) or written (> 0)
  int error = 0;  // error: errno (or the TLS layer's nearest equivalent)
};

class ByteStream {
 public:
  ByteStream() = default;
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;
  ByteStream(ByteStream&&) = delete;
  ByteStream& operator=(ByteStream&&) = delete;
  virtual ~ByteStream() = default;

  // n > 0 bytes, or would_block / eof / error. An empty buffer is a caller bug: error EINVAL.
  virtual IoResult read(std::span<uint8_t> buf) = 0;
  // Partial writes allowed (n < buf.size()).
  virtual IoResult write(std::span<const uint8_t> buf) = 0;
  // No more bytes from us: TCP FIN, or TLS close_notify (then FIN). The read side stays open.
  virtual IoResult shutdown_write() = 0;
  virtual int fd() const = 0;
  // poll(2) events needed before retrying the last call that returned would_block.
  virtual short wanted_events() const = 0;
  // Bytes already decoded and waiting (SSL_pending() > 0): read() without polling first.
  virtual bool has_buffered_input() const = 0;
};

// Plain TCP (or any stream socket): owns its fd, which must be non-blocking.
class FdStream final : public ByteStream {
 public:
  explicit FdStream(UniqueFd fd) : fd_(std::move(fd)) {}

  IoResult read(std::span<uint8_t> buf) override {
    if (buf.empty()) return {IoStatus::error, 0, EINVAL};
    for (;;) {
      const ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n > 0) return {IoStatus::ok, static_cast<size_t>(n), 0};
      if (n == 0) return {IoStatus::eof, 0, 0};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wanted_ = POLLIN;
        return {IoStatus::would_block, 0, 0};
      }
      return {IoStatus::error, 0, errno};
    }
  }

  IoResult write(std::span<const uint8_t> buf) override {
    if (buf.empty()) return {IoStatus::ok, 0, 0};
    for (;;) {
      // MSG_NOSIGNAL: a peer that went away is an EPIPE here, never a SIGPIPE to the supervisor.
      const ssize_t n = ::send(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) return {IoStatus::ok, static_cast<size_t>(n), 0};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wanted_ = POLLOUT;
        return {IoStatus::would_block, 0, 0};
      }
      return {IoStatus::error, 0, errno};
    }
  }

  IoResult shutdown_write() override {
    if (::shutdown(fd_.get(), SHUT_WR) == 0 || errno == ENOTCONN) return {IoStatus::ok, 0, 0};
    return {IoStatus::error, 0, errno};
  }

  int fd() const override { return fd_.get(); }
  short wanted_events() const override { return wanted_; }
  bool has_buffered_input() const override { return false; }

 private:
  UniqueFd fd_;
  short wanted_ = POLLIN;
};

}  // namespace soyaos::supervisor
