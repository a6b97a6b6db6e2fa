// The agent's seccomp filter: compiled at build time (libseccomp -> classic BPF, see
// build_agent_filter), installed in the child with a raw seccomp(2) call.
//
// Policy (the full table with a reason per row is in seccomp_filter.cc and docs/seccomp.md):
//   - default: ERRNO(EPERM) for anything not listed (Docker's choice);
//   - NOTIFY (the supervisor observes and answers): execve, execveat, fork, vfork,
//     clone without CLONE_THREAD, the path syscalls (open*, creat, mkdir*, unlink*, rmdir,
//     rename*, link*, symlink*, truncate, mknod*) and the clock setters;
//   - clone3: NOTIFY; the supervisor answers ENOSYS for a thread (glibc falls back to
//     clone(2), whose flags the filter inspects) and EPERM + a violation for a process;
//   - foreign ABIs (i386 via int 0x80, x32): ERRNO(ENOSYS).
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace soyaos::comet {

// Syscalls newer than libseccomp 2.5.4's tables (Debian 12): their x86_64 numbers, so the
// table can name them and the observer can report them by name. 0 / nullptr when unknown.
int newer_syscall_nr(const char* name);
const char* newer_syscall_name(int nr);

// The x86_64 syscall `nr`'s name as libseccomp names it (a table the build generates with
// libseccomp, so the running soyaos need not load it), else newer_syscall_name(nr);
// nullptr when neither knows it.
const char* syscall_name(int nr);

// A compiled classic-BPF seccomp program (native x86_64 only).
struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// The agent's filter as BPF. Call in the supervisor, before the child is created.
// `observe_paths = false` exists only for the observation benchmark's baseline
// (bench/startup.sh): path syscalls are then allowed without a notification, so violations
// are still refused by mounts and Landlock but not reported.
// The program is compiled once, at build time, by compile_agent_filter() (the generator
// src/comet/gen/seccomp_gen.cc writes it into the binary): libseccomp's compilation cost
// ~7 ms of CPU on every run (issue #16). The table, and so the program, is the same; a unit
// test checks that the embedded program is byte for byte what libseccomp compiles now.
Result<SeccompProgram> build_agent_filter(bool observe_paths = true);

// Compiles the table with libseccomp and exports it as BPF (the build's generator, tests).
Result<SeccompProgram> compile_agent_filter(bool observe_paths = true);

// The same filter in libseccomp's human-readable PFC form (golden tests, `soyaos doctor`).
Result<std::string> agent_filter_pfc();

// In the child: sets PR_SET_NO_NEW_PRIVS (idempotent), then installs `program` with
// seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC
// | SECCOMP_FILTER_FLAG_TSYNC_ESRCH) and returns the notification listener (O_CLOEXEC).
// Does not allocate on success (safe between clone and execve); only the error path builds
// an Error. The listener must reach the supervisor before the child's next notified syscall
// (its own execve of the runtime is one), or that syscall blocks until the listener closes.
Result<UniqueFd> install_agent_filter(const SeccompProgram& program);

}  // namespace soyaos::comet
