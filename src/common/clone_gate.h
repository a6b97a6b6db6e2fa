// The launcher's clone3(2) copies the process without running glibc's atfork handlers, so
// at that moment no other thread may be inside malloc, stdio or any lock the child could
// need. A thread that runs while a Comet is launched (the Moon's event recorder) holds this
// gate shared whenever it works and lets go of it only while it waits; the launcher holds
// it exclusively around clone3.
#pragma once

#include <mutex>
#include <shared_mutex>

namespace soyaos {

inline std::shared_mutex& clone_gate() {
  static std::shared_mutex gate;
  return gate;
}

}  // namespace soyaos
