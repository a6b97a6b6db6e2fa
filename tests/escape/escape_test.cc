// Escape suite (issue #7, non-network classes): hostile programs run INSIDE real Comets
// (tests/escape/packs/attack/attack.py, one Comet per attack group), and the host checks
// that nothing reached outside. Every test, whatever it attacks, ends with the host-side
// canaries (TearDown): a secret file outside the pack unread (atime) and unmodified, a
// host directory still empty, a host process still alive. Per case, the errno the agent
// saw is compared with SPEC.md C2-C9 / docs/sandbox.md; where a run must report
// violations, the capability_violation events and exit 3 are checked too.
// ctest runs every test twice: as root and (prefix `rootless.`) as nobody.
//
// A case that fails here is a gap in the Comet: the assertion states the SAFE outcome and
// must not be loosened to make it pass.
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
#include <ifaddrs.h>
#include <net/if.h>
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

#include "harness.h"

namespace soyaos::testing {
namespace {

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

std::string sha16(const std::string& data) {
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

std::string base64_decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    auto pos = chars.find(c);
    if (pos == std::string::npos) break;
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
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

#define EXPECT_CASE(run, name, expected) EXPECT_EQ((run).get(name), expected) << (name) << "\n" << (run).context()
#define EXPECT_REFUSED(run, name)                                                                 \
  EXPECT_EQ((run).get(name).rfind("errno=", 0), 0u) << (name) << " was not refused: " << (run).get(name) \
                                                     << "\n" << (run).context()

// ---- exec (C3) ---------------------------------------------------------------------------

TEST_F(EscapeTest, ExecAndProcessCreationAreAllRefused) {
  auto run = attack({"exec"});
  for (const char* c : {"exec.subprocess", "exec.posix_spawn", "exec.os_fork", "exec.raw_fork", "exec.raw_vfork",
                        "exec.clone_sigchld", "exec.clone_vm_vfork", "exec.clone_thread_bit_high",
                        "exec.clone_thread_newuser"}) {
    EXPECT_CASE(run, c, "errno=EPERM");
  }
  EXPECT_CASE(run, "exec.clone3", "errno=ENOSYS");
  for (const char* c : {"exec.memfd_execveat", "exec.memfd_fexecve", "exec.proc_self_fd", "exec.proc_self_exe",
                        "exec.ld_so", "exec.execveat_dirfd", "exec.shebang_in_out", "exec.copied_interpreter",
                        "exec.from_thread"}) {
    EXPECT_CASE(run, c, "errno=EACCES");
  }
  EXPECT_REFUSED(run, "exec.null_path");
  EXPECT_EQ(run.get("exec.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_CASE(run, "group.end", "ok");
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  // Every refused exec and process is a reported violation (surface exec).
  EXPECT_GE(run.violations("exec").size(), 17u) << run.context();
  for (const auto& v : run.violations("exec")) {
    EXPECT_TRUE(v["data"]["errno"] == "EACCES" || v["data"]["errno"] == "EPERM") << v.dump();
  }
  // The dropped script and the copied interpreter reach the host as inert data.
  expect_out_is_inert(16u << 20);
}

// ---- seccomp (C5) ------------------------------------------------------------------------

TEST_F(EscapeTest, SeccompBypassesAreRefused) {
  auto run = attack({"seccomp"});
  for (int fd = 0; fd < 3; ++fd) {
    for (const char* v : {"tiocsti_fd", "tiocsti_high_fd", "tiocsti_allhigh_fd"}) {
      EXPECT_CASE(run, std::string("seccomp.") + v + std::to_string(fd), "errno=EPERM");
    }
  }
  EXPECT_CASE(run, "seccomp.tioclinux", "errno=EPERM");
  EXPECT_REFUSED(run, "seccomp.dev_tty_open");  // absent: no terminal
  for (const char* c : {"seccomp.x32_getpid", "seccomp.x32_mount", "seccomp.x32_execve", "seccomp.x32_ioctl_tiocsti",
                        "seccomp.i386_getpid", "seccomp.i386_mount", "seccomp.i386_ptrace", "seccomp.i386_execve",
                        "seccomp.i386_ioctl_tiocsti", "seccomp.i386_fork"}) {
    EXPECT_CASE(run, c, "errno=ENOSYS");
  }
  for (const char* c : {"seccomp.filter_new_listener", "seccomp.filter_tsync", "seccomp.filter_plain",
                        "seccomp.get_notif_sizes", "seccomp.prctl_set_seccomp", "seccomp.prctl_set_seccomp_high",
                        "seccomp.personality_read_implies_exec", "seccomp.personality_rie_high",
                        "seccomp.pidfd_open_1", "seccomp.pidfd_getfd", "seccomp.ptrace_attach_1",
                        "seccomp.ptrace_seize_1", "seccomp.ptrace_traceme", "seccomp.unshare_user",
                        "seccomp.unshare_zero", "seccomp.setns", "seccomp.socket_raw_inet", "seccomp.seccomp_strict"}) {
    EXPECT_CASE(run, c, "errno=EPERM");
  }
  for (const char* c : {"seccomp.socket_netlink", "seccomp.socket_packet", "seccomp.socket_netlink_high"}) {
    EXPECT_CASE(run, c, "errno=EAFNOSUPPORT");
  }
  EXPECT_CASE(run, "seccomp.personality_query", "ok 0");
  // Raising a hard limit: python reports the kernel's EPERM as ValueError.
  EXPECT_TRUE(run.get("seccomp.setrlimit_nofile_raise") == "error=ValueError" ||
              run.get("seccomp.setrlimit_nofile_raise") == "errno=EPERM")
      << run.get("seccomp.setrlimit_nofile_raise");
  // process_vm_writev on itself reaches no other process either way; docs/seccomp.md lists
  // the whole process_vm_* family as EPERM.
  EXPECT_CASE(run, "seccomp.process_vm_writev_self", "errno=EPERM");
  EXPECT_EQ(run.get("seccomp.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_CASE(run, "group.end", "ok");
}

TEST_F(EscapeTest, SyscallSweepReachesNoDeniedFamily) {
  auto run = attack({"sweep"});
  ASSERT_EQ(run.get("sweep.done"), "ok") << "the sweep did not finish\n" << run.context();
  // docs/seccomp.md "EPERM — listed for the record", plus syscalls newer than the table.
  const std::map<int, const char*> denied = {
      {101, "ptrace"}, {310, "process_vm_readv"}, {311, "process_vm_writev"}, {438, "pidfd_getfd"}, {312, "kcmp"},
      {434, "pidfd_open"}, {424, "pidfd_send_signal"}, {165, "mount"}, {166, "umount2"}, {155, "pivot_root"},
      {161, "chroot"}, {428, "open_tree"}, {429, "move_mount"}, {430, "fsopen"}, {431, "fsconfig"}, {432, "fsmount"},
      {433, "fspick"}, {442, "mount_setattr"}, {321, "bpf"}, {250, "keyctl"}, {248, "add_key"}, {249, "request_key"},
      {298, "perf_event_open"}, {323, "userfaultfd"}, {425, "io_uring_setup"}, {426, "io_uring_enter"},
      {427, "io_uring_register"}, {300, "fanotify_init"}, {212, "lookup_dcookie"}, {206, "io_setup"},
      {207, "io_destroy"}, {208, "io_getevents"}, {209, "io_submit"}, {210, "io_cancel"}, {154, "modify_ldt"},
      {205, "set_thread_area"}, {211, "get_thread_area"}, {237, "mbind"}, {238, "set_mempolicy"},
      {256, "migrate_pages"}, {279, "move_pages"}, {272, "unshare"}, {308, "setns"}, {304, "open_by_handle_at"},
      {303, "name_to_handle_at"}, {246, "kexec_load"}, {320, "kexec_file_load"}, {175, "init_module"},
      {313, "finit_module"}, {176, "delete_module"}, {169, "reboot"}, {167, "swapon"}, {168, "swapoff"},
      {163, "acct"}, {103, "syslog"}, {179, "quotactl"}, {443, "quotactl_fd"}, {153, "vhangup"}, {172, "iopl"},
      {173, "ioperm"}, {180, "nfsservctl"}, {170, "sethostname"}, {171, "setdomainname"}, {105, "setuid"},
      {106, "setgid"}, {113, "setreuid"}, {114, "setregid"}, {117, "setresuid"}, {119, "setresgid"},
      {122, "setfsuid"}, {123, "setfsgid"}, {116, "setgroups"}, {126, "capset"}, {92, "chown"}, {93, "fchown"},
      {94, "lchown"}, {260, "fchownat"}, {188, "setxattr"}, {189, "lsetxattr"}, {190, "fsetxattr"},
      {197, "removexattr"}, {198, "lremovexattr"}, {199, "fremovexattr"}, {440, "process_madvise"},
      {447, "memfd_secret"}, {448, "process_mrelease"}, {452, "fchmodat2"}, {457, "statmount"}, {458, "listmount"},
      {460, "lsm_set_self_attr"}, {29, "shmget"}, {68, "msgget"}, {64, "semget"}, {139, "sysfs"}, {136, "ustat"},
      {134, "uselib"}, {156, "_sysctl"}, {174, "create_module"}, {177, "get_kernel_syms"}, {178, "query_module"},
      {181, "getpmsg"}, {182, "putpmsg"}, {183, "afs_syscall"}, {184, "tuxcall"}, {185, "security"},
      {236, "vserver"}, {135, "personality"}};
  for (const auto& [nr, name] : denied) {
    std::string got = run.get("sweep." + std::to_string(nr));
    if (nr == 135) {
      EXPECT_EQ(got, "ok 0") << "personality(0) = PER_LINUX is allowed";  // the allowed counterpart
      continue;
    }
    EXPECT_EQ(got, "errno=EPERM") << name << " (" << nr << ") with zero arguments is reachable";
  }
  // Nothing at all in 0..460 may have succeeded that hands out a new privilege: report
  // every success for the record (most are harmless queries).
  std::string successes;
  for (const auto& [name, result] : run.cases) {
    if (name.rfind("sweep.", 0) == 0 && result.rfind("ok", 0) == 0 && name.find("_all") == std::string::npos &&
        name != "sweep.done") {
      successes += name.substr(6) + " ";
    }
  }
  RecordProperty("sweep_successes", successes);
  // uretprobe (335) and uprobe (336) are run by the kernel before any seccomp filter
  // (passthrough by design, Linux >= 6.11/6.16); outside a uprobe trampoline they only
  // answer SIGILL / ENXIO. Recorded, see docs/threat-model.md.
  RecordProperty("uretprobe_335", run.get("sweep.335"));
  RecordProperty("uprobe_336", run.get("sweep.336"));
  EXPECT_EQ(run.get("sweep.336").rfind("errno=", 0), 0u) << run.get("sweep.336");
  EXPECT_CASE(run, "sweep.x32_all", "ok bad=");
  EXPECT_CASE(run, "sweep.i386_all", "ok bad=");
  EXPECT_CASE(run, "group.end", "ok");
}

// ---- the observer ------------------------------------------------------------------------

TEST_F(EscapeTest, ObserverTocTouNeverReachesHostContent) {
  auto run = attack({"observer", canary_.string(), (canary_dir_ / "empty").string()});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  std::string attack_py = run.get("observer.attack_py").substr(3);
  std::string sandbox_passwd = run.get("observer.sandbox_passwd").substr(3);
  std::string host_passwd = sha16(read_file("/etc/passwd"));
  EXPECT_EQ(attack_py, sha16(read_file(pack_ / "attack.py")));
  EXPECT_NE(sandbox_passwd, host_passwd) << "the sandbox's /etc/passwd is the host's";
  auto digests_of = [&](const std::string& name) {
    std::string r = run.get(name);
    auto pos = r.find("digests=");
    std::set<std::string> out;
    if (pos == std::string::npos) return out;
    std::istringstream ss(r.substr(pos + 8));
    for (std::string d; std::getline(ss, d, ',');) out.insert(d);
    return out;
  };
  auto p = digests_of("observer.toctou_passwd");
  EXPECT_FALSE(p.empty()) << run.get("observer.toctou_passwd");
  for (const auto& d : p) {
    EXPECT_NE(d, host_passwd) << "the host's /etc/passwd was read through the TOCTOU race";
    EXPECT_TRUE(d == attack_py || d == sandbox_passwd) << d;
  }
  std::string canary_sha = sha16(canary_content_);
  for (const char* name : {"observer.toctou_canary", "observer.toctou_proc_root"}) {
    for (const auto& d : digests_of(name)) {
      EXPECT_NE(d, canary_sha) << "the host canary was read through the TOCTOU race";
      EXPECT_EQ(d, attack_py) << name;
    }
    EXPECT_NE(run.get(name).find("failed="), std::string::npos) << run.get(name);
  }
  // The racing writes only ever created files in /workdir/out (the host directory is
  // checked empty in TearDown); a set-id creation mode does not survive collection.
  EXPECT_EQ(run.get("observer.toctou_write").rfind("ok", 0), 0u);
  expect_out_is_inert(16u << 20);
  // The refused opens of the canary are violations: the run must end 3 (C8). A reported
  // resource may be a torn mix of the two racing strings (what the agent's memory held when
  // the observer read it); every one was a refusal, never an access.
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  EXPECT_FALSE(run.violations("fs").empty());
  for (const auto& v : run.of_type("capability_violation")) {
    std::string e = v["data"].value("errno", "");
    EXPECT_TRUE(e == "ENOENT" || e == "EACCES") << v.dump();
  }
}

TEST_F(EscapeTest, ObserverSurvivesFloodsSignalsAndExitMidNotification) {
  auto start = std::chrono::steady_clock::now();
  auto run = attack({"observer2"});
  // Paths the observer cannot read are the kernel's to decide (EFAULT), never a hang.
  EXPECT_CASE(run, "observer.open_null", "errno=EFAULT");
  EXPECT_CASE(run, "observer.open_unmapped", "errno=EFAULT");
  EXPECT_CASE(run, "observer.open_kernel_address", "errno=EFAULT");
  EXPECT_CASE(run, "observer.open_page_end", "ok");  // NUL is the page's last byte
  EXPECT_CASE(run, "observer.open_page_end_unterminated", "errno=EFAULT");
  EXPECT_CASE(run, "observer.open_long_path", "errno=ENAMETOOLONG");
  EXPECT_CASE(run, "observer.open_long_dotdots", "ok");
  EXPECT_EQ(run.get("observer.flood_16x625").rfind("ok 0 in", 0), 0u) << run.context();  // 10k, none lost
  EXPECT_EQ(run.get("observer.signal_storm").rfind("ok opens=", 0), 0u) << run.context();
  EXPECT_CASE(run, "observer.short_lived_threads", "ok 400");
  EXPECT_EQ(run.get("observer.exit_mid_notification").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_TRUE(run.of_type("capability_violation").empty()) << run.context();
  ASSERT_FALSE(run.events.empty());
  EXPECT_EQ(run.events.back()["type"], "run_finished");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
}

// ---- filesystem (C2) --------------------------------------------------------------------

TEST_F(EscapeTest, FilesystemEscapesAreRefusedAndOutIsInert) {
  auto run = attack({"fs", canary_.string(), (canary_dir_ / "empty").string()});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  // No supervisor fd (nothing but 0-2 and listdir's own fd; nothing live in 3..1024).
  EXPECT_CASE(run, "fs.fd_scan", "ok listed=0,1,2,3 live=");
  EXPECT_CASE(run, "fs.read_host_canary", "errno=ENOENT");
  EXPECT_CASE(run, "fs.proc_root_canary", "errno=ENOENT");
  EXPECT_CASE(run, "fs.openat_dotdot_from_out", "errno=ENOENT");
  EXPECT_CASE(run, "fs.proc_self_cwd_canary", "errno=ENOENT");
  EXPECT_CASE(run, "fs.proc_fd_dir_canary", "errno=ENOENT");
  EXPECT_REFUSED(run, "fs.write_host_dir");
  // Writing the interpreter or its libraries: EACCES, never EROFS (C2), never opened.
  for (const char* c : {"fs.write_proc_self_exe", "fs.rdwr_proc_self_exe", "fs.write_libc", "fs.write_python_lib",
                        "fs.truncate_libc", "fs.mmap_shared_write_libc"}) {
    EXPECT_CASE(run, c, "errno=EACCES");
  }
  for (const char* c : {"fs.umount_workdir", "fs.umount_root", "fs.mount_tmpfs", "fs.mount_bind_remount_rw",
                        "fs.open_tree", "fs.chroot", "fs.open_by_handle_at", "fs.open_by_handle_forged",
                        "fs.setuid_chmod", "fs.setgid_chmod", "fs.setuid_chmod_high", "fs.setuid_fchmodat2",
                        "fs.setxattr_caps"}) {
    EXPECT_CASE(run, c, "errno=EPERM");
  }
  EXPECT_CASE(run, "fs.link_pack_into_out", "errno=EXDEV");
  EXPECT_CASE(run, "fs.link_python_into_out", "errno=EXDEV");
  EXPECT_CASE(run, "fs.rename_out_to_pack", "errno=EACCES");
  EXPECT_REFUSED(run, "fs.rename_out_itself");
  EXPECT_REFUSED(run, "fs.proc_sys_write");
  EXPECT_REFUSED(run, "fs.proc_sysrq");
  EXPECT_CASE(run, "fs.sys_exists", "ok False");
  EXPECT_REFUSED(run, "fs.mknod_dev_null");
  EXPECT_REFUSED(run, "fs.mknod_block");
  EXPECT_CASE(run, "fs.deep_dirs", "ok 600");
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  // The violations name what the agent tried (C8): the host canary (read, ENOENT), the
  // interpreter behind /proc/self/exe and libc (write, EACCES).
  auto has = [&](const std::string& resource, const std::string& access, const std::string& err) {
    for (const auto& v : run.violations("fs")) {
      const auto& d = v["data"];
      if (d.value("resource", "") == resource && d.value("access", "") == access && d.value("errno", "") == err) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has(canary_.string(), "read", "ENOENT")) << run.output.err;
  EXPECT_TRUE(has((canary_dir_ / "empty" / "pwned").string(), "write", "EACCES")) << run.output.err;
  EXPECT_TRUE(has("/usr/bin/python3.11", "write", "EACCES")) << run.output.err;
  EXPECT_TRUE(has("/usr/lib/x86_64-linux-gnu/libc.so.6", "write", "EACCES")) << run.output.err;
  EXPECT_TRUE(has("/workdir/mv", "write", "EACCES")) << run.output.err;
  // Host side: traps left in /workdir/out arrive as nothing or as inert regular files;
  // 13 hard links to one 3 MiB file do not multiply past the 16 MiB quota.
  expect_out_is_inert(16u << 20);
  for (const char* name : {"fifo", "sock", "canary_link", "pw_link", "up", "devnull", "vda", "sparse", "hl", "hl2"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(out_dir() / name))) << name << " reached the host";
  }
}

// ---- IPC and signals (C5) ----------------------------------------------------------------

TEST_F(EscapeTest, HostIpcIsUnreachable) {
  std::string abstract = "soyaos-escape-" + std::to_string(::getpid());
  int abs_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(abs_fd, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, abstract.data(), abstract.size());
  auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  ASSERT_EQ(::bind(abs_fd, reinterpret_cast<sockaddr*>(&a), alen), 0);
  ASSERT_EQ(::listen(abs_fd, 8), 0);
  std::string path = "/tmp/soyaos-escape-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  int path_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un p{};
  p.sun_family = AF_UNIX;
  std::strncpy(p.sun_path, path.c_str(), sizeof p.sun_path - 1);
  ASSERT_EQ(::bind(path_fd, reinterpret_cast<sockaddr*>(&p), sizeof p), 0);
  ::chmod(path.c_str(), 0777);
  ASSERT_EQ(::listen(path_fd, 8), 0);
  key_t key = static_cast<key_t>(0x5E5C0000 | (::getpid() & 0xffff));
  int shm = ::shmget(key, 4096, IPC_CREAT | 0666);
  int msq = ::msgget(key, IPC_CREAT | 0666);
  int sem = ::semget(key, 1, IPC_CREAT | 0666);
  ASSERT_GE(shm, 0);
  ASSERT_GE(msq, 0);
  ASSERT_GE(sem, 0);

  char keybuf[32];
  std::snprintf(keybuf, sizeof keybuf, "0x%x", static_cast<unsigned>(key));
  auto run = attack({"ipc", abstract, path, std::to_string(host_process_), keybuf});

  EXPECT_REFUSED(run, "ipc.abstract_socket");
  EXPECT_REFUSED(run, "ipc.pathname_socket");
  EXPECT_CASE(run, "ipc.tmp_listing", "errno=ENOENT");
  EXPECT_CASE(run, "ipc.kill_host_pid", "errno=ESRCH");
  EXPECT_CASE(run, "ipc.kill_host_pid_sig0", "errno=ESRCH");
  EXPECT_REFUSED(run, "ipc.pidfd_host_pid");
  EXPECT_CASE(run, "ipc.proc_host_pid", "errno=ENOENT");
  for (const char* c : {"ipc.shmget", "ipc.msgget", "ipc.semget", "ipc.shm_stat_0", "ipc.mq_open", "ipc.dev_shm"}) {
    EXPECT_REFUSED(run, c);
  }
  EXPECT_EQ(run.get("ipc.alive").rfind("ok", 0), 0u) << run.context();
  // Host side: nobody connected; the IPC objects are untouched.
  EXPECT_LT(::accept(abs_fd, nullptr, nullptr), 0) << "a connection reached the host abstract socket";
  EXPECT_LT(::accept(path_fd, nullptr, nullptr), 0) << "a connection reached the host pathname socket";
  shmid_ds sds{};
  ASSERT_EQ(::shmctl(shm, IPC_STAT, &sds), 0);
  EXPECT_EQ(sds.shm_nattch, 0u);
  EXPECT_EQ(sds.shm_lpid, 0);
  msqid_ds mds{};
  ASSERT_EQ(::msgctl(msq, IPC_STAT, &mds), 0);
  EXPECT_EQ(mds.msg_qnum, 0u);
  ::shmctl(shm, IPC_RMID, nullptr);
  ::msgctl(msq, IPC_RMID, nullptr);
  ::semctl(sem, 0, IPC_RMID);
  ::close(abs_fd);
  ::close(path_fd);
  ::unlink(path.c_str());
}

// ---- resources (C9) ----------------------------------------------------------------------

TEST_F(EscapeTest, ThreadBombStopsAtPids) {
  set_resources("{pids: 16, timeout: 30s}");
  auto run = attack({"resources", "threads"});
  EXPECT_CASE(run, "res.thread_bomb", "error=RuntimeError");
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
}

TEST_F(EscapeTest, MemoryBeyondTheLimitFails) {
  set_resources("{memory: 128Mi, timeout: 30s}");
  auto run = attack({"resources", "memory"});
  EXPECT_CASE(run, "res.alloc_512", "error=MemoryError");
  EXPECT_CASE(run, "res.alloc_32", "ok 32");
  EXPECT_CASE(run, "res.mmap_private_512", "errno=ENOMEM");
  // Shared anonymous memory is shmem, outside RLIMIT_DATA: the run's memory cgroup kills
  // it (137). Rootless on cgroup v1 there is no cgroup: documented in docs/threat-model.md
  // ("Memory accounting"), recorded here; tests/escape/limits_test.cc has every kind.
  if (rootless_mode()) {
    RecordProperty("shared_anon_256_over_128Mi", run.get("res.shared_anon_256"));
    EXPECT_CASE(run, "group.end", "ok");
  } else {
    EXPECT_CASE(run, "res.shared_anon_256", "<missing>");
    EXPECT_EQ(run.output.exit_code, 137) << run.context();
  }
}

TEST_F(EscapeTest, FillingOutPastTheQuotaIsEnospc) {
  set_resources("{write_quota: 4Mi, timeout: 30s}");
  auto run = attack({"resources", "quota"});
  EXPECT_CASE(run, "res.fill_past_quota", "errno=ENOSPC");
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  expect_out_is_inert(4u << 20);
}

TEST_F(EscapeTest, FdExhaustionIsEmfile) {
  auto run = attack({"resources", "fds"});
  std::string r = run.get("res.fd_exhaust");
  ASSERT_EQ(r.rfind("ok EMFILE after ", 0), 0u) << r;
  EXPECT_LE(std::stoi(r.substr(17)), 1024);
  EXPECT_TRUE(run.get("res.raise_nofile") == "error=ValueError" || run.get("res.raise_nofile") == "errno=EPERM")
      << run.get("res.raise_nofile");
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
}

// The largest VmHWM (KiB) of this process's direct children (soyaos; rootless, setpriv
// execs soyaos in place), sampled until `stop`.
long sample_children_hwm(const std::atomic<bool>& stop) {
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

TEST_F(EscapeTest, OutputFloodFinishesWithBoundedSupervisorMemory) {
  std::atomic<bool> stop{false};
  long hwm = 0;
  std::thread sampler([&] { hwm = sample_children_hwm(stop); });
  auto start = std::chrono::steady_clock::now();
  auto run = attack({"resources", "flood", "64"});
  stop = true;
  sampler.join();
  EXPECT_EQ(run.output.exit_code, 0) << run.output.err.substr(0, 2000);
  EXPECT_CASE(run, "group.end", "ok");
  EXPECT_GE(run.output.out.size(), 64u << 20);  // passed through, not dropped
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  // The supervisor relays 72 MiB; it must not have buffered it.
  EXPECT_GT(hwm, 0) << "the supervisor process was never sampled";
  // Under AddressSanitizer the allocator's quarantine and shadow memory alone exceed the
  // bound; buffering 72 MiB would still show as more than 72 MiB above it.
#if defined(__SANITIZE_ADDRESS__)
  constexpr long kBoundKib = 160 * 1024;
#else
  constexpr long kBoundKib = 40 * 1024;
#endif
  EXPECT_LT(hwm, kBoundKib) << "soyaos peaked at " << hwm << " KiB while relaying the agent's output";
  RecordProperty("soyaos_vmhwm_kib", std::to_string(hwm));
}

TEST_F(EscapeTest, CrashWritesNoCoreDump) {
  auto run = attack({"resources", "core"});
  EXPECT_CASE(run, "res.core_limit", "ok (0, 0)");
  EXPECT_TRUE(run.get("res.raise_core") == "error=ValueError" || run.get("res.raise_core") == "errno=EPERM")
      << run.get("res.raise_core");
  // The agent is PID 1 of its namespace, so its own SIGABRT is ignored and glibc's abort()
  // ends in SIGSEGV: either way the agent died of a signal and dumped nothing.
  EXPECT_TRUE(run.output.exit_code == 128 + SIGABRT || run.output.exit_code == 128 + SIGSEGV) << run.context();
  for (const fs::path& where : {out_dir(), pack_, dir_.path()}) {
    if (!fs::exists(where)) continue;
    for (const auto& e : fs::recursive_directory_iterator(where)) {
      EXPECT_NE(e.path().filename().string().rfind("core", 0), 0u) << "core dump on the host: " << e.path();
    }
  }
}

// ---- information (C5) --------------------------------------------------------------------

TEST_F(EscapeTest, NothingAboutTheHostLeaks) {
  auto run = attack({"info"});
  EXPECT_CASE(run, "info.env", "ok ESCAPE_MANIFEST_VAR,HOME,LANG,PATH,TZ");
  EXPECT_CASE(run, "info.manifest_env", "ok declared");
  EXPECT_CASE(run, "info.kallsyms", "errno=ENOENT");
  EXPECT_CASE(run, "info.modules", "errno=ENOENT");
  EXPECT_CASE(run, "info.kcore", "errno=ENOENT");
  EXPECT_CASE(run, "info.hostname", "ok comet");
  EXPECT_CASE(run, "info.status",
              "ok CapPrm:0000000000000000 CapEff:0000000000000000 CapBnd:0000000000000000 NoNewPrivs:1 Seccomp:2");
  EXPECT_CASE(run, "info.proc_listing", "ok 1,self,thread-self");
  EXPECT_CASE(run, "info.sys", "errno=ENOENT");
  std::string environ1 = base64_decode(run.get("info.environ_pid1").substr(3));
  EXPECT_EQ(environ1.find(kSecret), std::string::npos);
  // Mount tables name no host path: not the operator's home, not the source/build tree,
  // not the temporary directory that holds the pack and the canaries. (Refusing to show
  // the tables at all is as safe.)
  for (const char* table : {"info.mountinfo", "info.mounts", "info.mountinfo_openat", "info.mountinfo_fd_path",
                            "info.mountinfo_thread_self", "info.mountinfo_task", "info.mountinfo_root",
                            "info.mountinfo_slashes", "info.mountinfo_symlink", "info.mountinfo_toctou"}) {
    std::string r = run.get(table);
    if (r.rfind("errno=", 0) == 0) continue;
    ASSERT_EQ(r.rfind("ok ", 0), 0u) << table << ": " << r;
    std::string text = base64_decode(r.substr(3));
    for (const std::string& host : {std::string("/root"), std::string("/home"), std::string("/work/"),
                                    dir_.path().string(), dir_.path().filename().string()}) {
      EXPECT_EQ(text.find(host), std::string::npos) << table << " shows the host path " << host << ":\n" << text;
    }
  }
  // Own cgroup namespace: every hierarchy is at its root.
  std::string r = run.get("info.cgroup");
  ASSERT_EQ(r.rfind("ok ", 0), 0u) << r;
  std::istringstream cg(base64_decode(r.substr(3)));
  for (std::string line; std::getline(cg, line);) {
    EXPECT_EQ(line.substr(line.rfind(':')), ":/") << line;
  }
  RecordProperty("root_listing", run.get("info.root_listing"));
  RecordProperty("uid_map", run.get("info.uid_map"));
}

// ---- network (C6, C7) ---------------------------------------------------------------------
//
// Host-side listeners that must see nothing: TCP on 0.0.0.0 (the host's non-loopback
// address and its loopback), TCP on [::] when the host has IPv6, TCP on 127.0.0.1 behind
// each declared entry (an https entry, an http entry, and a `localhost` tcp entry whose
// upstream answer is the host's loopback: rebinding), a UDP socket on 0.0.0.0 and a host
// abstract unix socket. They are never accepted from during the run: the kernel completes
// any connection into the backlog, so a non-blocking accept() afterwards finds a leak.

class HostListener {
 public:
  HostListener(int family, int type, const char* address) {
    fd_ = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      ::inet_pton(AF_INET6, address, &a->sin6_addr);
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      ::inet_pton(AF_INET, address, &a->sin_addr);
      len = sizeof *a;
    }
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || (type == SOCK_STREAM && ::listen(fd_, 64) != 0)) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    len = sizeof ss;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    stream_ = type == SOCK_STREAM;
  }
  ~HostListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  HostListener(const HostListener&) = delete;
  HostListener& operator=(const HostListener&) = delete;
  [[nodiscard]] bool ok() const { return fd_ >= 0; }
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] std::string port_s() const { return std::to_string(port_); }
  // What reached it, if anything ("" = nothing).
  [[nodiscard]] std::string reached() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stream_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) return "";
      char buf[256] = {};
      ssize_t n = ::recv(c, buf, sizeof buf - 1, 0);
      ::close(c);
      return "a connection" + (n > 0 ? std::string(": ") + std::string(buf, static_cast<size_t>(n)) : "");
    }
    char buf[256] = {};
    ssize_t n = ::recv(fd_, buf, sizeof buf - 1, MSG_DONTWAIT);
    return n >= 0 ? "a datagram: " + std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  bool stream_ = true;
};

// The host's first non-loopback IPv4 address that is up ("" when none).
std::string host_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    out = text;
    break;
  }
  ::freeifaddrs(list);
  return out;
}

class EscapeNetworkTest : public EscapeTest {
 protected:
  void SetUp() override {
    EscapeTest::SetUp();
    if (IsSkipped()) return;
    host_ip_ = host_ipv4();
    if (host_ip_.empty()) host_ip_ = "127.0.0.1";
    auto home = dir_.path() / "home";
    fs::create_directories(home);
    fs::permissions(home, fs::perms::all);
    extra_env_["SOYAOS_HOME"] = home.string();
    abstract_ = "soyaos-escape-net-" + std::to_string(::getpid());
    abs_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(abs_fd_, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, abstract_.data(), abstract_.size());
    auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_.size());
    ASSERT_EQ(::bind(abs_fd_, reinterpret_cast<sockaddr*>(&a), alen), 0);
    ASSERT_EQ(::listen(abs_fd_, 8), 0);
    for (auto* l : {&any_, &https_, &http_, &localhost_, &udp_}) ASSERT_TRUE(l->ok());
  }

  void TearDown() override {
    // Nothing reached any host-side listener, whatever the test asserted.
    for (auto [name, l] : std::initializer_list<std::pair<const char*, const HostListener*>>{
             {"TCP 0.0.0.0", &any_}, {"TCP 127.0.0.1 (https entry)", &https_},
             {"TCP 127.0.0.1 (http entry)", &http_}, {"TCP 127.0.0.1 (localhost entry)", &localhost_},
             {"UDP 0.0.0.0", &udp_}, {"TCP [::]", &any6_}}) {
      if (l->ok()) {
        EXPECT_EQ(l->reached(), "") << "the host listener " << name << " was reached";
      }
    }
    if (abs_fd_ >= 0) {
      EXPECT_LT(::accept(abs_fd_, nullptr, nullptr), 0) << "a connection reached the host abstract socket";
      ::close(abs_fd_);
    }
    EscapeTest::TearDown();
  }

  void set_network(const std::string& egress_yaml, const std::string& tier) {
    dir_.write("pack/soyapack.yaml", "soyapack: v0\nname: escape-attack\nversion: 0.1.0\n"
                                     "agent: {runtime: python3, entrypoint: attack.py}\n"
                                     "capabilities:\n  egress:" + egress_yaml +
                                         "\n  fs: {read: [/workdir], write: [/workdir/out]}\n"
                                         "  determinism_tier: " + tier +
                                         "\nresources: {timeout: 60s, write_quota: 1Mi}\n");
    dir_.write("home/moon.yaml", "dns:\n  hosts:\n    allowed.test: 127.0.0.1\n");
  }

  // A network violation with this resource and errno.
  static bool has_violation(const AttackRun& run, const std::string& resource, const std::string& err) {
    for (const auto& v : run.violations("network")) {
      const auto& d = v["data"];
      if (d.value("resource", "") == resource && d.value("errno", "") == err) return true;
    }
    return false;
  }

  std::string host_ip_;
  std::string abstract_;
  int abs_fd_ = -1;
  HostListener any_{AF_INET, SOCK_STREAM, "0.0.0.0"};
  HostListener any6_{AF_INET6, SOCK_STREAM, "::"};
  HostListener https_{AF_INET, SOCK_STREAM, "127.0.0.1"};
  HostListener http_{AF_INET, SOCK_STREAM, "127.0.0.1"};
  HostListener localhost_{AF_INET, SOCK_STREAM, "127.0.0.1"};
  HostListener udp_{AF_INET, SOCK_DGRAM, "0.0.0.0"};
};

#define EXPECT_RESET(run, name)                                                                          \
  EXPECT_TRUE((run).get(name) == "errno=ECONNRESET" || (run).get(name) == "errno=EPIPE")                   \
      << (name) << " was not reset: " << (run).get(name) << "\n" << (run).context()

TEST_F(EscapeNetworkTest, NetworkEscapesReachNothingOnTheHost) {
  set_network("\n    - {host: allowed.test, port: " + https_.port_s() + ", protocol: https}" +
                  "\n    - {host: allowed.test, port: " + http_.port_s() + ", protocol: http}" +
                  "\n    - {host: localhost, port: " + localhost_.port_s() + ", protocol: tcp}",
              "side-effect");
  const auto start = std::chrono::steady_clock::now();
  auto run = attack({"net", host_ip_, any_.port_s(), https_.port_s(), http_.port_s(), localhost_.port_s(),
                     udp_.port_s(), abstract_});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
  // Refused by the netns's rules: ECONNREFUSED (C6).
  for (const char* c : {"net.v4_host_ip", "net.v4_loopback", "net.v4_loopback_other", "net.v4_zero", "net.v4_public",
                        "net.v4_private_10", "net.v4_private_172", "net.v4_private_192", "net.v4_cgnat",
                        "net.metadata", "net.metadata_v6", "net.sandbox_own_addr", "net.fake_unassigned",
                        "net.v6_loopback", "net.v6_literal", "net.mptcp_host", "net.gateway_direct",
                        "net.gateway_direct_v6", "net.allowed_wrong_port", "net.dns_8888_tcp", "net.doh_1111",
                        "net.dot_1111", "net.doh_v6", "net.fastopen_host", "net.still_refused"}) {
    EXPECT_CASE(run, c, "errno=ECONNREFUSED");
  }
  EXPECT_REFUSED(run, "net.v6_mapped_host");
  EXPECT_REFUSED(run, "net.sctp_host");  // EPROTONOSUPPORT without the module, else refused by the rules
  // Declared host and port, wrong protocol: the gateway resets (C6).
  for (const char* c : {"net.https_plaintext", "net.https_sni_mismatch", "net.https_no_sni", "net.https_sni_suffix",
                        "net.http_host_mismatch", "net.http_duplicate_host", "net.http_tls", "net.http_absolute_uri",
                        "net.http_proxy_header", "net.http_connect", "net.rebind_localhost"}) {
    EXPECT_RESET(run, c);
  }
  // DNS: nothing but A/AAAA for declared names; nothing forwarded.
  for (const char* c : {"net.dns_unlisted", "net.dns_exfil_label", "net.dns_exfil_long", "net.dns_tcp_unlisted"}) {
    EXPECT_CASE(run, c, "ok NXDOMAIN");
  }
  for (const char* c : {"net.dns_txt", "net.dns_any", "net.dns_null", "net.dns_axfr_tcp", "net.dns_tcp_txt"}) {
    EXPECT_CASE(run, c, "ok REFUSED");
  }
  // UDP anywhere but a udp entry: EPERM; sockets and ioctls that need CAP_NET_*: EPERM.
  for (const char* c : {"net.allowed_udp", "net.dns_8888_udp", "net.dns_v6_server", "net.dns_host_resolver",
                        "net.raw_inet", "net.raw_inet6", "net.inet_sock_packet", "net.ioctl_siocaddrt",
                        "net.ioctl_siocsifflags_lo_down", "net.ioctl_siocsifaddr", "net.so_mark",
                        "net.ip_transparent", "net.sendmmsg_host", "net.udp_host", "net.udp_loopback",
                        "net.udplite_host", "net.udp_multicast", "net.udp_broadcast"}) {
    EXPECT_CASE(run, c, "errno=EPERM");
  }
  // Families outside AF_UNIX/AF_INET/AF_INET6: EAFNOSUPPORT (seccomp, C5).
  for (const char* c : {"net.packet_raw", "net.packet_dgram", "net.netlink_route", "net.netlink_netfilter",
                        "net.netlink_sock_diag", "net.vsock", "net.af_alg", "net.socketpair_inet"}) {
    EXPECT_CASE(run, c, "errno=EAFNOSUPPORT");
  }
  for (const char* c : {"net.icmp_ping", "net.icmp6_ping"}) {
    EXPECT_TRUE(run.get(c) == "errno=EACCES" || run.get(c) == "errno=EPERM") << c << ": " << run.get(c);
  }
  EXPECT_REFUSED(run, "net.proc_sys_ip_forward");
  EXPECT_REFUSED(run, "net.abstract_unix");
  EXPECT_EQ(run.get("net.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  // Each attempt is reported (C8) with what the agent saw.
  const std::string any = any_.port_s(), hs = https_.port_s(), ht = http_.port_s(), lh = localhost_.port_s();
  const std::vector<std::pair<std::string, std::string>> expected = {
      {host_ip_ + ":" + any + "/tcp", "ECONNREFUSED"},
      {"127.0.0.1:" + any + "/tcp", "ECONNREFUSED"},
      {"169.254.169.254:80/tcp", "ECONNREFUSED"},
      {"[fd00:ec2::254]:80/tcp", "ECONNREFUSED"},
      {"10.0.0.1:80/tcp", "ECONNREFUSED"},
      {"[::1]:" + any + "/tcp", "ECONNREFUSED"},
      {"127.0.0.1:15001/tcp", "ECONNREFUSED"},
      {"[::1]:15001/tcp", "ECONNREFUSED"},
      {"allowed.test:" + any + "/tcp", "ECONNREFUSED"},
      {"allowed.test:" + hs + "/udp", "EPERM"},
      {"allowed.test:" + hs + "/https", "ECONNRESET"},
      {"allowed.test:" + ht + "/http", "ECONNRESET"},
      {"localhost[127.0.0.1]:" + lh + "/tcp", "ECONNRESET"},
      {"dns:evil.test", "NXDOMAIN"},
      {"dns:6f70657261746f722d736563726574.allowed.test", "NXDOMAIN"},
      {"dns:allowed.test", "REFUSED"},
      {"8.8.8.8:53/udp", "EPERM"},
      {"8.8.8.8:53/tcp", "ECONNREFUSED"},
      {"[2001:4860:4860::8888]:53/udp", "EPERM"},
      {"1.1.1.1:443/tcp", "ECONNREFUSED"},
      {"1.1.1.1:853/tcp", "ECONNREFUSED"},
      {"[2606:4700:4700::1111]:443/tcp", "ECONNREFUSED"},
      {host_ip_ + ":" + udp_.port_s() + "/udp", "EPERM"},
      {"224.0.0.251:5353/udp", "EPERM"},
  };
  for (const auto& [resource, err] : expected) {
    EXPECT_TRUE(has_violation(run, resource, err)) << "no violation " << resource << " " << err << "\n"
                                                   << run.output.err.substr(0, 6000);
  }
  for (const auto& v : run.violations("network")) {
    EXPECT_EQ(v["data"]["pack"], "escape-attack") << v.dump();
    EXPECT_TRUE(v["data"].contains("manifest_entry")) << v.dump();
  }
  EXPECT_GE(run.violations("network").size(), 50u) << run.context();
}

TEST_F(EscapeNetworkTest, EgressStarStillKeepsTheHostOut) {
  set_network(" \"*\"", "unrestricted");
  auto run = attack({"netstar", host_ip_, any_.port_s(), udp_.port_s()});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  // The sandbox's loopback is not redirected: refused by the rules.
  EXPECT_CASE(run, "star.loopback", "errno=ECONNREFUSED");
  EXPECT_CASE(run, "star.v6_loopback", "errno=ECONNREFUSED");
  // The gateway takes the rest and refuses the host's own address, private and metadata
  // ranges and a loopback upstream answer (rebinding): reset, never connected.
  for (const char* c : {"star.host_ip", "star.metadata", "star.private_10", "star.rebind_localhost"}) {
    EXPECT_RESET(run, c);
  }
  EXPECT_CASE(run, "star.udp_host", "errno=EPERM");
  EXPECT_CASE(run, "star.dns_txt", "ok REFUSED");
  EXPECT_EQ(run.get("star.alive").rfind("ok", 0), 0u) << run.context();
  EXPECT_EQ(run.output.exit_code, 3) << run.context();
  EXPECT_TRUE(has_violation(run, host_ip_ + ":" + any_.port_s() + "/tcp", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "169.254.169.254:80/tcp", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, "localhost[127.0.0.1]:" + any_.port_s() + "/tcp", "ECONNRESET")) << run.output.err;
  EXPECT_TRUE(has_violation(run, host_ip_ + ":" + udp_.port_s() + "/udp", "EPERM")) << run.output.err;
}

}  // namespace
}  // namespace soyaos::testing
