#include "moon/secret_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/unique_fd.h"

namespace soyaos::moon {
namespace fs = std::filesystem;

namespace {

std::string mode_text(mode_t m) {
  char buf[8];
  (void)std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// Why a secret file or the store directory is not safe to use, or empty.
std::string unsafe_reason(const struct stat& st, const std::string& what) {
  if (st.st_uid != ::geteuid()) {
    return what + " is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " +
           std::to_string(::geteuid()) + "): refusing to use it";
  }
  if ((st.st_mode & 077) != 0) {
    return what + " has mode " + mode_text(st.st_mode) + ": others can read or change it; refusing to use it (chmod " +
           (S_ISDIR(st.st_mode) ? "700" : "600") + " it, and rotate the value if others could have read it)";
  }
  return {};
}

Status write_all(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("write " + what);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

SecretStore::SecretStore(fs::path home) : dir_(std::move(home) / "secrets") {}

bool SecretStore::valid_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  if (!((name[0] >= 'A' && name[0] <= 'Z') || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; });
}

Result<bool> SecretStore::check_dir(bool create) const {
  struct stat st {};
  if (::lstat(dir_.c_str(), &st) != 0) {
    if (errno != ENOENT) return errno_error("stat " + dir_.string());
    if (!create) return false;
    std::error_code ec;
    fs::create_directories(dir_.parent_path(), ec);
    if (ec) return make_error("create " + dir_.parent_path().string() + ": " + ec.message(), ec.value());
    if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return errno_error("mkdir " + dir_.string());
    if (::lstat(dir_.c_str(), &st) != 0) return errno_error("stat " + dir_.string());
  }
  if (!S_ISDIR(st.st_mode)) return make_error(dir_.string() + ": not a directory (a symbolic link is not accepted)");
  if (auto why = unsafe_reason(st, "the secret store " + dir_.string()); !why.empty()) return make_error(why, EPERM);
  return true;
}

Status SecretStore::set(const std::string& name, const SecretBytes& value) const {
  if (!valid_name(name)) return make_error("secret name \"" + name.substr(0, 64) + "\" must match ^[A-Z_][A-Z0-9_]*$", EINVAL);
  if (value.empty()) return make_error("secret " + name + ": the value is empty", EINVAL);
  auto ok = check_dir(/*create=*/true);
  if (!ok) return ok.error();
  // A unique temporary name in the same directory, then rename(2): a reader sees the old
  // value or the new one, never a partial file.
  uint64_t rnd = 0;
  if (::getrandom(&rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) return errno_error("getrandom");
  const fs::path tmp = dir_ / ("." + name + ".tmp." + std::to_string(rnd));
  const fs::path target = dir_ / name;
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return errno_error("create " + tmp.string());
  auto fail = [&](Error e) {
    (void)::unlink(tmp.c_str());
    return e;
  };
  // The umask could only have narrowed 0600; make it exact.
  if (::fchmod(fd.get(), 0600) != 0) return fail(errno_error("chmod " + tmp.string()));
  if (auto s = write_all(fd.get(), value.view(), tmp.string()); !s) return fail(s.error());
  if (::fsync(fd.get()) != 0) return fail(errno_error("fsync " + tmp.string()));
  fd.reset();
  if (::rename(tmp.c_str(), target.c_str()) != 0) return fail(errno_error("rename to " + target.string()));
  UniqueFd dfd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) (void)::fsync(dfd.get());  // the rename durable too (best effort: data is already synced)
  return {};
}

Result<std::optional<SecretBytes>> SecretStore::get(const std::string& name) const {
  if (!valid_name(name)) return make_error("secret name \"" + name.substr(0, 64) + "\" must match ^[A-Z_][A-Z0-9_]*$", EINVAL);
  auto ok = check_dir(/*create=*/false);
  if (!ok) return ok.error();
  if (!*ok) return std::optional<SecretBytes>();
  const fs::path file = dir_ / name;
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    if (errno == ENOENT) return std::optional<SecretBytes>();
    if (errno == ELOOP) return make_error(file.string() + ": is a symbolic link; refusing to use it", ELOOP);
    return errno_error("open " + file.string());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + file.string());
  if (!S_ISREG(st.st_mode)) return make_error(file.string() + ": not a regular file; refusing to use it");
  if (auto why = unsafe_reason(st, "secret file " + file.string()); !why.empty()) return make_error(why, EPERM);
  auto value = SecretBytes::read_all(fd.get(), file.string());
  if (!value) return value.error();
  return std::optional<SecretBytes>(std::move(*value));
}

Result<std::vector<SecretEntry>> SecretStore::list() const {
  std::vector<SecretEntry> out;
  auto ok = check_dir(/*create=*/false);
  if (!ok) return ok.error();
  if (!*ok) return out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!valid_name(name)) continue;  // temporary files (".NAME.tmp.N") and strays
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back(SecretEntry{name, static_cast<int64_t>(st.st_mtim.tv_sec)});
  }
  if (ec) return make_error("list " + dir_.string() + ": " + ec.message(), ec.value());
  std::sort(out.begin(), out.end(), [](const SecretEntry& a, const SecretEntry& b) { return a.name < b.name; });
  return out;
}

Result<bool> SecretStore::remove(const std::string& name) const {
  if (!valid_name(name)) return make_error("secret name \"" + name.substr(0, 64) + "\" must match ^[A-Z_][A-Z0-9_]*$", EINVAL);
  auto ok = check_dir(/*create=*/false);
  if (!ok) return ok.error();
  if (!*ok) return false;
  const fs::path file = dir_ / name;
  if (::unlink(file.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return errno_error("remove " + file.string());
  }
  return true;
}

}  // namespace soyaos::moon
