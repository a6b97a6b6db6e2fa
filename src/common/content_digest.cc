#include "common/content_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "common/digest.h"
#include "common/unique_fd.h"

namespace soyaos {
namespace fs = std::filesystem;

namespace {

// sha256 of a regular file's bytes, read through `fd`.
Result<std::string> digest_fd(int fd, const std::string& what) {
  Sha256 h;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("read " + what);
    if (n == 0) break;
    h.update(buf, static_cast<size_t>(n));
  }
  return h.digest();
}

}  // namespace

Result<std::string> input_digest(const fs::path& input) {
  struct stat st {};
  if (::stat(input.c_str(), &st) != 0) return errno_error("--input " + input.string());
  if (S_ISDIR(st.st_mode)) return tree_digest(input);
  if (!S_ISREG(st.st_mode)) return make_error("--input " + input.string() + ": not a file or directory");
  UniqueFd fd(::open(input.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno_error("open " + input.string());
  auto d = digest_fd(fd.get(), input.string());
  if (!d) return d.error();
  // Tagged: a directory's tree digest never equals a file's.
  return "file:" + *d;
}

std::string out_tree_digest(std::span<const OutTreeEntry> entries) {
  std::vector<const OutTreeEntry*> sorted;
  sorted.reserve(entries.size());
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const OutTreeEntry* a, const OutTreeEntry* b) { return a->path < b->path; });
  Sha256 h;
  for (const auto* e : sorted) {
    char mode[8];
    (void)std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(e->mode & 07777));
    std::string line = e->path + '\0' + (e->dir ? "dir" : "file") + '\0' + mode;
    if (!e->dir) line += '\0' + e->digest;
    line += '\n';
    h.update(line);
  }
  return h.digest();
}

Result<std::string> out_tree_digest(const fs::path& root) {
  std::vector<OutTreeEntry> entries;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end; it != end; it.increment(ec)) {
    if (ec) break;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) return errno_error("stat " + it->path().string());
    OutTreeEntry e;
    e.path = it->path().lexically_relative(root).generic_string();
    e.mode = st.st_mode & 07777;
    if (S_ISDIR(st.st_mode)) {
      e.dir = true;
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd fd(::open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd) return errno_error("open " + it->path().string());
      auto d = digest_fd(fd.get(), it->path().string());
      if (!d) return d.error();
      e.digest = std::move(d.value());
    } else {
      return make_error(it->path().string() + ": not a file or directory");
    }
    entries.push_back(std::move(e));
  }
  if (ec) return make_error("walk " + root.string(), ec.value());
  return out_tree_digest(entries);
}

}  // namespace soyaos
