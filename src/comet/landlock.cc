#include "comet/landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "common/unique_fd.h"

namespace soyaos::comet {
namespace {

// The installed uapi header (linux-libc-dev 6.1) stops at ABI 2 (REFER). Later rights and
// fields are defined here from the kernel's include/uapi/linux/landlock.h.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)  // ABI 3
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)  // ABI 5
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)  // ABI 6
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)  // ABI 6
#endif

// struct landlock_ruleset_attr as of ABI 6; the kernel accepts any prefix size it knows,
// so we pass only the fields the running ABI has (sizeof up to handled_access_net for
// ABI 4-5, up to scoped for ABI >= 6).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4; not handled here (the network layer owns egress)
  uint64_t scoped;              // ABI 6
};

constexpr uint64_t kRead = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
constexpr uint64_t kWrite =
    LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
    LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
    LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_REFER | LANDLOCK_ACCESS_FS_TRUNCATE |
    LANDLOCK_ACCESS_FS_IOCTL_DEV;
// Rights that make sense on a non-directory (the kernel refuses the others with EINVAL).
constexpr uint64_t kFileRights = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                                 LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |
                                 LANDLOCK_ACCESS_FS_IOCTL_DEV;

// Every filesystem right the given ABI knows.
uint64_t fs_rights_for_abi(int abi) {
  uint64_t rights = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;  // ABI 1: bits 0..12
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) rights |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  return rights;
}

uint64_t rights_of(FsAccess access) {
  switch (access) {
    case FsAccess::read: return kRead;
    case FsAccess::read_exec: return kRead | LANDLOCK_ACCESS_FS_EXECUTE;
    case FsAccess::read_write: return kRead | kWrite;
  }
  return 0;
}

}  // namespace

const char* to_string(FsAccess access) {
  switch (access) {
    case FsAccess::read: return "read";
    case FsAccess::read_exec: return "read_exec";
    case FsAccess::read_write: return "read_write";
  }
  return "unknown";
}

int landlock_abi() {
  // SAFETY: version query; no ruleset is created.
  long abi = ::syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

Status apply_landlock(const std::vector<LandlockRule>& rules) {
  const int abi = landlock_abi();
  if (abi < 1) return make_error("landlock: not available in this kernel (ABI 0)", EOPNOTSUPP);
  const uint64_t handled = fs_rights_for_abi(abi);

  RulesetAttr attr{};
  attr.handled_access_fs = handled;
  size_t attr_size = sizeof(uint64_t);                      // ABI 1-3
  if (abi >= 4) attr_size = 2 * sizeof(uint64_t);           // + handled_access_net (left 0)
  if (abi >= 6) {
    attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    attr_size = sizeof(RulesetAttr);
  }
  // SAFETY: the kernel copies attr_size bytes of attr.
  UniqueFd ruleset(static_cast<int>(::syscall(__NR_landlock_create_ruleset, &attr, attr_size, 0)));
  if (!ruleset) return errno_error("landlock_create_ruleset ABI " + std::to_string(abi));

  for (const LandlockRule& rule : rules) {
    UniqueFd path(::open(rule.path.c_str(), O_PATH | O_CLOEXEC));
    if (!path) return errno_error("landlock: open " + rule.path);
    struct stat st {};
    if (::fstat(path.get(), &st) != 0) return errno_error("landlock: fstat " + rule.path);
    uint64_t allowed = rights_of(rule.access) & handled;
    if (!S_ISDIR(st.st_mode)) allowed &= kFileRights;
    landlock_path_beneath_attr beneath{};
    beneath.allowed_access = allowed;
    beneath.parent_fd = path.get();
    // SAFETY: the kernel reads `beneath` and takes its own reference to parent_fd's path.
    if (::syscall(__NR_landlock_add_rule, ruleset.get(), LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) != 0) {
      return errno_error(std::string("landlock_add_rule ") + rule.path + " " + to_string(rule.access));
    }
  }
  // SAFETY: required for an unprivileged landlock_restrict_self; idempotent.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno_error("prctl PR_SET_NO_NEW_PRIVS");
  // SAFETY: restricts the calling thread (and its future children) irrevocably.
  if (::syscall(__NR_landlock_restrict_self, ruleset.get(), 0) != 0) {
    return errno_error("landlock_restrict_self");
  }
  return {};
}

}  // namespace soyaos::comet
