// The Comet end to end: the real soyaos binary runs the probe pack (tests/fixtures/probe)
// in a real sandbox. Each denial checks the three things SPEC.md C8 promises: the errno
// the agent saw, the capability_violation event, and exit status 3. Each allowed
// counterpart checks that it works, so the suite cannot pass by denying everything.
// ctest runs every test twice: as root and (prefix `rootless.`) as nobody.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "comet_fixture.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

class CometTest : public CometFixture {
 protected:
  // A denial: errno seen, one violation event with these fields, exit 3.
  void expect_violation(const ProbeRun& run, const std::string& errno_name, const std::string& surface,
                        const std::string& resource, const std::string& access = "") {
    EXPECT_EQ(run.result, "errno=" + errno_name) << run.output.out << run.output.err;
    EXPECT_EQ(run.output.exit_code, 3) << run.output.err;
    auto violations = run.of_type("capability_violation");
    ASSERT_FALSE(violations.empty()) << run.output.err;
    const auto& d = violations.front()["data"];
    EXPECT_EQ(d["surface"], surface);
    EXPECT_EQ(d["resource"], resource);
    EXPECT_EQ(d["errno"], errno_name);
    if (!access.empty()) {
      EXPECT_EQ(d["access"], access);
    }
    EXPECT_TRUE(d.contains("manifest_entry"));
    EXPECT_TRUE(d.contains("syscall"));
    EXPECT_EQ(d["pack"], "comet-probe");
    const auto& e = violations.front();
    EXPECT_EQ(e["specversion"], "1.0");
    EXPECT_EQ(e["subject"], "comet-probe@0.1.0");
    EXPECT_NE(run.output.err.find("capability violation"), std::string::npos);
  }

  // An allowed action: works, no violation, exit 0.
  void expect_allowed(const ProbeRun& run, const std::string& result_prefix = "ok") {
    EXPECT_EQ(run.result.rfind(result_prefix, 0), 0U) << run.result << "\n" << run.output.err;
    EXPECT_EQ(run.output.exit_code, 0) << run.output.err;
    EXPECT_TRUE(run.of_type("capability_violation").empty()) << run.output.err;
  }
};

// ---- filesystem -------------------------------------------------------------------------

TEST_F(CometTest, ReadingEtcShadowIsEnoent) {
  expect_violation(probe({"read", "/etc/shadow"}), "ENOENT", "fs", "/etc/shadow", "read");
}

TEST_F(CometTest, ReadingTheOperatorsHomeIsEnoent) {
  expect_violation(probe({"read", "/root/.bashrc"}), "ENOENT", "fs", "/root/.bashrc", "read");
}

TEST_F(CometTest, ProcOneRootLeadsBackIntoTheSandbox) {
  expect_violation(probe({"read", "/proc/1/root/etc/shadow"}), "ENOENT", "fs", "/etc/shadow", "read");
}

TEST_F(CometTest, ProcSelfCwdDotDotStaysInside) {
  expect_violation(probe({"read", "/proc/self/cwd/../../etc/shadow"}), "ENOENT", "fs", "/etc/shadow", "read");
}

TEST_F(CometTest, MountinfoWouldNameHostPathsAndIsRefused) {
  expect_violation(probe({"read", "/proc/self/mountinfo"}), "ENOENT", "fs", "/proc/self/mountinfo", "read");
  expect_violation(probe({"read", "/proc/1/mounts"}), "ENOENT", "fs", "/proc/1/mounts", "read");
  // procfs is mounted subset=pid: /proc/mounts does not exist at all.
  EXPECT_EQ(probe({"read", "/proc/mounts"}).result, "errno=ENOENT");
}

TEST_F(CometTest, ReadingThePackWorks) {
  expect_allowed(probe({"read", "/workdir/probe.py"}));
}

TEST_F(CometTest, APackInAPrivateDirectoryRunsAsRoot) {
  // As root the agent is host nobody, yet the operator's pack may live under /root (0700):
  // the Comet opens its sources before taking the sandbox's ids.
  if (rootless_mode() || ::geteuid() != 0) GTEST_SKIP() << "root only";
  auto priv = dir_.path() / "private";
  std::filesystem::create_directories(priv);
  std::filesystem::rename(pack_, priv / "pack");
  std::filesystem::permissions(priv, std::filesystem::perms::owner_all);
  pack_ = priv / "pack";
  expect_allowed(probe({"read", "/workdir/probe.py"}));
}

TEST_F(CometTest, ReadingTheRuntimeLayerWorks) {
  expect_allowed(probe({"read", "/usr/lib/python3.11/json/__init__.py"}));
}

TEST_F(CometTest, WritingTheWorkdirIsEacces) {
  auto run = probe({"write", "/workdir/x"});
  expect_violation(run, "EACCES", "fs", "/workdir/x", "write");
  // The closest entry: /workdir is readable, not writable.
  EXPECT_EQ(run.of_type("capability_violation").front()["data"]["manifest_entry"], "capabilities.fs.read[0]");
}

TEST_F(CometTest, WritingEtcIsEaccesNotErofs) {
  expect_violation(probe({"write", "/etc/passwd"}), "EACCES", "fs", "/etc/passwd", "write");
}

TEST_F(CometTest, WritingUndeclaredTmpIsEacces) {
  expect_violation(probe({"write", "/tmp/x"}), "EACCES", "fs", "/tmp/x", "write");
}

TEST_F(CometTest, PrefixesAreWholeComponents) {
  expect_violation(probe({"write", "/workdir/outbox"}), "EACCES", "fs", "/workdir/outbox", "write");
}

TEST_F(CometTest, MetadataWritesOutsideWriteAreEacces) {
  expect_violation(probe({"chmod", "/workdir/probe.py", "777"}), "EACCES", "fs", "/workdir/probe.py", "write");
  expect_violation(probe({"utime", "/usr/bin/python3.11"}), "EACCES", "fs", "/usr/bin/python3.11", "write");
  expect_allowed(probe({"steps", "write:/workdir/out/x", "chmod:/workdir/out/x:600", "utime:/workdir/out/x"}));
}

TEST_F(CometTest, MkdirOutsideWriteIsEacces) {
  expect_violation(probe({"mkdir", "/workdir/newdir"}), "EACCES", "fs", "/workdir/newdir", "write");
}

TEST_F(CometTest, WritingOutIsCollected) {
  expect_allowed(probe({"write", "/workdir/out/result.txt"}));
  EXPECT_EQ(read_file(dir_.path() / "out" / "result.txt"), "x");
}

TEST_F(CometTest, SymlinkInAnInputToAHostFileIsEnoent) {
  // A pack cannot carry such a link (refused before the run, tests/integration/packing_test.cc);
  // operator data can: it resolves in the sandbox's tree, where the host file is not.
  dir_.write("input/data.txt", "x");
  std::filesystem::create_symlink("/etc/hostname", dir_.path() / "input" / "leak");
  expect_violation(probe({"read", "/workdir/inputs/leak"}, {"--input", (dir_.path() / "input").string()}), "ENOENT",
                   "fs", "/etc/hostname", "read");
}

TEST_F(CometTest, SymlinkPlantedInOutIsNotFollowedByCollection) {
  // The agent cannot create a symlink to the host; what it leaves is copied as nothing.
  auto run = probe({"write", "/workdir/out/ok"});
  expect_allowed(run);
  EXPECT_FALSE(std::filesystem::is_symlink(dir_.path() / "out" / "ok"));
}

TEST_F(CometTest, TrapsPlantedInOutAreNotCollected) {
  // A FIFO (would block a naive reader), a symlink to a host file and a 1 TiB sparse file.
  auto run = probe({"steps", "mkfifo:/workdir/out/fifo", "symlink:/etc/passwd:/workdir/out/pw",
                    "sparse:/workdir/out/sparse:1099511627776", "write:/workdir/out/ok"});
  EXPECT_EQ(run.output.exit_code, 0) << run.output.err;
  auto out = dir_.path() / "out";
  EXPECT_EQ(read_file(out / "ok"), "x");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(out / "fifo")));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(out / "pw")));
  EXPECT_FALSE(std::filesystem::exists(out / "sparse"));
  EXPECT_NE(run.output.err.find("symbolic link not collected"), std::string::npos) << run.output.err;
  EXPECT_NE(run.output.err.find("over the write quota"), std::string::npos) << run.output.err;
}

TEST_F(CometTest, HardLinkFromThePackIntoOutFailsExdev) {
  auto run = probe({"link", "/workdir/probe.py", "/workdir/out/p"});
  EXPECT_EQ(run.result, "errno=EXDEV");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "out" / "p"));
}

TEST_F(CometTest, RenameOutOfOutIsEacces) {
  auto run = probe({"steps", "write:/workdir/out/x", "rename:/workdir/out/x:/workdir/y"});
  EXPECT_EQ(run.output.exit_code, 3);
  auto v = run.of_type("capability_violation");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0]["data"]["resource"], "/workdir/y");
  EXPECT_EQ(v[0]["data"]["errno"], "EACCES");
  EXPECT_NE(run.output.out.find("RESULT errno=EACCES"), std::string::npos);
}

TEST_F(CometTest, PidsLimitStopsAThreadBomb) {
  set_resources("{pids: 16}");
  auto run = probe({"thread_bomb", "200"});
  EXPECT_EQ(run.result, "error=RuntimeError") << run.output.out << run.output.err;
  EXPECT_EQ(run.output.exit_code, 0) << run.output.err;  // a limit, not a violation
}

TEST_F(CometTest, MemoryLimitFailsAllocations) {
  set_resources("{memory: 128Mi}");
  EXPECT_EQ(probe({"alloc", "512"}).result, "error=MemoryError");
  EXPECT_EQ(probe({"alloc", "32"}).result, "ok 32");
}

TEST_F(CometTest, WriteQuotaGivesEnospc) {
  auto run = probe({"fill", "/workdir/out/big", "2097152"});  // quota is 1Mi
  EXPECT_EQ(run.result, "errno=ENOSPC");
  EXPECT_EQ(run.output.exit_code, 0);
  // Nothing beyond the quota reaches the host.
  std::error_code ec;
  auto size = std::filesystem::file_size(dir_.path() / "out" / "big", ec);
  if (!ec) {
    EXPECT_LE(size, 1u << 20);
  }
}

// ---- exec and processes -----------------------------------------------------------------

TEST_F(CometTest, ForkIsEperm) {
  auto run = probe({"fork"});
  expect_violation(run, "EPERM", "exec", "process");
}

TEST_F(CometTest, SubprocessIsEperm) {
  expect_violation(probe({"subprocess"}), "EPERM", "exec", "process");
}

TEST_F(CometTest, ExecOfAnotherProgramIsEacces) {
  expect_violation(probe({"exec", "/usr/bin/true"}), "EACCES", "exec", "/usr/bin/true");
}

TEST_F(CometTest, LdSoAsAProgramIsEacces) {
  expect_violation(probe({"exec", "/lib64/ld-linux-x86-64.so.2", "/usr/bin/true"}), "EACCES", "exec",
                   "/lib64/ld-linux-x86-64.so.2");
}

TEST_F(CometTest, MemfdExecIsEacces) {
  auto run = probe({"memfd_exec"});
  EXPECT_EQ(run.result, "errno=EACCES");
  EXPECT_EQ(run.output.exit_code, 3);
  ASSERT_FALSE(run.of_type("capability_violation").empty());
  EXPECT_EQ(run.of_type("capability_violation").front()["data"]["surface"], "exec");
}

TEST_F(CometTest, ObserverSurvivesANotificationFloodFromManyThreads) {
  // 8 threads x 500 allowed opens: every one answered, none lost.
  expect_allowed(probe({"flood", "8", "500", "/workdir/probe.py"}), "ok 0");
}

TEST_F(CometTest, ViolationFloodIsCountedButEventsAreBounded) {
  auto run = probe({"flood", "4", "1000", "/etc/shadow"});
  EXPECT_EQ(run.result, "ok 4000");  // every open refused
  EXPECT_EQ(run.output.exit_code, 3);
  EXPECT_EQ(run.of_type("capability_violation").size(), 1000u);
  EXPECT_EQ(run.events.back()["data"]["violations"], 4000);
}

TEST_F(CometTest, ThreadsWork) { expect_allowed(probe({"threads"}), "ok 4"); }

// ---- time and randomness ----------------------------------------------------------------

TEST_F(CometTest, SettingTheClockIsEperm) {
  expect_violation(probe({"clock_settime"}), "EPERM", "time", "clock:CLOCK_REALTIME");
}

TEST_F(CometTest, ReadingClocksWorks) { expect_allowed(probe({"clock_gettime"}), "ok 1"); }

TEST_F(CometTest, RandomnessWorks) { expect_allowed(probe({"urandom"}), "ok 32"); }

// ---- isolation beyond the manifest --------------------------------------------------------

TEST_F(CometTest, NoCapabilitiesNoNewPrivsSeccompFiltered) {
  expect_allowed(probe({"status"}),
                 "ok CapEff=0000000000000000 CapPrm=0000000000000000 CapBnd=0000000000000000 "
                 "CapInh=0000000000000000 CapAmb=0000000000000000 NoNewPrivs=1 Seccomp=2");
}

TEST_F(CometTest, NoSupervisorFdLeaksIn) {
  // 0-2 and the fd listdir itself holds open.
  expect_allowed(probe({"fds"}), "ok 0,1,2,3");
}

TEST_F(CometTest, ProcShowsOnlyTheSandbox) { expect_allowed(probe({"listdir", "/proc"}), "ok 1,self,thread-self"); }

TEST_F(CometTest, EnvironmentIsScrubbed) {
  auto run = probe({"env"});
  expect_allowed(run, "ok HOME,LANG,PATH,TZ");
  EXPECT_EQ(run.output.out.find("operator-secret"), std::string::npos);
}

TEST_F(CometTest, OwnHostname) { expect_allowed(probe({"hostname"}), "ok comet"); }

TEST_F(CometTest, KillAllCannotTouchHostProcesses) {
  pid_t sleeper = ::fork();
  if (sleeper == 0) {
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  auto run = probe({"kill_all"});
  EXPECT_EQ(::kill(sleeper, 0), 0) << "a host process was killed from inside the sandbox";
  ::kill(sleeper, SIGKILL);
  ::waitpid(sleeper, nullptr, 0);
  EXPECT_NE(run.output.exit_code, 125);
}

TEST_F(CometTest, DangerousSyscallsAreEperm) {
  for (const char* sc : {"ptrace", "mount", "bpf", "keyctl", "perf_event_open", "userfaultfd", "unshare",
                         "setns", "open_by_handle_at"}) {
    auto run = probe({"syscall", sc, "0", "0", "0", "0"});
    EXPECT_EQ(run.result, "errno=EPERM") << sc << ": " << run.output.err;
  }
}

TEST_F(CometTest, IoUringIsRefused) {
  auto run = probe({"syscall", "io_uring_setup", "1", "0"});
  EXPECT_EQ(run.result.rfind("errno=", 0), 0U) << run.result;
}

TEST_F(CometTest, PersonalityChangeIsRefused) {
  auto run = probe({"syscall", "personality", "0x0040000"});  // ADDR_NO_RANDOMIZE
  EXPECT_EQ(run.result, "errno=EPERM") << run.result;
}

// ---- limits and exit codes ----------------------------------------------------------------

TEST_F(CometTest, WallClockTimeoutIs124) {
  set_resources("{timeout: 1s}");
  auto start = std::chrono::steady_clock::now();
  auto run = probe({"sleep", "30"});
  EXPECT_EQ(run.output.exit_code, 124) << run.output.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(CometTest, AgentStatusIsTheRunsStatus) {
  EXPECT_EQ(probe({"exit", "7"}).output.exit_code, 7);
}

TEST_F(CometTest, EventsAreRunStartedViolationRunFinished) {
  auto run = probe({"read", "/etc/shadow"});
  ASSERT_GE(run.events.size(), 3u);
  EXPECT_EQ(run.events.front()["type"], "run_started");
  EXPECT_EQ(run.events.back()["type"], "run_finished");
  EXPECT_EQ(run.events.back()["data"]["exit_code"], 3);
  EXPECT_EQ(run.events.back()["data"]["violations"], 1);
  for (const auto& e : run.events) {
    for (const char* field : {"specversion", "id", "source", "type", "time", "subject", "datacontenttype", "data"}) {
      EXPECT_TRUE(e.contains(field)) << field;
    }
    EXPECT_EQ(e["data"]["run_id"], run.events.front()["data"]["run_id"]);
  }
}

// ---- fail closed ------------------------------------------------------------------------

// With `egress: []` the agent still has a network namespace with the egress layer: every
// attempt is refused with the errno SPEC C6 names, and reported (not a silent ENETUNREACH).
TEST_F(CometTest, NetworkWithoutEgressEntriesIsRefusedAndReported) {
  expect_violation(probe({"tcp_echo", "192.0.2.1", "80", "hi"}), "ECONNREFUSED", "network", "192.0.2.1:80/tcp");
}

TEST_F(CometTest, DnsWithoutEgressEntriesIsNxdomainAndReported) {
  auto run = probe({"resolve", "example.com"});
  EXPECT_EQ(run.output.exit_code, 3) << run.output.err;
  EXPECT_NE(run.output.out.find("RESULT gai="), std::string::npos) << run.output.out;
  auto v = run.of_type("capability_violation");
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0]["data"]["resource"], "dns:example.com");
  EXPECT_EQ(v[0]["data"]["errno"], "NXDOMAIN");
}

// An agent looping on DNS cannot grow the run's events without bound: 1,000 violation
// events and 10,000 dns_query events at most; the repeats past the bound are aggregated
// (count, first and last time) in run_finished, nothing is dropped unnamed.
TEST_F(CometTest, DnsFloodEventsAreBounded) {
  auto run = probe({"dns_flood", "example.com", "10500"});
  EXPECT_EQ(run.result, "ok 10500") << run.output.out << run.output.err;
  EXPECT_EQ(run.output.exit_code, 3);
  EXPECT_EQ(run.of_type("capability_violation").size(), 1000u);
  EXPECT_EQ(run.of_type("dns_query").size(), 10000u);
  auto finished = run.of_type("run_finished");
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]["data"]["violations"], 10500);
  EXPECT_EQ(finished[0]["data"]["network_events_dropped"], 0);
  EXPECT_EQ(finished[0]["data"]["network_events_by_type"]["dns_query"], 10500);
  const auto& agg = finished[0]["data"]["network_events_aggregated"];
  ASSERT_EQ(agg.size(), 1u) << agg.dump();
  EXPECT_EQ(agg[0]["resource"], "dns:example.com");
  EXPECT_EQ(agg[0]["count"], 500);
}

// Fail closed (C1): an entry this Comet cannot enforce exactly refuses the run.
TEST_F(CometTest, UdpEntryOnAWildcardHostIsRefused) {
  set_manifest(R"(soyapack: v0
name: comet-probe
version: 0.1.0
agent: {runtime: python3, entrypoint: probe.py}
capabilities:
  egress: [{host: "*.example.com", port: 53, protocol: udp}]
  fs: {read: [/workdir], write: [/workdir/out]}
  determinism_tier: read-only
)");
  auto run = probe({"exit", "0"});
  EXPECT_EQ(run.output.exit_code, 125);
  EXPECT_NE(run.output.err.find("udp entry needs an exact host"), std::string::npos) << run.output.err;
}

TEST_F(CometTest, MountAtUndeclaredPathIsRefused) {
  auto run = probe({"exit", "0"}, {"--mount", dir_.path().string() + ":/data:ro"});
  EXPECT_EQ(run.output.exit_code, 125);
  EXPECT_NE(run.output.err.find("not declared"), std::string::npos) << run.output.err;
}

TEST_F(CometTest, MissingUserNamespacesRefuseToStart) {
  // A user namespace whose limit for nested namespaces is 0: the Comet cannot set up its
  // first layer and must refuse (125) naming it, never run the agent without it.
  if (::geteuid() != 0 || rootless_mode()) GTEST_SKIP() << "needs root to set up the restricted namespace";
  // sh -c SCRIPT soyaos run …: $0 is soyaos, "$@" the rest.
  const std::string out =
      run_wrapped("unshare -Ur sh -c 'echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"'", false);
  EXPECT_NE(out.find("exit=125"), std::string::npos) << out;
  EXPECT_NE(out.find("user namespace limit"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "out" / "ran"));
}

// The network layer's ruleset is one nfnetlink batch built by soyaos (src/comet/nft_batch.h):
// libnftables is not loaded at all, so a run works where it is unloadable.
TEST_F(CometTest, TheRulesetNeedsNoLibnftables) {
  dir_.write("badlib/libnftables.so.1", "not a shared object\n");
  const auto libdir = dir_.path() / "badlib";
  auto run = run_soyaos({"run", pack_.string(), "--no-cache", "--out", (dir_.path() / "out").string(), "--",
                         "write", "/workdir/out/ran"},
                        {{"LD_LIBRARY_PATH", libdir.string()}}, dir_.path());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "out" / "ran")) << run.err;
}

TEST_F(CometTest, InvalidManifestIsRefused) {
  set_manifest("soyapack: v0\nname: BAD\n");
  auto run = probe({"exit", "0"});
  EXPECT_EQ(run.output.exit_code, 125);
  EXPECT_NE(run.output.err.find("soyapack.yaml:"), std::string::npos) << run.output.err;
}

}  // namespace
}  // namespace soyaos::testing
