// Landlock: the second filesystem layer (the first is the mount namespace).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace soyaos::comet {

enum class FsAccess {
  read,        // read files, list directories
  read_exec,   // read + execute
  read_write,  // read + write, create/remove/rename/link (refer), truncate, ioctl on devices
               // as far as the running ABI knows; NOT execute
};

const char* to_string(FsAccess access);

struct LandlockRule {
  std::string path;  // absolute path in the calling process's view (after pivot_root)
  FsAccess access;
};

// Highest Landlock ABI of the running kernel; 0 when Landlock is unavailable or disabled.
int landlock_abi();

// Builds a ruleset handling every filesystem right the running ABI knows, plus (ABI >= 6) the
// abstract-unix-socket and signal scopes, adds one path-beneath rule per entry (each path is
// opened O_PATH|O_CLOEXEC; a missing path is an error naming it; rights that do not apply to
// a non-directory are dropped for that rule), sets PR_SET_NO_NEW_PRIVS and restricts the
// calling thread. Never downgrades silently: fails when the ABI is < 1. Call in the child
// after pivot_root and before the seccomp filter (seccomp blocks nothing Landlock needs,
// but this order keeps the filter last).
Status apply_landlock(const std::vector<LandlockRule>& rules);

}  // namespace soyaos::comet
