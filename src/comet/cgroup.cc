#include "comet/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <sstream>
#include <thread>

#include "common/unique_fd.h"

namespace soyaos::comet {
namespace {

std::optional<std::string> read_small(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1U << 20)) break;
  }
  return out;
}

Status write_value(const std::string& dir, const std::string& file, const std::string& value) {
  const std::string path = dir + "/" + file;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return errno_error("open " + path);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return errno_error("write '" + value + "' to " + path);
  }
  return {};
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) {
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// "KEY N" lines (memory.oom_control, memory.events, pids.events): N for KEY, or 0.
uint64_t keyed_value(const std::optional<std::string>& text, const std::string& key) {
  if (!text) return 0;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    auto w = words(line);
    if (w.size() == 2 && w[0] == key) return std::strtoull(w[1].c_str(), nullptr, 10);
  }
  return 0;
}

uint64_t number_in(const std::string& path) {
  auto text = read_small(path);
  return text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
}

// The directory of cgroup `path` in a hierarchy mounted at `m` (whose root is m.root).
std::optional<std::string> dir_of(const CgroupMount& m, const std::string& path) {
  if (m.root == "/") return path == "/" ? m.mount_point : m.mount_point + path;
  if (path == m.root) return m.mount_point;
  if (path.rfind(m.root + "/", 0) == 0) return m.mount_point + path.substr(m.root.size());
  return std::nullopt;  // our cgroup is outside what this mount shows
}

// A run's claim on one of its cgroup directories: the directory open, under a shared flock,
// held by the RunCgroup from right after its mkdir until remove(). sweep_stale tests it.
Result<UniqueFd> claim_dir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return errno_error("open " + dir);
  // Non-blocking: the only other locker is a sweep, which never takes a directory this young.
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) return errno_error("flock " + dir);
  return fd;
}

// Run cgroups left behind by a soyaos that was killed (SIGKILL skips ~RunCgroup): unclaimed,
// empty (no task) and older than a minute. Each leaked memory cgroup holds a memcg id, of
// which the kernel has 65535, so they must not accumulate.
//
// A live run's cgroup may be empty for as long as its pre-launch work takes: on cgroup v2
// nothing enters it until clone3(CLONE_INTO_CGROUP), and `soyaos run` makes it at its cache
// miss, before it opens the Moon, compiles the policy and records the run durably: work whose
// length nothing bounds (a busy Moon daemon, a slow fsync, a stopped process). So what tells a
// live run's directory from a dead one's is not its age but its claim (claim_dir): the kernel
// drops a flock when the last fd of its open file description closes, i.e. when the owner ends
// however it ends (SIGKILL included), and not before; this sweep's non-blocking exclusive
// flock fails while the claim is held, and is kept until the rmdir, so no owner can claim what
// is being removed. flock, not fcntl locks: those belong to the process, and a sweep would not
// see the claim of another run of its own process (a process that launches several Comets,
// each from a thread of its own). Refreshing the mtime before clone3 would not do: a sweep
// during the pre-launch work comes before the refresh, and any age limit is a window that long
// enough pre-launch work outlasts. The age check stays for the microseconds between an owner's
// mkdir and its claim, and for the unclaimed directories of an older soyaos on this host.
void sweep_stale(const std::string& parent) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return;
  const time_t now = ::time(nullptr);
  while (struct dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name).substr(0, kRunCgroupPrefix.size()) != kRunCgroupPrefix) continue;
    const std::string dir = parent + "/" + e->d_name;
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || now - st.st_mtime < 60) continue;
    UniqueFd claim(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!claim || ::flock(claim.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its run is alive
    auto procs = read_small(dir + "/cgroup.procs");
    if (procs && procs->empty()) (void)::rmdir(dir.c_str());
  }
  ::closedir(d);
}

}  // namespace

const char* to_string(CgroupVersion v) {
  switch (v) {
    case CgroupVersion::v1: return "cgroup v1";
    case CgroupVersion::v2: return "cgroup v2";
    case CgroupVersion::none: return "none";
  }
  return "none";
}

std::string CgroupPlan::mechanism(const CgroupController& c, bool has_rlimit) const {
  if (c.version != CgroupVersion::none) return to_string(c.version);
  return has_rlimit ? "rlimit" : "none";
}

std::vector<std::string> CgroupPlan::rlimit_only() const {
  std::vector<std::string> out;
  if (memory.version == CgroupVersion::none) out.emplace_back("memory");
  if (pids.version == CgroupVersion::none) out.emplace_back("pids");
  return out;
}

std::map<std::string, std::string> parse_proc_cgroup(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto c1 = line.find(':');
    auto c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path = line.substr(c2 + 1);
    if (controllers.empty()) {
      out[""] = path;
      continue;
    }
    for (const auto& c : split(controllers, ',')) out[c] = path;
  }
  return out;
}

std::map<std::string, CgroupMount> parse_cgroup_mounts(const std::string& text) {
  std::map<std::string, CgroupMount> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto w = words(line);
    auto dash = std::find(w.begin(), w.end(), "-");
    if (dash == w.end() || w.size() < 5 || std::distance(dash, w.end()) < 3) continue;
    const std::string& fstype = *(dash + 1);
    CgroupMount m{w[4], w[3]};
    if (fstype == "cgroup2") {
      out.emplace("", m);
    } else if (fstype == "cgroup") {
      for (const auto& opt : split(*(dash + 3), ',')) {
        if (opt == "memory" || opt == "pids" || opt == "cpu") out.emplace(opt, m);
      }
    }
  }
  return out;
}

Result<CgroupPlan> probe_cgroups() {
  auto self = read_small("/proc/self/cgroup");
  auto mountinfo = read_small("/proc/self/mountinfo");
  if (!self || !mountinfo) return errno_error("read /proc/self/cgroup and /proc/self/mountinfo");
  const auto paths = parse_proc_cgroup(*self);
  const auto mounts = parse_cgroup_mounts(*mountinfo);
  const bool root = ::geteuid() == 0;
  CgroupPlan plan;
  std::vector<std::string> why;

  // cgroup v1: our own cgroup in each hierarchy, when we may create cgroups there.
  for (auto [name, ctl] : {std::pair<const char*, CgroupController*>{"memory", &plan.memory},
                           {"pids", &plan.pids}, {"cpu", &plan.cpu}}) {
    auto m = mounts.find(name);
    auto p = paths.find(name);
    if (m == mounts.end() || p == paths.end()) continue;
    auto dir = dir_of(m->second, p->second);
    if (!dir) continue;
    if (::access(dir->c_str(), W_OK) == 0) {
      *ctl = {CgroupVersion::v1, *dir};
    } else {
      why.push_back(std::string("cgroup v1 ") + name + ": " + *dir + " is not writable by uid " +
                    std::to_string(::geteuid()) + " (not delegated)");
    }
  }

  // cgroup v2 for what v1 does not hold.
  auto m2 = mounts.find("");
  auto p2 = paths.find("");
  if (m2 != mounts.end() && p2 != paths.end()) {
    const std::string mount = m2->second.mount_point;
    auto own = dir_of(m2->second, p2->second);
    auto available = words(read_small(mount + "/cgroup.controllers").value_or(""));
    for (auto [name, ctl] : {std::pair<const char*, CgroupController*>{"memory", &plan.memory},
                             {"pids", &plan.pids}, {"cpu", &plan.cpu}}) {
      if (ctl->version != CgroupVersion::none || !contains(available, name)) continue;
      if (root) {
        // As root: a tree of our own at the top, whose subtree_control we may set (the root
        // cgroup is exempt from the no-internal-processes rule).
        *ctl = {CgroupVersion::v2, mount + "/soyaos"};
        plan.v2_enable.emplace_back(name);
      } else if (own && ::access(own->c_str(), W_OK) == 0 &&
                 contains(words(read_small(*own + "/cgroup.subtree_control").value_or("")), name)) {
        *ctl = {CgroupVersion::v2, *own};  // delegated to us with the controller enabled
      } else {
        why.push_back(std::string("cgroup v2 ") + name + ": " + (own ? *own : mount) +
                      " is not delegated to uid " + std::to_string(::geteuid()) +
                      " with the controller enabled in cgroup.subtree_control");
      }
    }
  }
  for (auto [name, ctl] : {std::pair<const char*, CgroupController*>{"memory", &plan.memory},
                           {"pids", &plan.pids}}) {
    const std::string controller = name;  // a structured binding cannot be captured (clang)
    if (ctl->version == CgroupVersion::none &&
        std::none_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(controller) != std::string::npos; })) {
      why.push_back("no cgroup hierarchy offers the " + controller + " controller");
    }
  }
  for (size_t i = 0; i < why.size(); ++i) plan.why_not += (i == 0 ? "" : "; ") + why[i];
  return plan;
}

namespace {

Error cgroup_failure(CgroupVersion v, const char* what, const Error& e) {
  return make_error(std::string("cgroup (") + to_string(v) + " " + what + "): " + e.message, e.err);
}

}  // namespace

Result<RunCgroup> RunCgroup::create(const CgroupPlan& plan, const std::string& name, const policy::Limits& limits) {
  auto cg = make(plan, name);
  if (!cg) return cg.error();
  if (auto s = cg->limit(limits); !s) return s.error();
  return cg;
}

Result<RunCgroup> RunCgroup::make(const CgroupPlan& plan, const std::string& name) {
  RunCgroup cg;
  auto make_dir = [&](const CgroupController& c, const char* what) -> Result<std::string> {
    const std::string dir = c.parent + "/" + name;
    if (contains(cg.dirs_, dir)) return dir;  // v2: one directory for every controller
    if (c.version == CgroupVersion::v2 && !plan.v2_enable.empty() && !exists(c.parent)) {
      // As root: enable the controllers at the top, then in <mount>/soyaos for its children.
      const std::string mount = c.parent.substr(0, c.parent.rfind('/'));
      for (const auto& ctl : plan.v2_enable) {
        if (auto s = write_value(mount, "cgroup.subtree_control", "+" + ctl); !s) return s.error();
      }
      if (::mkdir(c.parent.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("mkdir " + c.parent);
    }
    if (c.version == CgroupVersion::v2) {
      for (const auto& ctl : plan.v2_enable) {
        if (auto s = write_value(c.parent, "cgroup.subtree_control", "+" + ctl); !s) return s.error();
      }
    }
    sweep_stale(c.parent);
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return errno_error(std::string(to_string(c.version)) + " " + what + ": mkdir " + dir);
    }
    cg.dirs_.push_back(dir);
    auto claim = claim_dir(dir);
    if (!claim) {
      return make_error(std::string(to_string(c.version)) + " " + what + ": " + claim.error().message,
                        claim.error().err);
    }
    cg.claims_.push_back(std::move(claim).value());
    if (c.version == CgroupVersion::v1) {
      cg.v1_dirs_.push_back(dir);
    } else {
      // clone3(CLONE_INTO_CGROUP) takes the directory as an fd (O_PATH suffices).
      cg.v2_dir_ = dir;
      cg.v2_fd_.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!cg.v2_fd_) return errno_error(std::string(to_string(c.version)) + " " + what + ": open " + dir);
    }
    return dir;
  };
  if (plan.memory.version != CgroupVersion::none) {
    auto dir = make_dir(plan.memory, "memory");
    if (!dir) return cgroup_failure(plan.memory.version, "memory", dir.error());
    cg.memory_dir_ = *dir;
    cg.memory_version_ = plan.memory.version;
  }
  if (plan.pids.version != CgroupVersion::none) {
    auto dir = make_dir(plan.pids, "pids");
    if (!dir) return cgroup_failure(plan.pids.version, "pids", dir.error());
    cg.pids_dir_ = *dir;
    cg.pids_version_ = plan.pids.version;
  }
  if (plan.cpu.version != CgroupVersion::none) {
    auto dir = make_dir(plan.cpu, "cpu");
    if (!dir) return cgroup_failure(plan.cpu.version, "cpu", dir.error());
    cg.cpu_dir_ = *dir;
    cg.cpu_version_ = plan.cpu.version;
  }
  return cg;
}

Status RunCgroup::limit(const policy::Limits& limits) {
  if (!memory_dir_.empty()) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    Status s;
    if (memory_version_ == CgroupVersion::v1) {
      // Charges page cache, tmpfs, shmem and memfd pages to the cgroup that touched them.
      s = write_value(memory_dir_, "memory.limit_in_bytes", bytes);
      // Memory plus swap: swapping out shmem must not escape the limit.
      if (s && exists(memory_dir_ + "/memory.memsw.limit_in_bytes")) {
        s = write_value(memory_dir_, "memory.memsw.limit_in_bytes", bytes);
      }
      // Inherited from the parent: an OOM must kill, not freeze the agent.
      if (s) s = write_value(memory_dir_, "memory.oom_control", "0");
    } else {
      s = write_value(memory_dir_, "memory.max", bytes);
      if (s && exists(memory_dir_ + "/memory.swap.max")) s = write_value(memory_dir_, "memory.swap.max", "0");
      if (s) s = write_value(memory_dir_, "memory.oom.group", "1");
    }
    if (!s) return cgroup_failure(memory_version_, "memory", s.error());
  }
  if (!pids_dir_.empty()) {
    pids_limit_ = limits.pids;
    // One more until seal(): the launcher thread is in this cgroup when it clones the Comet
    // (v1), and is released before the Comet runs anything (launch_thread.h).
    if (auto s = write_value(pids_dir_, "pids.max", std::to_string(uint64_t{limits.pids} + 1)); !s) {
      return cgroup_failure(pids_version_, "pids", s.error());
    }
  }
  if (!cpu_dir_.empty()) {
    Status s = cpu_version_ == CgroupVersion::v1 ? write_value(cpu_dir_, "cpu.shares", std::to_string(kCpuSharesV1))
                                                 : write_value(cpu_dir_, "cpu.weight", std::to_string(kCpuWeightV2));
    if (!s) return cgroup_failure(cpu_version_, "cpu", s.error());
  }
  return {};
}

RunCgroup::RunCgroup(RunCgroup&& other) noexcept
    : dirs_(std::move(other.dirs_)),
      memory_dir_(std::move(other.memory_dir_)),
      pids_dir_(std::move(other.pids_dir_)),
      memory_version_(other.memory_version_),
      pids_version_(other.pids_version_),
      pids_limit_(other.pids_limit_),
      cpu_dir_(std::move(other.cpu_dir_)),
      cpu_version_(other.cpu_version_),
      v1_dirs_(std::move(other.v1_dirs_)),
      v2_dir_(std::move(other.v2_dir_)),
      v2_fd_(std::move(other.v2_fd_)),
      claims_(std::move(other.claims_)) {
  other.dirs_.clear();
  other.v1_dirs_.clear();
  other.claims_.clear();
}

RunCgroup& RunCgroup::operator=(RunCgroup&& other) noexcept {
  if (this != &other) {
    remove();
    dirs_ = std::move(other.dirs_);
    memory_dir_ = std::move(other.memory_dir_);
    pids_dir_ = std::move(other.pids_dir_);
    memory_version_ = other.memory_version_;
    pids_version_ = other.pids_version_;
    pids_limit_ = other.pids_limit_;
    cpu_dir_ = std::move(other.cpu_dir_);
    cpu_version_ = other.cpu_version_;
    v1_dirs_ = std::move(other.v1_dirs_);
    v2_dir_ = std::move(other.v2_dir_);
    v2_fd_ = std::move(other.v2_fd_);
    claims_ = std::move(other.claims_);
    other.dirs_.clear();
    other.v1_dirs_.clear();
    other.claims_.clear();
  }
  return *this;
}

RunCgroup::~RunCgroup() { remove(); }

Status RunCgroup::add(pid_t pid) const {
  for (const auto& dir : dirs_) {
    if (auto s = write_value(dir, "cgroup.procs", std::to_string(pid)); !s) {
      return make_error("cgroup: place the Comet in " + dir + ": " + s.error().message, s.error().err);
    }
  }
  return {};
}

Status RunCgroup::enter_this_thread() const {
  const std::string tid = std::to_string(::gettid());
  for (const auto& dir : v1_dirs_) {
    if (auto s = write_value(dir, "tasks", tid); !s) {
      return make_error("cgroup: place the Comet's launcher thread in " + dir + ": " + s.error().message, s.error().err);
    }
  }
  return {};
}

Status RunCgroup::seal() const {
  if (pids_dir_.empty()) return {};
  if (auto s = write_value(pids_dir_, "pids.max", std::to_string(pids_limit_)); !s) {
    return make_error(std::string("cgroup (") + to_string(pids_version_) + " pids): " + s.error().message, s.error().err);
  }
  return {};
}

CgroupUsage RunCgroup::usage() const {
  CgroupUsage u;
  if (!memory_dir_.empty()) {
    if (memory_version_ == CgroupVersion::v1) {
      u.oom_kills = keyed_value(read_small(memory_dir_ + "/memory.oom_control"), "oom_kill");
      u.memory_peak = number_in(memory_dir_ + "/memory.max_usage_in_bytes");
      u.memory_failcnt = number_in(memory_dir_ + "/memory.failcnt");
    } else {
      u.oom_kills = keyed_value(read_small(memory_dir_ + "/memory.events"), "oom_kill");
      u.memory_peak = number_in(memory_dir_ + "/memory.peak");
    }
  }
  if (!pids_dir_.empty()) u.pids_refused = keyed_value(read_small(pids_dir_ + "/pids.events"), "max");
  return u;
}

void RunCgroup::remove() {
  // The agent has been reaped, but the kernel may still be tearing down its threads (a PID
  // namespace's last tasks): rmdir is EBUSY until the cgroup is empty.
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    for (int tries = 0; tries < 100; ++tries) {
      if (::rmdir(it->c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  dirs_.clear();
  v1_dirs_.clear();
  v2_fd_.reset();
  claims_.clear();  // after the rmdir: until then a sweep must leave the directories alone
}

}  // namespace soyaos::comet
