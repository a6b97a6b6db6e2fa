// What the cgroup tests read from the cgroup filesystem and /proc: a whole file, and the
// lines of a `tasks` or `cgroup.procs` list as a set (the kernel lists ids in no promised
// order). Header-only, beside harness.h: the unit tests (cgroup_test.cc,
// launch_thread_test.cc, which have this directory on their include path) and the end-to-end
// CometCgroupTest (comet_cgroup_test.cc) use it.
#pragma once

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace soyaos::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The non-empty lines of `text`.
inline std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.insert(line);
  }
  return out;
}

}  // namespace soyaos::testing
