#include "comet/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
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
// be on the way. The whole path first, its parents only when it fails for want of them:
// most calls name a directory that exists or whose parent does (walking every component
// from the root was ~60 failed mkdir calls per run, issue #16).
Status make_dirs(const std::string& path) {
  if (path.empty() || path == "/") return {};
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return {};
  if (errno != ENOENT) return errno_error("mkdir " + path);
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash != 0) {
    if (auto s = make_dirs(path.substr(0, slash)); !s) return s;
  }
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("mkdir " + path);
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

// The run's one write-quota tmpfs (M1: one total over every writable path, bytes and
// inodes). Mounted once at a staging path; each writable path is a bind of one of its
// subdirectories, then the staging mount is detached (the binds keep it alive), so the agent
// never sees its root. tmpfs reads size=0 and nr_inodes=0 as "no limit": a zero quota is one
// page with no inode to spare, so not even an empty file can be created (ENOSPC).
Status mount_quota_tmpfs(const std::string& dst, const policy::Policy& policy, uid_t uid, gid_t gid) {
  if (auto s = make_dirs(dst); !s) return s;
  // Inodes the Comet itself uses there: the root, and every directory it may create as a
  // mount point of a writable path (bounded by the path components of every target).
  uint64_t structure = 1;
  for (const auto& m : policy.mounts) structure += static_cast<uint64_t>(std::count(m.target.begin(), m.target.end(), '/'));
  const uint64_t quota = policy.limits.write_quota_bytes;
  const uint64_t inodes = structure + policy::write_quota_inodes(quota);
  std::string opts = "size=" + std::to_string(quota == 0 ? 1 : quota) + ",nr_inodes=" + std::to_string(inodes) +
                     ",mode=0755,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  if (::mount("tmpfs", dst.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    return errno_error("mount the write-quota tmpfs (" + opts + ")");
  }
  return {};
}

// Once every writable path is bound: the inode limit becomes exactly what the Comet used
// plus the quota's share, so a zero quota leaves not one inode free.
Status seal_quota_tmpfs(const std::string& dst, const policy::Policy& policy) {
  struct statvfs st {};
  if (::statvfs(dst.c_str(), &st) != 0) return errno_error("statvfs the write-quota tmpfs");
  const uint64_t used = st.f_files - st.f_ffree;
  const uint64_t quota = policy.limits.write_quota_bytes;
  const std::string opts = "size=" + std::to_string(quota == 0 ? 1 : quota) +
                           ",nr_inodes=" + std::to_string(used + policy::write_quota_inodes(quota));
  if (::mount(nullptr, dst.c_str(), nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    return errno_error("remount the write-quota tmpfs (" + opts + ")");
  }
  return {};
}

// A writable path: a fresh subdirectory of the write-quota tmpfs bound at dst.
Status bind_quota_dir(const std::string& quota_root, size_t index, const std::string& dst) {
  const std::string dir = quota_root + "/w" + std::to_string(index);
  if (::mkdir(dir.c_str(), 0755) != 0) return errno_error("mkdir " + dir);
  if (auto s = make_dirs(dst); !s) return s;
  if (::mount(dir.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return errno_error("bind the write-quota directory at " + dst.substr(std::strlen(kStage)));
  }
  return {};
}

Result<OpenedSource> open_source(const std::string& host_path, const std::string& prefix = {}) {
  UniqueFd fd(::open((prefix + host_path).c_str(), O_PATH | O_CLOEXEC));
  if (!fd) return errno_error("open " + host_path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + host_path);
  return OpenedSource{std::move(fd), S_ISDIR(st.st_mode)};
}

// A read-only view of a host directory whose mount does not name the host path. A bind
// mount's /proc/*/mountinfo entry shows its source's path in the host filesystem; an
// overlay shows "/" and the lower layers as given. So: bind the source at a neutral
// staging path, put a small tmpfs (holding `skel` mount-point directories) above it,
// mount a lower-only (read-only) overlay of the two at dst, then detach the staging
// mounts, which the overlay keeps alive. A `skel` name ending in '/' is a directory,
// any other an empty file (a mount point for a file). Each `hide` path gets a whiteout in
// the top layer (a 0/0 character device, which an unprivileged user namespace may create
// since Linux 5.8), so overlayfs hides that name of the source: it is absent from
// listings and opening it fails with ENOENT, as for a name that never existed. One
// whiteout per excluded path, however large the excluded tree (node_modules/.cache ...).
Status mount_masked_dir(int src_fd, const std::string& dst, const std::vector<std::string>& skel, uid_t uid,
                        gid_t gid, const std::vector<std::string>& hide = {}) {
  static int layer = 0;
  const std::string base = std::string(kStage) + "/.layers/" + std::to_string(layer++);
  const std::string top = base + "/top", src = base + "/src";
  if (auto s = mount_tmpfs(top, uint64_t{64} * 1024, uid, gid, "0755"); !s) return s;
  for (const auto& d : skel) {
    Status s = d.back() == '/' ? make_dirs(top + "/" + d.substr(0, d.size() - 1)) : make_file(top + "/" + d, 0444);
    if (!s) return s;
  }
  for (const auto& rel : hide) {
    const std::string path = top + "/" + rel;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) continue;  // a mount point (inputs/NAME) shadows it already
    if (auto s = make_dirs(path.substr(0, path.rfind('/'))); !s) return s;
    // SAFETY: mknod of the overlayfs whiteout (char 0:0); no device is made.
    if (::mknod(path.c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0) {
      return errno_error("hide excluded pack path " + rel + " (overlayfs whiteout)");
    }
  }
  if (auto s = bind_fd(src_fd, src, /*is_dir=*/true); !s) return s;
  if (auto s = make_dirs(dst); !s) return s;
  const std::string opts = "lowerdir=" + top + ":" + src;
  if (::mount("overlay", dst.c_str(), "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    return errno_error("mount a read-only overlay at " + dst.substr(std::strlen(kStage)) +
                       " (the source's filesystem must support overlayfs lower layers)");
  }
  for (const auto& m : {top, src}) {
    if (::umount2(m.c_str(), MNT_DETACH) != 0) return errno_error("detach staging mount " + m);
    if (::rmdir(m.c_str()) != 0) return errno_error("remove staging directory " + m);
  }
  if (::rmdir(base.c_str()) != 0) return errno_error("remove staging directory " + base);
  return {};
}

// A read-only copy of a host file in its own small tmpfs, bound at dst: a file cannot be
// an overlay, and binding it would name its host path in /proc/*/mountinfo.
Status mount_masked_file(int src_fd, const std::string& dst, uid_t uid, gid_t gid) {
  static int layer = 0;
  const std::string base = std::string(kStage) + "/.files/" + std::to_string(layer++);
  // src_fd was opened O_RDONLY by open_mount_sources (as the invoking user).
  struct stat st {};
  if (::fstat(src_fd, &st) != 0) return errno_error("stat input file");
  if (::lseek(src_fd, 0, SEEK_SET) != 0) return errno_error("rewind input file");
  const uint64_t size = static_cast<uint64_t>(st.st_size) + 4096;
  if (auto s = mount_tmpfs(base, size, uid, gid, "0755"); !s) return s;
  const std::string copy = base + "/file";
  UniqueFd out(::open(copy.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (!out) return errno_error("create " + copy);
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(src_fd, buf, sizeof buf);
    if (n < 0) return errno_error("read input file");
    if (n == 0) break;
    if (::write(out.get(), buf, static_cast<size_t>(n)) != n) return errno_error("copy input file");
  }
  out.reset();
  if (::access(dst.c_str(), F_OK) != 0) {  // a mount point under /workdir/inputs already exists in the pack overlay
    if (auto s = make_file(dst, 0444); !s) return s;
  }
  if (::mount(copy.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0) return errno_error("bind at " + dst);
  if (auto s = set_readonly(dst, false); !s) return s;
  if (::umount2(base.c_str(), MNT_DETACH) != 0) return errno_error("detach staging mount " + base);
  if (::rmdir(base.c_str()) != 0) return errno_error("remove staging directory " + base);
  return {};
}

// /workdir: the pack, read-only, through a masked overlay with the mount points inputs/
// (holding one mount point per named or file input, a file or a directory as the input
// is) and out/ above it (they shadow any entries of those names in the pack).
Status build_pack_root(int pack_fd, const std::string& dst, const std::vector<std::string>& input_points,
                       uid_t uid, gid_t gid, const std::vector<std::string>& hide) {
  std::vector<std::string> skel = {"inputs/", "out/"};
  skel.insert(skel.end(), input_points.begin(), input_points.end());
  return mount_masked_dir(pack_fd, dst, skel, uid, gid, hide);
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

bool needs_source(const MountSpec& m) {
  return m.kind == MountSpec::Kind::bind_ro || m.kind == MountSpec::Kind::bind_rw || m.kind == MountSpec::Kind::pack_root;
}

Result<MountSources> open_mount_sources(const policy::Policy& policy, const std::string& root_prefix) {
  MountSources out;
  out.by_mount.resize(policy.mounts.size());
  for (size_t i = 0; i < policy.mounts.size(); ++i) {
    const auto& m = policy.mounts[i];
    if (needs_source(m)) {
      auto src = open_source(m.source, root_prefix);
      if (!src) return src.error();
      out.by_mount[i] = std::move(src.value());
      if (m.mask_source && !out.by_mount[i].is_dir) {
        // A masked file is copied, not bound: open it for reading now, as the invoking user.
        out.by_mount[i].fd.reset(::open((root_prefix + m.source).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        if (!out.by_mount[i].fd) return errno_error("open " + m.source);
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
  // Mount points below /workdir/inputs, relative to /workdir ("inputs/NAME", a trailing
  // '/' for a directory), created in the pack overlay's top layer.
  const std::string inputs_prefix = "/workdir/inputs/";
  std::vector<std::string> input_points;
  for (size_t i = 0; i < policy.mounts.size(); ++i) {
    const auto& t = policy.mounts[i].target;
    if (t.compare(0, inputs_prefix.size(), inputs_prefix) != 0 || !sources[i].fd) continue;
    input_points.push_back(t.substr(std::strlen("/workdir/")) + (sources[i].is_dir ? "/" : ""));
  }
  if (::mount("tmpfs", kStage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755") != 0) {
    return errno_error("mount root tmpfs");
  }
  const std::string stage = kStage;
  const std::string quota_root = stage + "/.quota";
  const bool any_writable = std::any_of(policy.mounts.begin(), policy.mounts.end(),
                                        [](const MountSpec& m) { return m.kind == MountSpec::Kind::tmpfs_rw; });
  if (any_writable) {
    if (auto s = mount_quota_tmpfs(quota_root, policy, policy.sandbox_uid, policy.sandbox_gid); !s) return s.error();
  }
  SandboxRoot root;
  for (size_t i = 0; i < policy.mounts.size(); ++i) {
    const auto& m = policy.mounts[i];
    const std::string dst = stage + m.target;
    Status s;
    switch (m.kind) {
      case MountSpec::Kind::bind_ro:
        if (m.mask_source) {
          s = sources[i].is_dir
                  ? mount_masked_dir(sources[i].fd.get(), dst, {}, policy.sandbox_uid, policy.sandbox_gid)
                  : mount_masked_file(sources[i].fd.get(), dst, policy.sandbox_uid, policy.sandbox_gid);
          break;
        }
        s = bind_fd(sources[i].fd.get(), dst, sources[i].is_dir);
        if (s) s = set_readonly(dst, /*recursive=*/true);
        break;
      case MountSpec::Kind::bind_rw:
        s = bind_fd(sources[i].fd.get(), dst, sources[i].is_dir);
        break;
      case MountSpec::Kind::tmpfs_rw:
        s = bind_quota_dir(quota_root, i, dst);
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
        s = build_pack_root(sources[i].fd.get(), dst, input_points, policy.sandbox_uid, policy.sandbox_gid, m.hide);
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
  if (any_writable) {
    if (auto s = seal_quota_tmpfs(quota_root, policy); !s) return s.error();
    // The binds keep the quota tmpfs alive; its root is no longer reachable.
    if (::umount2(quota_root.c_str(), MNT_DETACH) != 0) return errno_error("detach the write-quota staging mount");
    if (::rmdir(quota_root.c_str()) != 0) return errno_error("remove " + quota_root);
  }
  // The staging directories of the masked mounts are gone; remove their parents.
  for (const char* d : {"/.layers", "/.files"}) (void)::rmdir((stage + d).c_str());

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
