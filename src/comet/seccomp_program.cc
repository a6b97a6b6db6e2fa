// The agent's seccomp program at run time: the program compiled at build time by
// soyaos_seccomp_gen (src/comet/gen/seccomp_gen.cc) from the table in seccomp_filter.cc,
// its installation, and syscall names. Nothing here calls libseccomp, so soyaos does not
// load it (issue #16): seccomp_filter.cc, which does, is built into the generator and the
// unit tests only.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <iterator>

#include "comet/seccomp_filter.h"

namespace soyaos::comet {
namespace {
#include "agent_filter_bpf.inc"  // kAgentFilterObserved, kAgentFilterUnobserved, kSyscallNames (generated)
}  // namespace

Result<SeccompProgram> build_agent_filter(bool observe_paths) {
  SeccompProgram program;
  if (observe_paths) {
    program.instructions.assign(std::begin(kAgentFilterObserved), std::end(kAgentFilterObserved));
  } else {
    program.instructions.assign(std::begin(kAgentFilterUnobserved), std::end(kAgentFilterUnobserved));
  }
  return program;
}

const char* syscall_name(int nr) {
  if (nr >= 0 && static_cast<size_t>(nr) < std::size(kSyscallNames) && kSyscallNames[nr] != nullptr) {
    return kSyscallNames[nr];
  }
  return newer_syscall_name(nr);
}

Result<UniqueFd> install_agent_filter(const SeccompProgram& program) {
  // SAFETY: PR_SET_NO_NEW_PRIVS is required for an unprivileged filter and is idempotent.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno_error("prctl PR_SET_NO_NEW_PRIVS");
  sock_fprog fprog{};
  fprog.len = static_cast<unsigned short>(program.instructions.size());
  fprog.filter = const_cast<sock_filter*>(program.instructions.data());
  // TSYNC with NEW_LISTENER needs TSYNC_ESRCH (both would otherwise use the return value).
  const unsigned long flags =
      SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_TSYNC_ESRCH;
  // SAFETY: raw seccomp(2); the kernel copies the program, fprog need not outlive the call.
  long fd = ::syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
  if (fd < 0) return errno_error("seccomp SECCOMP_SET_MODE_FILTER");
  return UniqueFd(static_cast<int>(fd));  // the listener is O_CLOEXEC by construction
}

}  // namespace soyaos::comet
