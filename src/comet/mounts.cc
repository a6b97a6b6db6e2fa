#include "comet/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace soyaos::comet {
namespace {

using policy::MountSpec;

// The new root is assembled on a tmpfs mounted over /tmp in the child's private mount
// namespace (the host's /tmp is untouched), as bubblewrap does.
constexpr const char* kStage = "/tmp";

int mount_setattr_call(int dirfd, const char* path, unsigned flags, struct mount_attr* attr) {
  // SAFETY: mount_setattr(2) (Linux 5.12) has no glibc wrapper in Debian 12.
  return static_cast<int>(::syscall(SYS_mount_setattr, dirfd, path, flags, attr, sizeof *attr));
}

Status set_readonly(const std::string& path, bool recursive) {
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  unsigned flags = AT_SYMLINK_NOFOLLOW | (recursive ? AT_RECURSIVE : 0);
  if (mount_setattr_call(AT_FDCWD, path.c_str(), flags, &attr) != 0) {
    // Device binds keep their dev flag: only read-only and nosuid are required there.
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID;
    if (mount_setattr_call(AT_FDCWD, path.c_str(), flags, &attr) != 0) {
      return errno_error("mount_setattr read-only " + path);
    }
  }
  return {};
}

Status set_readonly_keep_dev(const std::string& path) {
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
  if (mount_setattr_call(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, &attr) != 0) {
    return errno_error("mount_setattr read-only " + path);
  }
  return {};
}

// mkdir -p below the stage; every component is created fresh by us, so no symlink can
// be on the way.
Status make_dirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("mkdir " + cur);
  }
  return {};
}

Status make_file(const std::string& path, mode_t mode) {
  auto slash = path.rfind('/');
  if (auto s = make_dirs(path.substr(0, slash)); !s) return s;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return errno_error("create mount point " + path);
  ::close(fd);
  return {};
}

Status write_file(const std::string& path, const std::string& content) {
  auto slash = path.rfind('/');
  if (auto s = make_dirs(path.substr(0, slash)); !s) return s;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return errno_error("create " + path);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + off, content.size() - off);
    if (n < 0) return errno_error("write " + path);
    off += static_cast<size_t>(n);
  }
  return {};
}

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Binds a host object, named by an O_PATH fd opened before the stage hid anything, at dst.
Status bind_fd(int src_fd, const std::string& dst, bool is_dir) {
  if (auto s = is_dir ? make_dirs(dst) : make_file(dst, 0644); !s) return s;
  if (::mount(fd_path(src_fd).c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    return errno_error("bind mount at " + dst);
  }
  return {};
}

Status mount_tmpfs(const std::string& dst, uint64_t size, uid_t uid, gid_t gid, const char* mode) {
  if (auto s = make_dirs(dst); !s) return s;
  std::string opts = "size=" + std::to_string(size) + ",nr_inodes=65536,mode=" + mode +
                     ",uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  if (::mount("tmpfs", dst.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    return errno_error("mount tmpfs at " + dst);
  }
  return {};
}

Result<OpenedSource> open_source(const std::string& host_path) {
  UniqueFd fd(::open(host_path.c_str(), O_PATH | O_CLOEXEC));
  if (!fd) return errno_error("open " + host_path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + host_path);
  return OpenedSource{std::move(fd), S_ISDIR(st.st_mode)};
}

// Lists the pack's top-level entries and opens each (never following a symlink: its
// target is kept as text, to be recreated and resolved inside the sandbox).
Result<std::vector<PackEntry>> open_pack_entries(int pack_fd) {
  int dup_fd = ::openat(pack_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup_fd < 0) return errno_error("open pack directory");
  DIR* dir = ::fdopendir(dup_fd);
  if (dir == nullptr) {
    ::close(dup_fd);
    return errno_error("read pack directory");
  }
  std::vector<PackEntry> entries;
  Error failure;
  while (struct dirent* de = ::readdir(dir)) {
    std::string name = de->d_name;
    if (name == "." || name == ".." || name == "inputs" || name == "out") continue;
    struct stat st {};
    if (::fstatat(pack_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    PackEntry e;
    e.name = name;
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlinkat(pack_fd, name.c_str(), buf, sizeof buf - 1);
      if (n < 0) continue;
      e.is_link = true;
      e.link_target.assign(buf, static_cast<size_t>(n));
    } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
      e.is_dir = S_ISDIR(st.st_mode);
      e.fd.reset(::openat(pack_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!e.fd) {
        failure = errno_error("open pack entry " + name);
        break;
      }
    } else {
      continue;  // FIFOs, sockets, devices stay out
    }
    entries.push_back(std::move(e));
  }
  ::closedir(dir);
  if (!failure.message.empty()) return failure;
  return entries;
}

// /workdir: a tmpfs holding each top-level entry of the pack, bound read-only (symlinks
// recreated, resolved inside the sandbox at use time), plus the mount point out/.
Status build_pack_root(const std::vector<PackEntry>& entries, const std::string& dst, uid_t uid, gid_t gid) {
  if (auto s = mount_tmpfs(dst, 1 << 20, uid, gid, "0755"); !s) return s;
  for (const auto& e : entries) {
    std::string target = dst + "/" + e.name;
    if (e.is_link) {
      if (::symlink(e.link_target.c_str(), target.c_str()) != 0) return errno_error("symlink " + target);
      continue;
    }
    if (auto s = bind_fd(e.fd.get(), target, e.is_dir); !s) return s;
    if (auto s = set_readonly(target, /*recursive=*/true); !s) return s;
  }
  // inputs/ is created by its bind (a file or a directory), or empty after all mounts.
  return make_dirs(dst + "/out");
}

Status build_dev(const std::string& dst) {
  if (auto s = make_dirs(dst); !s) return s;
  for (const char* node : {"null", "zero", "full", "random", "urandom"}) {
    std::string host = std::string("/dev/") + node;
    auto src = open_source(host);
    if (!src) return src.error();
    if (auto s = bind_fd(src->fd.get(), dst + "/" + node, false); !s) return s;
  }
  const std::pair<const char*, const char*> links[] = {{"fd", "/proc/self/fd"},
                                                       {"stdin", "/proc/self/fd/0"},
                                                       {"stdout", "/proc/self/fd/1"},
                                                       {"stderr", "/proc/self/fd/2"}};
  for (const auto& [name, target] : links) {
    std::string path = dst + "/" + name;
    if (::symlink(target, path.c_str()) != 0) return errno_error("symlink " + path);
  }
  return {};
}

}  // namespace

Result<MountSources> open_mount_sources(const policy::Policy& policy) {
  MountSources out;
  out.by_mount.resize(policy.mounts.size());
  for (size_t i = 0; i < policy.mounts.size(); ++i) {
    const auto& m = policy.mounts[i];
    if (m.kind == MountSpec::Kind::bind_ro || m.kind == MountSpec::Kind::bind_rw ||
        m.kind == MountSpec::Kind::pack_root) {
      auto src = open_source(m.source);
      if (!src) return src.error();
      out.by_mount[i] = std::move(src.value());
      if (m.kind == MountSpec::Kind::pack_root) {
        auto entries = open_pack_entries(out.by_mount[i].fd.get());
        if (!entries) return entries.error();
        out.pack_entries = std::move(entries.value());
      }
    }
  }
  return out;
}

Result<SandboxRoot> build_sandbox_root(const policy::Policy& policy, MountSources sources_in) {
  // Nothing we do here may propagate back to the host's mounts.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return errno_error("make mounts private");
  }
  std::vector<OpenedSource>& sources = sources_in.by_mount;
  if (::mount("tmpfs", kStage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755") != 0) {
    return errno_error("mount root tmpfs");
  }
  const std::string stage = kStage;
  SandboxRoot root;
  for (size_t i = 0; i < policy.mounts.size(); ++i) {
    const auto& m = policy.mounts[i];
    const std::string dst = stage + m.target;
    Status s;
    switch (m.kind) {
      case MountSpec::Kind::bind_ro:
        s = bind_fd(sources[i].fd.get(), dst, sources[i].is_dir);
        if (s) s = set_readonly(dst, /*recursive=*/true);
        break;
      case MountSpec::Kind::bind_rw:
        s = bind_fd(sources[i].fd.get(), dst, sources[i].is_dir);
        break;
      case MountSpec::Kind::tmpfs_rw:
        s = mount_tmpfs(dst, m.size_bytes, policy.sandbox_uid, policy.sandbox_gid, "0755");
        if (s && m.target == policy.out_sandbox_path) {
          root.out_dir.reset(::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
          if (!root.out_dir) s = errno_error("open " + dst);
          if (s && !policy.out_writable) s = set_readonly(dst, false);
        }
        break;
      case MountSpec::Kind::symlink:
        if (auto d = make_dirs(dst.substr(0, dst.rfind('/'))); !d) {
          s = d;
        } else if (::symlink(m.source.c_str(), dst.c_str()) != 0) {
          s = errno_error("symlink " + m.target);
        }
        break;
      case MountSpec::Kind::file:
        s = write_file(dst, m.content);
        break;
      case MountSpec::Kind::pack_root:
        s = build_pack_root(sources_in.pack_entries, dst, policy.sandbox_uid, policy.sandbox_gid);
        break;
      case MountSpec::Kind::dev:
        s = build_dev(dst);
        break;
      case MountSpec::Kind::proc:
        if (auto d = make_dirs(dst); !d) {
          s = d;
        } else if (::mount("proc", dst.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                           "subset=pid") != 0) {
          s = errno_error("mount proc at " + m.target);
        }
        break;
    }
    if (!s) return s.error();
  }
  sources.clear();
  sources_in.pack_entries.clear();
  // /workdir itself: an empty inputs/ when no --input was given, then read-only (M5).
  const std::string workdir = stage + "/workdir";
  if (::access((workdir + "/inputs").c_str(), F_OK) != 0) {
    if (auto s = make_dirs(workdir + "/inputs"); !s) return s.error();
  }
  if (auto s = set_readonly(workdir, /*recursive=*/false); !s) return s.error();

  // Switch root: pivot_root(".", ".") stacks the old root under the new one; detaching
  // it leaves no path back to the host's tree.
  if (::chdir(kStage) != 0) return errno_error("chdir to new root");
  // SAFETY: pivot_root(2) has no glibc wrapper.
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return errno_error("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return errno_error("detach old root");
  if (::chdir("/") != 0) return errno_error("chdir /");
  if (auto s = set_readonly_keep_dev("/"); !s) return s.error();
  return root;
}

}  // namespace soyaos::comet
