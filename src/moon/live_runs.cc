#include "moon/live_runs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "moon/store.h"

namespace soyaos::moon {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kSuffix = ".live";
constexpr size_t kMaxLiveFileBytes = size_t{64} * 1024;

std::string boot_id() {
  UniqueFd fd(::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  char buf[64] = {};
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Status write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_error("write");
    }
    off += static_cast<size_t>(w);
  }
  return {};
}

std::string read_small(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxLiveFileBytes) break;
  }
  return out;
}

std::string jstr(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

fs::path live_dir(const fs::path& home) { return home / "runs"; }

bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

Result<LiveRun> LiveRun::create(const fs::path& home, const scope::RunContext& ctx, const std::string& holder) {
  if (!valid_run_id(ctx.run_id)) return make_error("run id '" + ctx.run_id + "' is not a valid run id");
  const fs::path dir = live_dir(home);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return errno_error("create " + dir.string());
  // Written and locked under a temporary name, then renamed: a reaper never sees a .live
  // file that is not yet locked by its holder.
  const fs::path tmp = dir / ("." + ctx.run_id + ".tmp-" + std::to_string(::getpid()));
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return errno_error("create " + tmp.string());
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    Error e = errno_error("lock " + tmp.string());
    (void)::unlink(tmp.c_str());
    return e;
  }
  json info = {{"run_id", ctx.run_id}, {"host", ctx.host},          {"pack", ctx.pack},
               {"version", ctx.version}, {"digest", ctx.digest},    {"holder", holder},
               {"pid", ::getpid()},      {"boot_id", boot_id()},    {"started_at", scope::now_rfc3339()}};
  if (auto s = write_all(fd.get(), info.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"); !s) {
    (void)::unlink(tmp.c_str());
    return make_error("write " + tmp.string() + ": " + s.error().describe(), s.error().err);
  }
  const fs::path path = dir / (ctx.run_id + kSuffix);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Error e = errno_error("rename " + tmp.string() + " to " + path.string());
    (void)::unlink(tmp.c_str());
    return e;
  }
  LiveRun run;
  run.fd_ = std::move(fd);
  run.path_ = path;
  return run;
}

void LiveRun::end() {
  if (!fd_) return;
  // Unlinked while still locked: a reaper that opened the file meanwhile finds it unlinked.
  (void)::unlink(path_.c_str());
  fd_.reset();
}

Result<bool> mark_incomplete(Store& store, const scope::RunContext& ctx, const std::string& reason,
                             const json& data_extra) {
  for (const char* type : {"run_finished", "run_incomplete"}) {
    EventQuery q;
    q.run_id = ctx.run_id;
    q.type = type;
    q.limit = 1;
    auto found = store.query_events(q);
    if (!found) return found.error();
    if (!found->empty()) return false;
  }
  EventQuery last;
  last.run_id = ctx.run_id;
  last.limit = 1;
  auto tail = store.query_events(last);
  if (!tail) return tail.error();
  json data = {{"reason", reason}};
  if (tail->empty()) {
    data["last_event_time"] = nullptr;
    data["last_event_type"] = nullptr;
  } else {
    data["last_event_time"] = tail->front().time;
    data["last_event_type"] = tail->front().type;
  }
  for (const auto& [k, v] : data_extra.items()) data[k] = v;
  json event = scope::make_event(ctx, "run_incomplete", std::move(data));
  event["source"] = "soyaos://" + ctx.host + "/moon";
  if (auto s = store.append_events(std::span<const json>(&event, 1)); !s) return s.error();
  return true;
}

Result<int> reap_dead_runs(const fs::path& home, Store& store) {
  const fs::path dir = live_dir(home);
  std::vector<std::string> names;
  {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) return 0;
      return errno_error("open " + dir.string());
    }
    while (const dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > std::char_traits<char>::length(kSuffix) && n.ends_with(kSuffix)) names.push_back(std::move(n));
    }
    (void)::closedir(d);
  }
  int marked = 0;
  const std::string this_boot = boot_id();
  for (const auto& name : names) {
    const fs::path path = dir / name;
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;  // gone meanwhile, or not ours to handle
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its holder is alive
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || st.st_nlink == 0) continue;  // ended or reaped meanwhile
    json info = json::parse(read_small(fd.get()), nullptr, false);
    if (!info.is_object()) info = json::object();
    scope::RunContext ctx{jstr(info, "host"), name.substr(0, name.size() - std::char_traits<char>::length(kSuffix)),
                          jstr(info, "pack"), jstr(info, "version"), jstr(info, "digest")};
    if (ctx.host.empty()) ctx.host = "localhost";
    const std::string holder = jstr(info, "holder");
    const std::string boot = jstr(info, "boot_id");
    std::string reason = holder == "daemon" ? kIncompleteDaemonStopped : kIncompleteKilled;
    if (!boot.empty() && !this_boot.empty() && boot != this_boot) reason = kIncompleteRestarted;
    json extra = {{"holder", holder.empty() ? json(nullptr) : json(holder)},
                  {"holder_pid", info.contains("pid") ? info["pid"] : json(nullptr)},
                  {"started_at", info.contains("started_at") ? info["started_at"] : json(nullptr)}};
    auto m = mark_incomplete(store, ctx, reason, extra);
    if (!m) return m.error();  // the file stays: the next reaper tries again
    if (*m) ++marked;
    (void)::unlink(path.c_str());
  }
  return marked;
}

}  // namespace soyaos::moon
