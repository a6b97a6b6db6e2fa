#include "supervisor/runtime_files.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "policy/runtime_layer.h"

namespace soyaos::supervisor {
namespace {

Result<std::string> read_host_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno_error("open " + path);
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("read " + path);
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (size_t{4} << 20)) return make_error("read " + path + ": larger than 4 MiB", EFBIG);
  }
}

// The CPUs the agent thread may run on; the supervisor's own when the thread is gone.
std::vector<int> affinity_of(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(tid, sizeof set, &set) != 0 && ::sched_getaffinity(0, sizeof set, &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace

Result<UniqueFd> open_served_file(const std::string& path, pid_t tid, const policy::Policy& policy) {
  if (!policy::is_served_proc_file(path)) return make_error("not a served runtime-layer file: " + path, ENOENT);
  auto host = read_host_file(path);
  if (!host) return host.error();
  const std::string content = policy::render_proc_file(path, *host, affinity_of(tid), policy.limits.memory_bytes);
  // The memfd's name is what the agent sees in /proc/self/fd: it says where it came from.
  const std::string name = "soyaos-runtime-layer:" + path;
  UniqueFd memfd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd) return errno_error("memfd_create " + name);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(memfd.get(), content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("write " + name);
    off += static_cast<size_t>(n);
  }
  if (::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return errno_error("seal " + name);
  }
  // A read-only open file description of it, positioned at 0, for the agent.
  const std::string self = "/proc/self/fd/" + std::to_string(memfd.get());
  UniqueFd ro(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ro) return errno_error("reopen " + name + " read-only");
  return ro;
}

}  // namespace soyaos::supervisor
