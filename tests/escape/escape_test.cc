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
#include "escape_fixture.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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
  auto run = attack(with_ia32_note({"seccomp"}));
  for (int fd = 0; fd < 3; ++fd) {
    for (const char* v : {"tiocsti_fd", "tiocsti_high_fd", "tiocsti_allhigh_fd"}) {
      EXPECT_CASE(run, std::string("seccomp.") + v + std::to_string(fd), "errno=EPERM");
    }
  }
  EXPECT_CASE(run, "seccomp.tioclinux", "errno=EPERM");
  EXPECT_REFUSED(run, "seccomp.dev_tty_open");  // absent: no terminal
  for (const char* c : {"seccomp.x32_getpid", "seccomp.x32_mount", "seccomp.x32_execve", "seccomp.x32_ioctl_tiocsti"}) {
    EXPECT_CASE(run, c, "errno=ENOSYS");
  }
  RecordProperty("ia32_entry", kernel_has_ia32_entry() ? "yes" : "no");
  for (const char* c : {"seccomp.i386_getpid", "seccomp.i386_mount", "seccomp.i386_ptrace", "seccomp.i386_execve",
                        "seccomp.i386_ioctl_tiocsti", "seccomp.i386_fork"}) {
    EXPECT_CASE(run, c, i386_refused("errno=ENOSYS"));
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

// NETLINK_ROUTE is open to the agent for getifaddrs(3) (issue #11, docs/threat-model.md):
// it lists the sandbox's own interfaces, and every request that would change one, an address,
// a route, a rule, a neighbour or a qdisc is refused by the kernel (the agent holds no
// capability over its network namespace). Every other netlink protocol stays refused.
TEST_F(EscapeTest, NetlinkRouteListsTheSandboxAndChangesNothing) {
  auto run = attack({"netlink"});
  ASSERT_EQ(run.get("group.end"), "ok") << run.context();
  // Only the sandbox's own interfaces, the same before and after every attempt.
  EXPECT_CASE(run, "netlink.getlink_dump", "ok lo:up,soyaos0:up,soyaos1:up");
  EXPECT_CASE(run, "netlink.getlink_after", "ok lo:up,soyaos0:up,soyaos1:up");
  EXPECT_CASE(run, "netlink.getifaddrs", "ok lo,soyaos0,soyaos1");
  for (const char* c : {"netlink.newaddr", "netlink.deladdr", "netlink.newroute", "netlink.delroute",
                        "netlink.setlink_lo_down", "netlink.newlink_dummy", "netlink.dellink_lo", "netlink.newrule",
                        "netlink.newneigh", "netlink.newqdisc"}) {
    EXPECT_CASE(run, c, "errno=EPERM");
  }
  for (const char* c : {"netlink.netfilter", "netlink.sock_diag", "netlink.audit", "netlink.uevent", "netlink.generic",
                        "netlink.netfilter_high", "netlink.route_stream"}) {
    EXPECT_CASE(run, c, "errno=EAFNOSUPPORT");
  }
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
}

TEST_F(EscapeTest, SyscallSweepReachesNoDeniedFamily) {
  auto run = attack(with_ia32_note({"sweep"}));
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
      {447, "memfd_secret"}, {448, "process_mrelease"}, {450, "set_mempolicy_home_node"}, {451, "cachestat"},
      {453, "map_shadow_stack"}, {454, "futex_wake"}, {455, "futex_wait"}, {456, "futex_requeue"},
      {457, "statmount"}, {458, "listmount"}, {459, "lsm_get_self_attr"}, {460, "lsm_set_self_attr"},
      {461, "lsm_list_modules"}, {462, "mseal"}, {467, "open_tree_attr"}, {29, "shmget"}, {68, "msgget"}, {64, "semget"}, {139, "sysfs"}, {136, "ustat"},
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
  // (fchmodat2 452, setxattrat 463, removexattrat 466 and file_setattr 469 are observed like
  // their older forms; getxattrat 464, listxattrat 465 and file_getattr 468 are lookups.)
  // Nothing at all in 0..469 may have succeeded that hands out a new privilege: report
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
  EXPECT_CASE(run, "sweep.i386_all", i386_refused("ok bad="));
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
  // sysinfo(2) and what glibc derives from it: the agent's memory limit (default 1Gi, below
  // this host's RAM), no swap, one process — not the host's RAM or task count.
  EXPECT_CASE(run, "info.sysinfo", "ok total=1073741824 free_le_total=1 swap=0 procs=1 uptime_pos=1");
  EXPECT_CASE(run, "info.sysinfo_bad_pointer", "errno=EFAULT");
  EXPECT_CASE(run, "info.phys_pages", "ok 1073741824");
  // pid 1's environment holds no secret of the operator's (or cannot be read: as safe).
  if (const std::string environ1 = run.get("info.environ_pid1"); environ1.rfind("errno=", 0) != 0) {
    ASSERT_EQ(environ1.rfind("ok ", 0), 0u) << environ1;
    EXPECT_EQ(probe_base64(environ1.substr(3)).find(kSecret), std::string::npos);
  }
  // Mount tables name no host path: not the operator's home, not the source/build tree,
  // not the temporary directory that holds the pack and the canaries. (Refusing to show
  // the tables at all is as safe.)
  for (const char* table : {"info.mountinfo", "info.mounts", "info.mountinfo_openat", "info.mountinfo_fd_path",
                            "info.mountinfo_thread_self", "info.mountinfo_task", "info.mountinfo_root",
                            "info.mountinfo_slashes", "info.mountinfo_symlink", "info.mountinfo_toctou"}) {
    std::string r = run.get(table);
    if (r.rfind("errno=", 0) == 0) continue;
    ASSERT_EQ(r.rfind("ok ", 0), 0u) << table << ": " << r;
    std::string text = probe_base64(r.substr(3));
    for (const std::string& host : {std::string("/root"), std::string("/home"), std::string("/work/"),
                                    dir_.path().string(), dir_.path().filename().string()}) {
      EXPECT_EQ(text.find(host), std::string::npos) << table << " shows the host path " << host << ":\n" << text;
    }
  }
  // Own cgroup namespace: every hierarchy is at its root.
  std::string r = run.get("info.cgroup");
  ASSERT_EQ(r.rfind("ok ", 0), 0u) << r;
  std::istringstream cg(probe_base64(r.substr(3)));
  for (std::string line; std::getline(cg, line);) {
    EXPECT_EQ(line.substr(line.rfind(':')), ":/") << line;
  }
  RecordProperty("root_listing", run.get("info.root_listing"));
  RecordProperty("uid_map", run.get("info.uid_map"));
}

}  // namespace
}  // namespace soyaos::testing
