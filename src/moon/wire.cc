#include "moon/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace soyaos::moon::wire {

using json = nlohmann::ordered_json;

Status Conn::write_all(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("moon socket: send");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Status Conn::send(json header, std::string_view attachment) {
  if (!attachment.empty()) header["attachment"] = attachment.size();
  std::string line = header.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  if (line.size() > kMaxHeaderBytes) return make_error("moon socket: message too large (" + std::to_string(line.size()) + " bytes)");
  if (auto s = write_all(line); !s) return s;
  return write_all(attachment);
}

Status Conn::send_file(json header, int file_fd, uint64_t size) {
  if (size > kMaxAttachmentBytes) return make_error("moon socket: attachment too large (" + std::to_string(size) + " bytes)");
  header["attachment"] = size;
  std::string line = header.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  if (auto s = write_all(line); !s) return s;
  // read + send(MSG_NOSIGNAL) rather than sendfile(2): a peer that went away must be an
  // error (EPIPE), never a SIGPIPE that kills the process.
  std::string chunk(size_t{1} << 20, '\0');
  uint64_t left = size;
  while (left > 0) {
    ssize_t n = ::read(file_fd, chunk.data(), static_cast<size_t>(std::min<uint64_t>(left, chunk.size())));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read the attachment");
    }
    if (n == 0) return make_error("moon socket: the file ended early");
    if (auto s = write_all(std::string_view(chunk.data(), static_cast<size_t>(n))); !s) return s;
    left -= static_cast<uint64_t>(n);
  }
  return {};
}

Status Conn::fill() {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  char tmp[65536];
  for (;;) {
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return make_error("moon socket: no answer in time", ETIMEDOUT);
      return errno_error("moon socket: receive");
    }
    if (n == 0) return make_error("eof");
    buf_.append(tmp, static_cast<size_t>(n));
    return {};
  }
}

Result<json> Conn::receive() {
  // How far past pos_ has been searched for the newline. Relative to pos_ because fill()
  // may drop a fully consumed buffer and the erase below moves it: an absolute offset
  // kept across those pointed past the next message (a message read after an attachment
  // that had emptied the buffer was skipped).
  size_t scanned = 0;
  for (;;) {
    size_t nl = buf_.find('\n', pos_ + scanned);
    if (nl != std::string::npos) {
      json j = json::parse(buf_.begin() + static_cast<std::ptrdiff_t>(pos_),
                           buf_.begin() + static_cast<std::ptrdiff_t>(nl), nullptr, false);
      pos_ = nl + 1;
      if (j.is_discarded() || !j.is_object()) return make_error("moon socket: a message is not a JSON object");
      if (pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
      }
      return j;
    }
    scanned = buf_.size() - pos_;
    if (scanned > kMaxHeaderBytes) return make_error("moon socket: message over the size limit");
    if (pos_ > (size_t{1} << 20)) {  // keep the buffer from growing with consumed bytes
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    const bool had_partial = buf_.size() > pos_;
    if (auto s = fill(); !s) {
      if (s.error().message == "eof" && had_partial) return make_error("moon socket: the connection ended mid-message");
      return s.error();
    }
  }
}

Status Conn::read_attachment(uint64_t size, int out_fd) {
  if (size > kMaxAttachmentBytes) return make_error("moon socket: attachment over the size limit");
  uint64_t left = size;
  while (left > 0) {
    if (pos_ == buf_.size()) {
      if (auto s = fill(); !s) {
        if (s.error().message == "eof") return make_error("moon socket: the connection ended mid-attachment");
        return s;
      }
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(left, buf_.size() - pos_));
    const char* p = buf_.data() + pos_;
    size_t done = 0;
    while (done < take) {
      ssize_t n = ::write(out_fd, p + done, take - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error("write the attachment");
      }
      done += static_cast<size_t>(n);
    }
    pos_ += take;
    left -= take;
  }
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return {};
}

Result<std::string> Conn::read_attachment(uint64_t size) {
  if (size > kMaxHeaderBytes) return make_error("moon socket: attachment over the size limit");
  std::string out;
  out.reserve(static_cast<size_t>(size));
  while (out.size() < size) {
    if (pos_ == buf_.size()) {
      if (auto s = fill(); !s) return make_error("moon socket: the connection ended mid-attachment");
    }
    size_t take = std::min<size_t>(static_cast<size_t>(size) - out.size(), buf_.size() - pos_);
    out.append(buf_, pos_, take);
    pos_ += take;
  }
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return out;
}

json error_reply(const Error& e) {
  return {{"ok", false}, {"error", e.describe()}, {"errno", e.err}};
}

Error reply_error(const json& reply) {
  std::string msg = reply.contains("error") && reply["error"].is_string() ? reply["error"].get<std::string>()
                                                                          : "the Moon daemon refused the request";
  int err = reply.contains("errno") && reply["errno"].is_number_integer() ? reply["errno"].get<int>() : 0;
  if (err < 0 || err > 4095) err = 0;  // not an errno value
  // errno is kept: a caller tells a refusal (EPERM, EEXIST: the RunRecorder gives up at
  // once) from a failure worth retrying, as with the embedded Moon. The message already
  // ends with its strerror (error_reply sends describe()): cut there, so that describe()
  // does not say it twice.
  if (err != 0) {
    const std::string suffix = std::string(": ") + std::strerror(err);
    if (msg.size() >= suffix.size() && msg.compare(msg.size() - suffix.size(), suffix.size(), suffix) == 0) {
      msg.resize(msg.size() - suffix.size());
    }
  }
  return make_error(std::move(msg), err);
}

}  // namespace soyaos::moon::wire
