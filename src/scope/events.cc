#include "scope/events.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

namespace soyaos::scope {

namespace {

void random_bytes(uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(buf + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
}

Status write_all(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("write event");
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

std::string now_rfc3339() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  size_t len = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  (void)std::snprintf(buf + len, sizeof buf - len, ".%06lldZ", static_cast<long long>(us % 1'000'000));
  return buf;
}

std::string new_event_id() {
  std::array<uint8_t, 16> b{};
  random_bytes(b.data(), b.size());
  b[6] = static_cast<uint8_t>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<uint8_t>((b[8] & 0x3f) | 0x80);
  char out[37];
  (void)std::snprintf(out, sizeof out,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

std::string new_run_id() {
  static constexpr char kAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  auto ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  std::array<uint8_t, 10> rnd{};
  random_bytes(rnd.data(), rnd.size());
  std::string id(26, '0');
  for (int i = 9; i >= 0; --i) {  // 48-bit timestamp in 10 characters
    id[static_cast<size_t>(i)] = kAlphabet[ms & 31];
    ms >>= 5;
  }
  // 80 random bits in 16 characters.
  uint64_t hi = 0, lo = 0;
  for (int i = 0; i < 5; ++i) hi = (hi << 8) | rnd[static_cast<size_t>(i)];
  for (int i = 5; i < 10; ++i) lo = (lo << 8) | rnd[static_cast<size_t>(i)];
  for (size_t i = 8; i-- > 0;) {
    id[10 + i] = kAlphabet[hi & 31];
    hi >>= 5;
    id[18 + i] = kAlphabet[lo & 31];
    lo >>= 5;
  }
  return id;
}

nlohmann::ordered_json make_event(const RunContext& ctx, const std::string& type, nlohmann::ordered_json data) {
  // The run's identity first, then the event's own fields.
  nlohmann::ordered_json full = {
      {"run_id", ctx.run_id}, {"pack", ctx.pack}, {"version", ctx.version}, {"digest", ctx.digest}};
  for (auto& [key, value] : data.items()) full[key] = std::move(value);
  nlohmann::ordered_json e;
  e["specversion"] = "1.0";
  e["id"] = new_event_id();
  e["source"] = "soyaos://" + ctx.host + "/comet/" + ctx.run_id;
  e["type"] = type;
  e["time"] = now_rfc3339();
  e["subject"] = ctx.pack + "@" + ctx.version;
  e["datacontenttype"] = "application/json";
  e["data"] = std::move(full);
  return e;
}

Status EventSink::add_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("open events file " + path);
  files_.emplace_back(fd);
  return {};
}

void EventSink::add_stdout() { to_stdout_ = true; }

Status EventSink::emit(const nlohmann::ordered_json& event) {
  std::string line = event.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  for (const auto& f : files_) {
    if (auto s = write_all(f.get(), line); !s) return s;
  }
  if (to_stdout_) {
    if (auto s = write_all(STDOUT_FILENO, line); !s) {
      // The reader of stdout went away (`soyaos run --events - | head`): that stream ends,
      // the run and its record do not (files and the Moon still get every event).
      if (s.error().err != EPIPE) return s;
      to_stdout_ = false;
      stdout_closed_ = true;
    }
  }
  return {};
}

Status EventSink::flush() {
  for (const auto& f : files_) {
    if (::fsync(f.get()) != 0 && errno != EINVAL) return errno_error("fsync events file");
  }
  return {};
}

}  // namespace soyaos::scope
