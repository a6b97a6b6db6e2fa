// Escape suite, "resources the host must not lose" (issue #15, SPEC C9, M1): hostile
// programs (tests/escape/packs/attack/attack.py, group `resources`) try to take more of the
// host than the manifest declares, and the host checks what it actually lost: bytes and
// inodes of the writable tmpfs, host memory (MemAvailable, Shmem), and that an exceeded
// memory limit ends the run with 137 and a `limit_exceeded` event. ctest runs every test as
// root and (prefix `rootless.`) as nobody.
//
// A case that fails here is a gap in the Comet: the assertion states the SAFE outcome and
// must not be loosened to make it pass.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct LimitRun {
  RunOutput output;
  std::vector<json> events;
  std::map<std::string, std::string> cases;

  std::string get(const std::string& name) const {
    auto it = cases.find(name);
    return it == cases.end() ? "<missing>" : it->second;
  }
  // The number after "ok " of a case, or -1.
  long long number(const std::string& name) const {
    std::string v = get(name);
    if (v.rfind("ok ", 0) != 0) return -1;
    return std::stoll(v.substr(3));
  }
  std::vector<json> of_type(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == type) out.push_back(e);
    }
    return out;
  }
  std::string context() const {
    std::string out = output.out.size() > 3000 ? output.out.substr(0, 3000) + "..." : output.out;
    std::string err = output.err.size() > 3000 ? output.err.substr(0, 3000) + "..." : output.err;
    return "exit=" + std::to_string(output.exit_code) + "\nstdout:\n" + out + "\nstderr:\n" + err;
  }
};

// /proc/meminfo field in KiB.
long long meminfo_kib(const std::string& field) {
  std::istringstream in(read_file("/proc/meminfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

class LimitsEscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/escape/packs/attack", "pack");
  }

  // The attack pack with these fs.write paths and resources.
  void set_manifest(const std::string& write_paths, const std::string& resources) {
    dir_.write("pack/soyapack.yaml", R"(soyapack: v0
name: escape-limits
version: 0.1.0
agent: {runtime: python3, entrypoint: attack.py}
capabilities:
  egress: []
  fs: {read: [/workdir], write: [)" + write_paths + R"(]}
  determinism_tier: side-effect
resources: )" + resources + "\n");
  }

  LimitRun attack(const std::vector<std::string>& group_and_args) {
    auto events = dir_.path() / "events.jsonl";
    fs::remove(events);
    std::vector<std::string> args = {"run",      pack_.string(),   "--out", out_dir().string(),
                                     "--events", events.string(), "--no-cache", "--"};
    args.insert(args.end(), group_and_args.begin(), group_and_args.end());
    LimitRun run;
    run.output = run_soyaos(args, {}, dir_.path());
    std::istringstream lines(read_file(events));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) run.events.push_back(json::parse(line));
    }
    std::istringstream out(run.output.out);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("CASE ", 0) != 0) continue;
      auto sp = line.find(' ', 5);
      if (sp != std::string::npos) run.cases[line.substr(5, sp - 5)] = line.substr(sp + 1);
    }
    EXPECT_NE(run.output.exit_code, 125) << run.context();
    EXPECT_NE(run.output.exit_code, 124) << "the run hung until its timeout\n" << run.context();
    return run;
  }

  fs::path out_dir() const { return dir_.path() / "out"; }

  // Bytes and entries collected onto the host from /workdir/out.
  std::pair<uintmax_t, uintmax_t> collected() const {
    uintmax_t bytes = 0, entries = 0;
    if (!fs::exists(out_dir())) return {0, 0};
    for (const auto& e : fs::recursive_directory_iterator(out_dir())) {
      ++entries;
      if (e.is_regular_file()) bytes += e.file_size();
    }
    return {bytes, entries};
  }

  TempDir dir_;
  fs::path pack_;
};

#define EXPECT_CASE(run, name, expected) EXPECT_EQ((run).get(name), expected) << (name) << "\n" << (run).context()

// The largest rise of a /proc/meminfo field (KiB) over its value at start, sampled until
// `stop`; for MemAvailable (which falls), the largest fall.
class MeminfoSampler {
 public:
  explicit MeminfoSampler(std::string field, bool falls = false)
      : field_(std::move(field)), falls_(falls), base_(meminfo_kib(field_)), thread_([this] { loop(); }) {}
  ~MeminfoSampler() { finish(); }
  long long base() const { return base_; }
  long long finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return worst_;
  }

 private:
  void loop() {
    while (!stop_) {
      long long now = meminfo_kib(field_);
      worst_ = std::max(worst_, falls_ ? base_ - now : now - base_);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::string field_;
  bool falls_;
  long long base_;
  long long worst_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- write_quota: one total over every writable path (M1) --------------------------------

TEST_F(LimitsEscapeTest, WriteQuotaIsOneTotalAcrossEveryWritablePath) {
  set_manifest("/workdir/out, /tmp/a, /var/b, /scratch", "{write_quota: 32Mi, timeout: 60s}");
  MeminfoSampler shmem("Shmem");  // tmpfs pages are Shmem on the host
  auto run = attack({"resources", "quota_total", "/workdir/out", "/tmp/a", "/var/b", "/scratch"});
  const long long shmem_rise_kib = shmem.finish();
  RecordProperty("host_shmem_rise_kib", std::to_string(shmem_rise_kib));
  // Four paths, one quota: the first fills it, the others get (almost) nothing.
  const long long total = run.number("res.quota_total");
  ASSERT_GT(total, 0) << run.context();
  EXPECT_LE(total, 32LL << 20) << "more than write_quota written in total\n" << run.context();
  EXPECT_GE(total, (32LL << 20) - (64 << 10)) << "the quota was not usable\n" << run.context();
  EXPECT_LE(run.number("res.quota_fill_1") + run.number("res.quota_fill_2") + run.number("res.quota_fill_3"),
            64LL << 10)
      << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_LE(collected().first, 32u << 20);
  // Four quotas would be 128 MiB; the machine is shared (other work moves Shmem too: one
  // full-suite run saw more than 64 MiB), hence the wide slack.
  EXPECT_LT(shmem_rise_kib, 96 * 1024) << "host Shmem rose by " << shmem_rise_kib << " KiB";
}

TEST_F(LimitsEscapeTest, WriteQuotaSharedInAnyOrder) {
  set_manifest("/workdir/out, /tmp/a", "{write_quota: 2Mi, timeout: 60s}");
  auto run = attack({"resources", "quota_total", "/tmp/a", "/workdir/out"});
  EXPECT_LE(run.number("res.quota_total"), 2LL << 20) << run.context();
  EXPECT_GE(run.number("res.quota_fill_0"), (2LL << 20) - (64 << 10)) << run.context();
  EXPECT_LE(run.number("res.quota_fill_1"), 64LL << 10) << run.context();
  EXPECT_LE(collected().first, 64u << 10);
}

TEST_F(LimitsEscapeTest, InodesAreBoundedByTheQuota) {
  // 1 KiB of quota: a handful of inodes (docs/sandbox.md), not tens of thousands.
  set_manifest("/workdir/out, /tmp/a", "{write_quota: 1Ki, timeout: 60s}");
  auto run = attack({"resources", "inodes", "/workdir/out", "/tmp/a"});
  const long long total = run.number("res.inodes_total");
  ASSERT_GE(total, 0) << run.context();
  EXPECT_LE(total, 8) << "empty files, directories and symlinks escape the quota\n" << run.context();
  EXPECT_GE(total, 1) << run.context();
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_LE(collected().second, 8u);
}

TEST_F(LimitsEscapeTest, InodesOfALargeQuotaStopAtTheDocumentedBound) {
  set_manifest("/workdir/out, /tmp/a", "{write_quota: 16Mi, timeout: 120s}");
  auto run = attack({"resources", "inodes", "/tmp/a", "/workdir/out"});
  // One inode per KiB of quota: 16384 in total across both paths.
  const long long total = run.number("res.inodes_total");
  EXPECT_LE(total, 16384) << run.context();
  EXPECT_GE(total, 16384 - 16) << run.context();
}

TEST_F(LimitsEscapeTest, ZeroWriteQuotaMeansNoWritableSpace) {
  set_manifest("/workdir/out, /tmp/a", "{write_quota: 0, timeout: 60s}");
  auto run = attack({"resources", "zero", "/workdir/out", "/tmp/a"});
  for (const char* c : {"res.zero_create_0", "res.zero_mkdir_0", "res.zero_symlink_0", "res.zero_create_1",
                        "res.zero_mkdir_1", "res.zero_symlink_1"}) {
    EXPECT_CASE(run, c, "errno=ENOSPC");
  }
  // And a quota of 0 is not "no limit": nothing is free.
  for (const char* c : {"res.zero_statvfs_0", "res.zero_statvfs_1"}) {
    EXPECT_TRUE(run.get(c) == "ok 0 0" || run.get(c) == "ok 1 0") << c << "\n" << run.context();
  }
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_EQ(collected().second, 0u);
}

// ---- memory the agent pins outside RLIMIT_DATA (C9) -------------------------------------

class MemoryHogTest : public LimitsEscapeTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(MemoryHogTest, PinningMemoryBeyondTheLimitIsKilledWith137) {
  const std::string kind = GetParam();
  set_manifest("/workdir/out, /tmp/a", "{memory: 64Mi, write_quota: 1Gi, timeout: 60s}");
  MeminfoSampler shmem("Shmem");
  MeminfoSampler available("MemAvailable", /*falls=*/true);
  auto run = attack({"resources", "hog", kind, "512", "/tmp/a"});
  const long long shmem_rise_kib = shmem.finish();
  const long long available_fall_kib = available.finish();
  RecordProperty("host_shmem_rise_kib", std::to_string(shmem_rise_kib));
  RecordProperty("host_memavailable_fall_kib", std::to_string(available_fall_kib));
  ASSERT_EQ(run.get("res.hog_start"), "ok") << run.context();

  auto started = run.of_type("run_started");
  ASSERT_EQ(started.size(), 1u) << run.context();
  const json& data = started[0]["data"];
  const std::string mechanism = data["limit_mechanisms"].value("memory", "");
  if (mechanism == "rlimit") {
    // No cgroup for this user on this host (rootless on cgroup v1): the run must say so,
    // and docs/threat-model.md records what is then not bounded. Measured, not asserted.
    EXPECT_TRUE(rootless_mode()) << "as root the memory limit must be a cgroup\n" << data.dump();
    EXPECT_NE(std::find(data["rlimit_only"].begin(), data["rlimit_only"].end(), "memory"), data["rlimit_only"].end());
    EXPECT_FALSE(data["limit_mechanisms"].value("why_not_cgroup", "").empty()) << data.dump();
    RecordProperty("rlimit_only_outcome", run.get("res.hog") + " exit " + std::to_string(run.output.exit_code));
    return;
  }
  EXPECT_TRUE(mechanism == "cgroup v1" || mechanism == "cgroup v2") << data.dump();
  EXPECT_EQ(run.get("res.hog_survived"), "<missing>") << "512 MiB of " << kind << " under a 64 MiB limit\n"
                                                      << run.context();
  EXPECT_EQ(run.output.exit_code, 137) << run.context();
  auto exceeded = run.of_type("limit_exceeded");
  ASSERT_EQ(exceeded.size(), 1u) << run.context();
  EXPECT_EQ(exceeded[0]["data"]["limit"], "memory");
  EXPECT_EQ(exceeded[0]["data"]["mechanism"], mechanism);
  EXPECT_EQ(exceeded[0]["data"]["limit_bytes"], 64 << 20);
  EXPECT_EQ(exceeded[0]["data"]["action"], "killed");
  EXPECT_LE(exceeded[0]["data"].value("peak_bytes", uint64_t{0}), uint64_t{64} << 20);
  auto finished = run.of_type("run_finished");
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]["data"]["exit_code"], 137);
  EXPECT_NE(run.output.err.find("killed by the kernel: memory limit of 67108864 bytes exceeded"), std::string::npos)
      << run.output.err;
  // The host lost at most the limit (the machine is shared: other work moves these too,
  // so the bound has slack, far below the 512 MiB tried).
  EXPECT_LT(shmem_rise_kib, 160 * 1024) << "host Shmem rose by " << shmem_rise_kib << " KiB";
  // Nothing pinned outlives the run (the memfd, the mapping and the tmpfs are gone).
  EXPECT_LT(meminfo_kib("Shmem") - shmem.base(), 64 * 1024) << "Shmem still held after the run";
}

INSTANTIATE_TEST_SUITE_P(Kinds, MemoryHogTest, ::testing::Values("shared", "memfd", "memfd_mmap", "tmpfs"));

TEST_F(LimitsEscapeTest, ThereIsNoDevShm) {
  set_manifest("/workdir/out", "{memory: 64Mi, timeout: 60s}");
  auto run = attack({"resources", "hog", "devshm", "512"});
  EXPECT_CASE(run, "res.hog", "ok absent");
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
}

TEST_F(LimitsEscapeTest, RunStartedNamesTheMechanismOfEveryLimit) {
  set_manifest("/workdir/out", "{timeout: 60s}");
  auto run = attack({"resources", "core"});
  auto started = run.of_type("run_started");
  ASSERT_EQ(started.size(), 1u);
  const json& m = started[0]["data"]["limit_mechanisms"];
  const json& only = started[0]["data"]["rlimit_only"];
  if (!rootless_mode()) {
    // As root on this project's hosts (cgroup v1 writable by root), memory and pids are cgroups.
    EXPECT_NE(m.value("memory", ""), "rlimit") << m.dump();
    EXPECT_NE(m.value("pids", ""), "rlimit") << m.dump();
    EXPECT_TRUE(only.empty()) << only.dump();
  }
  for (const char* limit : {"memory", "pids"}) {
    const bool rlimit = m.value(limit, "") == "rlimit";
    EXPECT_EQ(rlimit, std::find(only.begin(), only.end(), limit) != only.end()) << limit << " " << m.dump();
  }
  EXPECT_EQ(m.value("write_quota", ""), "tmpfs");
}

// ---- pids (C9): threads count ----------------------------------------------------------

TEST_F(LimitsEscapeTest, ThreadsStopAtPidsAndTheCgroupReportsIt) {
  set_manifest("/workdir/out", "{pids: 16, timeout: 60s}");
  auto run = attack({"resources", "threads"});
  EXPECT_CASE(run, "res.thread_bomb", "error=RuntimeError");
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  auto started = run.of_type("run_started");
  ASSERT_EQ(started.size(), 1u);
  const std::string mechanism = started[0]["data"]["limit_mechanisms"].value("pids", "");
  auto exceeded = run.of_type("limit_exceeded");
  if (mechanism == "rlimit") {
    EXPECT_TRUE(exceeded.empty()) << run.context();  // RLIMIT_NPROC refuses; nothing counts it
    return;
  }
  ASSERT_EQ(exceeded.size(), 1u) << run.context();
  EXPECT_EQ(exceeded[0]["data"]["limit"], "pids");
  EXPECT_EQ(exceeded[0]["data"]["mechanism"], mechanism);
  EXPECT_EQ(exceeded[0]["data"]["limit_pids"], 16);
  EXPECT_EQ(exceeded[0]["data"]["action"], "refused");
  EXPECT_GE(exceeded[0]["data"]["refused"].get<int>(), 1);
}

// ---- per-run identity and the kernel's per-user quotas -----------------------------------

// The host uids of every grandchild of this process that runs python3 (soyaos's agents) and the owner uids of
// their user namespaces, sampled until `stop`.
struct IdSample {
  std::set<long> uids;
  std::set<long> ns_owners;
};
IdSample sample_agent_ids(const std::atomic<bool>& stop) {
  IdSample out;
  const std::string me = std::to_string(::getpid());
  auto ppid_of = [](const fs::path& proc) {
    std::string stat = read_file(proc / "stat");
    auto rp = stat.rfind(')');
    if (rp == std::string::npos) return std::string();
    std::istringstream rest(stat.substr(rp + 2));
    std::string state, ppid;
    rest >> state >> ppid;
    return ppid;
  };
  while (!stop.load()) {
    std::set<std::string> children;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      if (ppid_of(e.path()) == me) children.insert(e.path().filename().string());
    }
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      if (children.count(ppid_of(e.path())) == 0) continue;
      // The agent itself (its setup, before exec, still holds the launcher's real uid).
      if (read_file(e.path() / "comm") != "python3\n") continue;
      std::istringstream status(read_file(e.path() / "status"));
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("Uid:", 0) == 0) out.uids.insert(std::stol(line.substr(4)));
      }
      int ns = ::open((e.path() / "ns/user").c_str(), O_RDONLY | O_CLOEXEC);
      if (ns >= 0) {
        uid_t owner = 0;
        if (::ioctl(ns, NS_GET_OWNER_UID, &owner) == 0) out.ns_owners.insert(owner);
        ::close(ns);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return out;
}

constexpr long kRunIdBase = 1879048192;  // src/comet/credentials.h
constexpr long kRunIdSpan = 1L << 22;

TEST_F(LimitsEscapeTest, EachCometHasItsOwnHostIdentityAndUserQuotas) {
  set_manifest("/workdir/out", "{timeout: 60s}");
  std::atomic<bool> stop{false};
  IdSample ids;
  std::thread sampler([&] { ids = sample_agent_ids(stop); });
  // Two Comets at once, from two copies of the pack (each run has its own out directory).
  TempDir second;
  fs::copy(pack_, second.path() / "pack", fs::copy_options::recursive);
  LimitRun other;
  std::thread concurrent([&] {
    auto r = run_soyaos({"run", (second.path() / "pack").string(), "--out", (second.path() / "out").string(),
                         "--no-cache", "--", "resources", "ids", "2"},
                        {}, second.path());
    other.output = r;
  });
  auto run = attack({"resources", "ids", "2"});
  concurrent.join();
  stop = true;
  sampler.join();

  // inotify instances are charged up the user-namespace chain to its creator: each Comet's
  // namespace allows 16 (docs/sandbox.md), so no agent exhausts its creator's 128.
  EXPECT_CASE(run, "res.inotify_instances", "ok EMFILE after 16");
  EXPECT_NE(other.output.out.find("CASE res.inotify_instances ok EMFILE after 16"), std::string::npos)
      << other.output.out << other.output.err;
  EXPECT_EQ(run.output.exit_code, 0) << run.context();
  EXPECT_EQ(other.output.exit_code, 0) << other.output.err;

  ASSERT_FALSE(ids.uids.empty()) << "no agent was sampled";
  if (rootless_mode()) {
    // Rootless the kernel lets an unprivileged user map only itself.
    EXPECT_EQ(ids.uids, (std::set<long>{65534}));
    EXPECT_EQ(ids.ns_owners, (std::set<long>{65534}));
    return;
  }
  // As root: never root, never a shared nobody; one uid per Comet, from the documented
  // range, and it (not root) owns the Comet's user namespace.
  EXPECT_EQ(ids.uids.size(), 2u) << "two concurrent Comets must not share a host uid";
  for (long uid : ids.uids) {
    EXPECT_GE(uid, kRunIdBase);
    EXPECT_LT(uid, kRunIdBase + kRunIdSpan);
  }
  EXPECT_EQ(ids.ns_owners, ids.uids) << "the user namespace must be owned by the run's uid, not by root";
}

}  // namespace
}  // namespace soyaos::testing
