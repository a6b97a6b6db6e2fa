// The escape suite's shared fixture: runs tests/escape/packs/attack/attack.py (one Comet per
// attack group) and checks the host-side canaries after every test. The test files
// (escape_*_test.cc) hold the attacks by concern; see escape_test.cc for the suite's rules.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/base64.h"
#include "harness.h"

namespace soyaos::testing {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSecret = "operator-secret-escape";

struct AttackRun {
  RunOutput output;
  std::vector<json> events;
  std::map<std::string, std::string> cases;  // name -> "ok ...", "errno=NAME", "error=TYPE"

  std::vector<json> of_type(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == type) out.push_back(e);
    }
    return out;
  }
  std::vector<json> violations(const std::string& surface) const {
    std::vector<json> out;
    for (const auto& e : of_type("capability_violation")) {
      if (e["data"].value("surface", "") == surface) out.push_back(e);
    }
    return out;
  }
  // The case's outcome; "<missing>" when the agent never reported it (it died, or an
  // exec replaced it).
  std::string get(const std::string& name) const {
    auto it = cases.find(name);
    return it == cases.end() ? "<missing>" : it->second;
  }
  std::string context() const {
    std::string out = output.out.size() > 4000 ? output.out.substr(0, 4000) + "..." : output.out;
    std::string err = output.err.size() > 4000 ? output.err.substr(0, 4000) + "..." : output.err;
    return "exit=" + std::to_string(output.exit_code) + "\nstdout:\n" + out + "\nstderr:\n" + err;
  }
};

inline std::string sha16(const std::string& data) {
  // The attack program reports sha256[:16]; compute the same with the host's sha256sum.
  fs::path tmp = fs::temp_directory_path() / ("soyaos-escape-sha-" + std::to_string(::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary);
    f << data;
  }
  std::string cmd = "sha256sum " + tmp.string();
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[128] = {};
  size_t n = p != nullptr ? std::fread(buf, 1, sizeof buf - 1, p) : 0;
  if (p != nullptr) ::pclose(p);
  fs::remove(tmp);
  return std::string(buf, std::min<size_t>(n, 16));
}

// A probe result's base64 (Python's b64encode: canonical) decoded by the tree's codec
// (common/base64.h). A text it refuses fails the test: a garbled result must not pass as one
// that shows nothing.
inline std::string probe_base64(const std::string& in) {
  auto r = soyaos::base64_decode(in);
  if (!r) {
    ADD_FAILURE() << "probe result: " << r.error().message << ": " << in.substr(0, 80);
    return {};
  }
  return std::move(r.value());
}

class EscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/escape/packs/attack", "pack");
    // Host canaries, all outside the pack: a secret file (world-readable, so that an
    // escapee of any identity could read it), a world-writable directory that must stay
    // empty, and a process that must survive.
    canary_dir_ = dir_.path() / "canary";
    fs::create_directories(canary_dir_ / "empty");
    fs::permissions(canary_dir_, fs::perms::all);
    fs::permissions(canary_dir_ / "empty", fs::perms::all);
    canary_ = canary_dir_ / "secret.txt";
    canary_content_ = "HOST-CANARY-" + std::to_string(::getpid()) + "-" +
                      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    dir_.write("canary/secret.txt", canary_content_);
    fs::permissions(canary_, fs::perms(0644));
    // An old atime: any read on this relatime mount moves it.
    timespec times[2] = {{1000000000, 0}, {UTIME_OMIT, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, canary_.c_str(), times, 0), 0);
    struct stat st{};
    ASSERT_EQ(::stat(canary_.c_str(), &st), 0);
    canary_stat_ = st;
    host_process_ = ::fork();
    if (host_process_ == 0) {
      ::execl("/bin/sleep", "sleep", "120", nullptr);
      ::_exit(127);
    }
  }

  void TearDown() override {
    if (host_process_ > 0) {
      EXPECT_EQ(::waitpid(host_process_, nullptr, WNOHANG), 0) << "the host canary process died";
      EXPECT_EQ(::kill(host_process_, 0), 0) << "the host canary process was killed from inside";
      ::kill(host_process_, SIGKILL);
      ::waitpid(host_process_, nullptr, 0);
    }
    if (canary_.empty()) return;
    struct stat st{};
    ASSERT_EQ(::stat(canary_.c_str(), &st), 0) << "the host canary file is gone";
    EXPECT_EQ(st.st_atim.tv_sec, canary_stat_.st_atim.tv_sec) << "the host canary file was READ";
    EXPECT_EQ(st.st_mtim.tv_sec, canary_stat_.st_mtim.tv_sec);
    EXPECT_EQ(st.st_mtim.tv_nsec, canary_stat_.st_mtim.tv_nsec) << "the host canary file was modified";
    EXPECT_EQ(st.st_mode, canary_stat_.st_mode);
    EXPECT_EQ(read_file(canary_), canary_content_);
    EXPECT_TRUE(fs::is_empty(canary_dir_ / "empty")) << "something was written into the host canary directory";
    std::set<std::string> entries;
    for (const auto& e : fs::directory_iterator(canary_dir_)) entries.insert(e.path().filename().string());
    EXPECT_EQ(entries, (std::set<std::string>{"empty", "secret.txt"}));
  }

  void set_resources(const std::string& resources) {
    dir_.write("pack/soyapack.yaml", R"(soyapack: v0
name: escape-attack
version: 0.1.0
agent: {runtime: python3, entrypoint: attack.py, env: {ESCAPE_MANIFEST_VAR: declared}}
capabilities:
  egress: []
  fs: {read: [/workdir, /workdir/inputs], write: [/workdir/out]}
  determinism_tier: side-effect
resources: )" + resources + "\n");
  }

  AttackRun attack(const std::vector<std::string>& group_and_args) {
    auto events = dir_.path() / "events.jsonl";
    fs::remove(events);
    std::vector<std::string> args = {"run", pack_.string(), "--out", out_dir().string(), "--events", events.string(),
                                     "--no-cache", "--"};
    args.insert(args.end(), group_and_args.begin(), group_and_args.end());
    AttackRun run;
    std::map<std::string, std::string> env = extra_env_;
    env["SOYAOS_TEST_SECRET"] = kSecret;
    run.output = run_soyaos(args, env, dir_.path());
    std::istringstream lines(read_file(events));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) run.events.push_back(json::parse(line));
    }
    std::istringstream out(run.output.out);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("CASE ", 0) != 0) continue;
      auto sp = line.find(' ', 5);
      if (sp == std::string::npos) continue;
      run.cases[line.substr(5, sp - 5)] = line.substr(sp + 1);
    }
    // Never: a program other than the runtime ran; the operator's environment leaked.
    EXPECT_EQ(run.output.out.find("ESCAPED"), std::string::npos) << run.context();
    EXPECT_EQ(run.output.out.find(kSecret), std::string::npos) << run.context();
    EXPECT_EQ(run.output.out.find(canary_content_), std::string::npos) << "host canary content read inside";
    EXPECT_NE(run.output.exit_code, 125) << run.context();
    EXPECT_NE(run.output.exit_code, 124) << "the run hung until its timeout\n" << run.context();
    return run;
  }

  fs::path out_dir() const { return dir_.path() / "out"; }

  // The host side of /workdir/out: no symlink, FIFO, socket or device; no set-id or exec
  // bit on a file; total bytes within the write quota.
  void expect_out_is_inert(uintmax_t quota) {
    if (!fs::exists(out_dir())) return;
    uintmax_t total = 0;
    for (auto it = fs::recursive_directory_iterator(out_dir()); it != fs::recursive_directory_iterator(); ++it) {
      struct stat st{};
      ASSERT_EQ(::lstat(it->path().c_str(), &st), 0);
      std::string rel = fs::relative(it->path(), out_dir()).string();
      EXPECT_TRUE(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) << rel << " has type " << std::oct << st.st_mode;
      EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u) << rel << " is set-id on the host: " << std::oct << st.st_mode;
      if (S_ISREG(st.st_mode)) {
        EXPECT_EQ(st.st_mode & 0111, 0u) << rel << " is executable on the host: " << std::oct << st.st_mode;
        total += static_cast<uintmax_t>(st.st_size);
      }
    }
    EXPECT_LE(total, quota) << "collected more than write_quota onto the host";
  }

  TempDir dir_;
  std::map<std::string, std::string> extra_env_;  // added to soyaos's environment (SOYAOS_HOME)
  fs::path pack_;
  fs::path canary_;
  fs::path canary_dir_;
  std::string canary_content_;
  struct stat canary_stat_{};
  pid_t host_process_ = -1;
};

// Whether this kernel enters the i386 ABI on int 0x80 (CONFIG_IA32_EMULATION, not disabled
// at boot): a child of this process tries it; without the entry the CPU's #GP kills it with
// SIGSEGV. Where it is absent, no i386 system call can reach the kernel (or its seccomp
// filter) at all, and the attack pack is told so (it would die at its first int 0x80).
inline bool kernel_has_ia32_entry() {
  static const bool has = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      (void)::signal(SIGSEGV, SIG_DFL);  // the kernel's action, not a sanitizer's handler
      long ret = 0;
      asm volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");  // i386 getpid
      ::_exit(ret > 0 ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return true;  // unknown: expect the entry
    return !(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  }();
  return has;
}
// The attack pack's arguments for a group that makes i386 calls, and what those cases say.
inline std::vector<std::string> with_ia32_note(std::vector<std::string> group_and_args) {
  if (!kernel_has_ia32_entry()) group_and_args.emplace_back("no-ia32");
  return group_and_args;
}
inline std::string i386_refused(const char* refused) {
  return kernel_has_ia32_entry() ? refused : "absent: no int 0x80 entry in this kernel";
}

#define EXPECT_CASE(run, name, expected) EXPECT_EQ((run).get(name), expected) << (name) << "\n" << (run).context()
#define EXPECT_REFUSED(run, name)                                                                 \
  EXPECT_EQ((run).get(name).rfind("errno=", 0), 0u) << (name) << " was not refused: " << (run).get(name) \
                                                     << "\n" << (run).context()


// The largest VmHWM (KiB) of this process's direct children (soyaos; rootless, setpriv
// execs soyaos in place), sampled until `stop`.
inline long sample_children_hwm(const std::atomic<bool>& stop) {
  long best = 0;
  const std::string me = std::to_string(::getpid());
  while (!stop.load()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      std::string stat = read_file(e.path() / "stat");
      auto rp = stat.rfind(')');
      if (rp == std::string::npos) continue;
      std::istringstream rest(stat.substr(rp + 2));
      std::string state, ppid;
      rest >> state >> ppid;
      if (ppid != me) continue;
      std::istringstream status(read_file(e.path() / "status"));
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("VmHWM:", 0) == 0) best = std::max(best, std::stol(line.substr(6)));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return best;
}

}  // namespace soyaos::testing
