// Collecting /workdir/out: the agent controls every name and object in that tree, so the
// walk uses only fd-relative, no-follow opens and copies nothing but regular files.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/text.h"
#include "supervisor/supervisor.h"
#include "supervisor/violation_log.h"

namespace soyaos::supervisor {
namespace {

constexpr int kMaxDepth = 64;

// The agent chooses every name (any bytes but '/' and NUL) and how many there are: the
// report keeps a bounded, valid-UTF-8 list and counts the rest (issue #15).
void skip(CollectReport& report, const std::string& path, const std::string& why) {
  ++report.skipped_count;
  if (report.skipped.size() >= kMaxSkippedListed) return;
  report.skipped.push_back(truncate_utf8(valid_utf8(path), kMaxResourceBytes) + ": " +
                           truncate_utf8(valid_utf8(why), kMaxResourceBytes));
}

Status copy_file(int src_dir, const char* name, int dst_dir, uint64_t size) {
  // O_NOFOLLOW|O_NONBLOCK: a symlink fails, a FIFO cannot block us; fstat then proves type.
  UniqueFd src(::openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!src) return errno_error(std::string("open ") + name);
  struct stat st {};
  if (::fstat(src.get(), &st) != 0 || !S_ISREG(st.st_mode)) return make_error("not a regular file");
  UniqueFd dst(::openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!dst) return errno_error(std::string("create ") + name);
  uint64_t left = size;
  char buf[65536];
  while (left > 0) {
    ssize_t n = ::read(src.get(), buf, sizeof buf < left ? sizeof buf : left);
    if (n < 0) return errno_error(std::string("read ") + name);
    if (n == 0) break;
    if (::write(dst.get(), buf, static_cast<size_t>(n)) != n) return errno_error(std::string("write ") + name);
    left -= static_cast<uint64_t>(n);
  }
  return {};
}

Status walk(int src_dir, int dst_dir, const std::string& rel, int depth, uint64_t quota,
            CollectReport& report) {
  if (depth > kMaxDepth) {
    skip(report, rel, "nested too deep");
    return {};
  }
  int dup = ::openat(src_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return errno_error("open " + rel);
  DIR* dir = ::fdopendir(dup);
  if (dir == nullptr) {
    ::close(dup);
    return errno_error("read " + rel);
  }
  Status status;
  while (struct dirent* de = ::readdir(dir)) {
    std::string name = de->d_name;
    if (name == "." || name == "..") continue;
    std::string path = rel.empty() ? name : rel + "/" + name;
    struct stat st {};
    if (::fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(src_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) continue;
      if (::mkdirat(dst_dir, name.c_str(), 0755) != 0 && errno != EEXIST) {
        status = errno_error("mkdir " + path);
        break;
      }
      UniqueFd dsub(::openat(dst_dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dsub) {
        status = errno_error("open " + path);
        break;
      }
      status = walk(sub.get(), dsub.get(), path, depth + 1, quota, report);
      if (!status) break;
    } else if (S_ISREG(st.st_mode)) {
      uint64_t size = static_cast<uint64_t>(st.st_size);
      // Apparent size counts: a sparse file cannot turn a small tmpfs into a large copy.
      if (report.bytes + size > quota) {
        skip(report, path, "over the write quota");
        continue;
      }
      if (auto s = copy_file(src_dir, name.c_str(), dst_dir, size); !s) {
        skip(report, path, s.error().describe());
        continue;
      }
      report.bytes += size;
      ++report.files;
    } else {
      skip(report, path, S_ISLNK(st.st_mode) ? "symbolic link not collected" : "not a regular file");
    }
  }
  ::closedir(dir);
  return status;
}

}  // namespace

Result<CollectReport> collect_outputs(const UniqueFd& out_dir, const std::string& host_dir,
                                      uint64_t quota) {
  CollectReport report;
  std::error_code ec;
  std::filesystem::create_directories(host_dir, ec);
  if (ec) return make_error("create output directory " + host_dir, ec.value());
  UniqueFd dst(::open(host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dst) return errno_error("open output directory " + host_dir);
  if (auto s = walk(out_dir.get(), dst.get(), "", 0, quota, report); !s) return s.error();
  return report;
}

}  // namespace soyaos::supervisor
