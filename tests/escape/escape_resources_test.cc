// Escape suite: resource exhaustion (C9) from inside real Comets; see escape_test.cc.
#include "escape_fixture.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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
  EXPECT_GT(hwm, 0) << "the supervisor process was never sampled";
  if (soyaos_sanitized()) {
  // Under AddressSanitizer the peak is the allocator's quarantine (up to 256 MiB of freed
  // relay buffers kept poisoned) plus shadow memory, not what soyaos holds, and it varies
  // from machine to machine (172 MiB here; CI failed a fixed 224 MiB bound). The sanitized
  // pass checks the relay for memory errors and the run's outcome; the bound is asserted on
  // the normal build (scripts/test.sh), where it measures soyaos.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
  } else {
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
    // The supervisor relays 72 MiB; it must not have buffered it.
    EXPECT_LT(hwm, 40 * 1024) << "soyaos peaked at " << hwm << " KiB while relaying the agent's output";
  }
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

}  // namespace
}  // namespace soyaos::testing
