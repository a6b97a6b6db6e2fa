// `soyaos doctor`: proves, by trying each one, that every layer the Comet needs works on
// this host (C1), then runs a real Comet end to end. Exit 0 when all are in force.
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "comet/cgroup.h"
#include "comet/landlock.h"
#include "comet/network.h"
#include "common/text.h"
#include "supervisor/run.h"

namespace soyaos::cli {
namespace {

struct Probe {
  bool ok = false;
  std::string detail;
};

// Runs `fn` in a forked child; the child's exit status 0 means the layer works.
Probe in_child(const std::function<int()>& fn, const std::string& ok_detail) {
  pid_t pid = ::fork();
  if (pid < 0) return {false, "fork failed"};
  if (pid == 0) ::_exit(fn());
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {true, ok_detail};
  return {false, "failed with errno " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + " (" +
                     Error{WIFEXITED(status) ? WEXITSTATUS(status) : 0, "probe"}.describe() + ")"};
}

int try_unshare(int flags) {
  if (::unshare(CLONE_NEWUSER) != 0) return errno;
  if (flags != 0 && ::unshare(flags) != 0) return errno;
  return 0;
}

Probe probe_seccomp() {
  return in_child(
      [] {
        unsigned action = SECCOMP_RET_USER_NOTIF;
        // SAFETY: seccomp(2) query, no filter is installed.
        if (::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) return errno;
        return 0;
      },
      "filters with user notification");
}

// The egress layer (SPEC C6): lo, the veth pair, the nftables ruleset (redirect, NFLOG,
// reject) and the stub/gateway sockets, in a fresh user+network namespace.
Probe probe_network_layer() {
  return in_child(
      [] {
        if (int err = try_unshare(CLONE_NEWNET); err != 0) return err;
        auto fds = comet::setup_sandbox_network(comet::NetworkPlan{});
        if (!fds) {
          print_error("doctor", fds.error());
          return fds.error().err == 0 ? EIO : fds.error().err;
        }
        return 0;
      },
      "nftables redirect + NFLOG + reject, veth, DNS stub and gateway sockets");
}

Probe probe_end_to_end() {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/soyaos-doctor-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return {false, "mkdtemp failed"};
  fs::path dir = tmpl;
  std::error_code ec;
  fs::permissions(dir, fs::perms(0755), ec);
  fs::copy_file("/usr/bin/true", dir / "agent", ec);
  std::ofstream(dir / "soyapack.yaml") << "soyapack: v0\nname: doctor-probe\nversion: 0.0.0\n"
                                          "agent: {runtime: native, entrypoint: agent}\n"
                                          "capabilities:\n  egress: []\n  fs: {read: [/workdir]}\n"
                                          "  determinism_tier: read-only\n";
  supervisor::RunRequest req;
  req.pack_dir = dir;
  req.options.out = dir / "out";
  auto start = std::chrono::steady_clock::now();
  auto report = supervisor::run_pack(req);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  fs::remove_all(dir, ec);
  if (report.exit_code == 0) return {true, "a native agent ran in a Comet with every layer (" + std::to_string(ms) + " ms)"};
  return {false, report.error.empty() ? "exit status " + std::to_string(report.exit_code) : report.error};
}

// Which mechanism bounds each limit of C9 here (docs/sandbox.md "Limits"). A limit bound by
// rlimits only is not a missing layer (runs start, and say so in run_started), but it is
// named, with the reason, so that the operator knows what the host does not bound.
bool print_limit_mechanisms() {
  auto plan = comet::probe_cgroups();
  if (!plan) {
    std::printf("%-18s %-8s %s\n", "cgroups", "MISSING", escape_for_terminal(plan.error().describe()).c_str());
    return false;
  }
  // The cgroup paths come from /proc/self/cgroup: whoever may create cgroups chose their
  // names, so they are escaped like any other text the terminal did not write itself.
  auto where = [](const comet::CgroupController& c) { return escape_for_terminal(c.parent + "/soyaos-RUN_ID"); };
  struct Limit {
    const char* name;
    const comet::CgroupController& ctl;
    const char* cgroup_detail;
    const char* fallback;
  };
  const Limit limits[] = {
      {"memory limit", plan->memory, "heap, shmem, memfd, tmpfs; OOM -> exit 137",
       "rlimit   RLIMIT_DATA only: shared memory, memfd and tmpfs pages are NOT bounded"},
      {"pids limit", plan->pids, "pids.max, threads included", "rlimit   RLIMIT_NPROC in the sandbox's user namespace"},
      {"cpu weight", plan->cpu, "half a default task's weight", "none     no CPU weight: an agent competes like any process"},
  };
  for (const auto& l : limits) {
    if (l.ctl.version != comet::CgroupVersion::none) {
      std::printf("%-18s %-8s %s %s (%s)\n", l.name, "cgroup", comet::to_string(l.ctl.version),
                  where(l.ctl).c_str(), l.cgroup_detail);
    } else {
      std::printf("%-18s %s\n", l.name, l.fallback);
    }
  }
  std::printf("%-18s %-8s %s\n", "write quota", "tmpfs", "one tmpfs for every writable path, bytes and inodes");
  if (!plan->why_not.empty()) std::printf("%-18s %-8s %s\n", "no cgroup because", "", escape_for_terminal(plan->why_not).c_str());
  return true;
}

void doctor(CliContext& ctx) {
  struct Row {
    const char* layer;
    Probe probe;
  };
  std::string max_ns = "?";
  std::ifstream("/proc/sys/user/max_user_namespaces") >> max_ns;
  int abi = comet::landlock_abi();
  Row rows[] = {
      {"user namespace", in_child([] { return try_unshare(0); }, "max_user_namespaces=" + max_ns)},
      {"mount namespace", in_child([] { return try_unshare(CLONE_NEWNS); }, "")},
      {"pid namespace", in_child([] { return try_unshare(CLONE_NEWPID); }, "")},
      {"ipc namespace", in_child([] { return try_unshare(CLONE_NEWIPC); }, "")},
      {"uts namespace", in_child([] { return try_unshare(CLONE_NEWUTS); }, "")},
      {"network namespace", in_child([] { return try_unshare(CLONE_NEWNET); }, "")},
      {"cgroup namespace", in_child([] { return try_unshare(CLONE_NEWCGROUP); }, "")},
      {"egress layer", probe_network_layer()},
      {"landlock", {abi >= 1, abi >= 1 ? "ABI " + std::to_string(abi) : "not available (kernel or boot lsm= list)"}},
      {"seccomp", probe_seccomp()},
      {"comet", probe_end_to_end()},
  };
  bool all = true;
  for (const auto& r : rows) {
    std::printf("%-18s %-8s %s\n", r.layer, r.probe.ok ? "ok" : "MISSING", escape_for_terminal(r.probe.detail).c_str());
    all = all && r.probe.ok;
  }
  all = print_limit_mechanisms() && all;
  std::printf(all ? "every layer is in force: soyaos run can start Comets here\n"
                  : "a layer is missing: soyaos run will refuse to start (exit 125)\n");
  ctx.exit_code = all ? 0 : 1;
}

}  // namespace

void register_doctor_command(Command app, CliContext& ctx) {
  auto cmd = app.add_subcommand("doctor", "Probe every sandbox layer on this host and report its status");
  cmd.callback([&ctx] { doctor(ctx); });
}

}  // namespace soyaos::cli
