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

namespace {

using Json = nlohmann::ordered_json;

Json make_event_as(const RunContext& ctx, const std::string& type, Json data, const std::string& id,
                   const std::string& time) {
  // The run's identity first, then the event's own fields.
  Json full = {{"run_id", ctx.run_id}, {"pack", ctx.pack}, {"version", ctx.version}, {"digest", ctx.digest}};
  for (auto& [key, value] : data.items()) full[key] = std::move(value);
  Json e;
  e["specversion"] = "1.0";
  e["id"] = id;
  e["source"] = "soyaos://" + ctx.host + "/comet/" + ctx.run_id;
  e["type"] = type;
  e["time"] = time;
  e["subject"] = ctx.pack + "@" + ctx.version;
  e["datacontenttype"] = "application/json";
  e["data"] = std::move(full);
  return e;
}

std::string dump_string(const std::string& s) { return dump_event(Json(s)); }

// Appends `s` as a JSON string. The event's type, id and time are plain ASCII (nothing to
// escape), written as they are; anything else goes through the JSON library's escaping.
void append_string(std::string& out, const std::string& s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') {
      out += dump_string(s);
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

std::string string_field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string dump_event(const nlohmann::ordered_json& event) {
  return event.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

nlohmann::ordered_json make_event(const RunContext& ctx, const std::string& type, nlohmann::ordered_json data) {
  return make_event_as(ctx, type, std::move(data), new_event_id(), now_rfc3339());
}

EventFormat::EventFormat(RunContext ctx)
    : ctx_(std::move(ctx)),
      source_(dump_string("soyaos://" + ctx_.host + "/comet/" + ctx_.run_id)),
      subject_(dump_string(ctx_.pack + "@" + ctx_.version)),
      identity_("{\"run_id\":" + dump_string(ctx_.run_id) + ",\"pack\":" + dump_string(ctx_.pack) +
                ",\"version\":" + dump_string(ctx_.version) + ",\"digest\":" + dump_string(ctx_.digest)) {}

Event EventFormat::make(const std::string& type, const nlohmann::ordered_json& data) const {
  return make(type, data, new_event_id(), now_rfc3339());
}

Event EventFormat::make(const std::string& type, const nlohmann::ordered_json& data, const std::string& id,
                        const std::string& time) const {
  Event ev;
  ev.type = type;
  ev.time = time;
  bool fast = data.is_object() || data.is_null();
  for (const char* key : {"run_id", "pack", "version", "digest"}) {
    if (fast && data.is_object() && data.contains(key)) fast = false;
  }
  if (!fast) {
    // make_event's own merge (a field of the run's identity replaced in place, an array's
    // items keyed by index): rare enough to pay for the JSON object.
    const Json e = make_event_as(ctx_, type, data, id, time);
    ev.line = dump_event(e);
    ev.line += '\n';
    const Json& d = e["data"];
    ev.run_id = string_field(d, "run_id");
    ev.pack = string_field(d, "pack");
    ev.version = string_field(d, "version");
    return ev;
  }
  // make_event's key order: specversion, id, source, type, time, subject, datacontenttype,
  // data (the run's identity, then the emitter's fields in their order).
  const std::string body = data.is_object() && !data.empty() ? dump_event(data) : std::string();
  std::string& line = ev.line;
  line.reserve(160 + source_.size() + subject_.size() + identity_.size() + type.size() + body.size());
  line += "{\"specversion\":\"1.0\",\"id\":";
  append_string(line, id);
  line += ",\"source\":";
  line += source_;
  line += ",\"type\":";
  append_string(line, type);
  line += ",\"time\":";
  append_string(line, time);
  line += ",\"subject\":";
  line += subject_;
  line += ",\"datacontenttype\":\"application/json\",\"data\":";
  line += identity_;
  if (body.empty()) {
    line += '}';
  } else {
    line += ',';
    line.append(body, 1);  // the object's members and its closing brace
  }
  line += "}\n";
  ev.run_id = ctx_.run_id;
  ev.pack = ctx_.pack;
  ev.version = ctx_.version;
  return ev;
}

Status EventSink::add_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("open events file " + path);
  files_.emplace_back(fd);
  return {};
}

void EventSink::add_stdout() { to_stdout_ = true; }

Status EventSink::emit(const nlohmann::ordered_json& event) { return write_line(dump_event(event) + "\n"); }

Status EventSink::emit(const Event& event) { return write_line(event.line); }

Status EventSink::write_line(const std::string& line) {
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
