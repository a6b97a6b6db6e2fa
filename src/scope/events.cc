#include "scope/events.h"
#include "scope/rfc3339.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
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

// The random bytes of event ids, taken from a per-thread pool that one getrandom() fills
// with 4 KiB (256 ids) instead of one system call per event (issue #16: the gateway
// emits an event per connection and more). The ids stay as random as before: every byte
// comes from the kernel's CSPRNG, used once, and wiped from the pool when taken. The pool
// is a page of its own marked MADV_WIPEONFORK, so a process forked or cloned from this one
// (clone3 runs no atfork handlers) finds it zeroed, reads "empty" and refills it: a child
// never repeats its parent's ids. Where the page cannot be had, each id calls getrandom.
class IdPool {
 public:
  IdPool() {
    void* p = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    if (::madvise(p, sizeof(Page), MADV_WIPEONFORK) != 0) {
      ::munmap(p, sizeof(Page));
      return;
    }
    page_ = static_cast<Page*>(p);
  }
  ~IdPool() {
    // Reset, so that an id asked for after this thread's thread_locals are destroyed (e.g.
    // from a static destructor) falls back to getrandom instead of writing to an unmapped page.
    if (page_ != nullptr) ::munmap(page_, sizeof(Page));
    page_ = nullptr;
  }
  IdPool(const IdPool&) = delete;
  IdPool& operator=(const IdPool&) = delete;

  void take(uint8_t* out, size_t n) {
    if (page_ == nullptr || n > sizeof(page_->bytes)) {
      random_bytes(out, n);
      return;
    }
    // `left` is 0 in a new page and in a forked child's (wiped): refill. The first fill is
    // small (a process that makes one or two ids, a cache hit, does not pay for 4 KiB of
    // CSPRNG output), each later one four times larger, up to the page.
    if (page_->left < n) {
      fill_ = std::min(sizeof(page_->bytes), std::max(fill_ * 4, kFirstFill));
      random_bytes(page_->bytes, fill_);
      page_->filled = fill_;
      page_->left = fill_;
    }
    uint8_t* from = page_->bytes + (page_->filled - page_->left);
    std::memcpy(out, from, n);
    std::memset(from, 0, n);
    page_->left -= n;
  }

 private:
  static constexpr size_t kFirstFill = 64;
  struct Page {
    size_t filled;  // bytes of `bytes` the last refill wrote
    size_t left;    // of them, not yet taken (at the end)
    uint8_t bytes[4096 - 2 * sizeof(size_t)];
  };
  static_assert(sizeof(Page) == 4096);
  Page* page_ = nullptr;
  size_t fill_ = 0;
};

void random_id_bytes(uint8_t* out, size_t n) {
  thread_local IdPool pool;
  pool.take(out, n);
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

std::string format_rfc3339(int64_t unix_us) {
  // Floor division: an instant before 1970 still has microseconds in [0, 1e6).
  int64_t secs = unix_us / 1'000'000;
  int64_t micros = unix_us % 1'000'000;
  if (micros < 0) {
    micros += 1'000'000;
    secs -= 1;
  }
  int64_t days = secs / 86'400;
  int64_t sod = secs % 86'400;
  if (sod < 0) {
    sod += 86'400;
    days -= 1;
  }
  // Howard Hinnant's civil_from_days: the proleptic Gregorian date of a day count.
  const int64_t z = days + 719'468;
  const int64_t era = (z >= 0 ? z : z - 146'096) / 146'097;
  const int64_t doe = z - era * 146'097;                                     // [0, 146096]
  const int64_t yoe = (doe - doe / 1'460 + doe / 36'524 - doe / 146'096) / 365;  // [0, 399]
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               // [0, 365]
  const int64_t mp = (5 * doy + 2) / 153;                                    // [0, 11]
  const int64_t day = doy - (153 * mp + 2) / 5 + 1;                          // [1, 31]
  const int64_t month = mp < 10 ? mp + 3 : mp - 9;                           // [1, 12]
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  if (year < 1000 || year > 9999) {  // strftime's %Y, as before: not padded below 1000
    const auto t = static_cast<std::time_t>(secs);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[64];
    const size_t len = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    (void)std::snprintf(buf + len, sizeof buf - len, ".%06lldZ", static_cast<long long>(micros));
    return buf;
  }
  std::string out(27, '\0');
  auto put = [&out](size_t at, int64_t v, int width) {
    for (int i = width - 1; i >= 0; --i) {
      out[at + static_cast<size_t>(i)] = static_cast<char>('0' + v % 10);
      v /= 10;
    }
  };
  put(0, year, 4);
  out[4] = '-';
  put(5, month, 2);
  out[7] = '-';
  put(8, day, 2);
  out[10] = 'T';
  put(11, sod / 3'600, 2);
  out[13] = ':';
  put(14, sod / 60 % 60, 2);
  out[16] = ':';
  put(17, sod % 60, 2);
  out[19] = '.';
  put(20, micros, 6);
  out[26] = 'Z';
  return out;
}

std::string now_rfc3339() {
  struct timespec ts{};
  (void)::clock_gettime(CLOCK_REALTIME, &ts);  // vDSO: no system call
  return format_rfc3339(static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1'000);
}

std::string new_event_id() {
  std::array<uint8_t, 16> b{};
  random_id_bytes(b.data(), b.size());
  b[6] = static_cast<uint8_t>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<uint8_t>((b[8] & 0x3f) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(36, '-');
  size_t at = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) ++at;  // the dashes of 8-4-4-4-12
    out[at++] = kHex[b[i] >> 4];
    out[at++] = kHex[b[i] & 0x0f];
  }
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
