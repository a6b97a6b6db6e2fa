// The x86_64 syscalls newer than libseccomp's tables, by name and number: used by the
// table's compiler (seccomp_filter.cc, at build time) and by the running supervisor
// (syscall_name()), so it is compiled into both.
#include <cstring>

#include "comet/seccomp_filter.h"

namespace soyaos::comet {
namespace {

// x86_64 numbers of syscalls libseccomp 2.5.4 does not name (arch/x86/entry/syscalls/syscall_64.tbl).
struct NewerSyscall {
  const char* name;
  int nr;
};
constexpr NewerSyscall kNewerSyscalls[] = {
    {"statmount", 457},     {"listmount", 458},     {"lsm_get_self_attr", 459}, {"lsm_set_self_attr", 460},
    {"lsm_list_modules", 461}, {"mseal", 462},      {"setxattrat", 463},        {"getxattrat", 464},
    {"listxattrat", 465},   {"removexattrat", 466}, {"open_tree_attr", 467},    {"file_getattr", 468},
    {"file_setattr", 469},
};

}  // namespace

int newer_syscall_nr(const char* name) {
  for (const auto& s : kNewerSyscalls) {
    if (std::strcmp(s.name, name) == 0) return s.nr;
  }
  return 0;
}

const char* newer_syscall_name(int nr) {
  for (const auto& s : kNewerSyscalls) {
    if (s.nr == nr) return s.name;
  }
  return nullptr;
}

}  // namespace soyaos::comet
