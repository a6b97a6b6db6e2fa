// Each runtime runs in a Comet (python3 is covered by comet_test.cc's probe), and
// `soyaos doctor` proves every layer on this host.
#include <gtest/gtest.h>
#include <unistd.h>

#include "harness.h"

namespace soyaos::testing {
namespace {

constexpr const char* kNodeManifest = R"(soyapack: v0
name: node-probe
version: 0.1.0
agent: {runtime: node, entrypoint: main.js}
capabilities:
  egress: []
  fs: {read: [/workdir], write: [/workdir/out]}
  determinism_tier: read-only
)";

TEST(Runtimes, NodeWithAWorkerThreadRunsAndChildProcessIsRefused) {
  TempDir dir;
  dir.write("pack/soyapack.yaml", kNodeManifest);
  dir.write("pack/main.js", R"(
const fs = require('fs');
const { Worker } = require('worker_threads');
const w = new Worker('require("worker_threads").parentPort.postMessage(6*7)', { eval: true });
w.on('message', (v) => {
  fs.writeFileSync('/workdir/out/answer.txt', String(v));
  if (process.argv[2] === 'spawn') {
    try { require('child_process').execSync('/usr/bin/true'); console.log('spawned'); }
    catch (e) { console.log('spawn ' + e.code); }
  }
  console.log('answer ' + v);
});
)");
  auto out = dir.path() / "out";
  auto ok = run_soyaos({"run", (dir.path() / "pack").string(), "--out", out.string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("answer 42"), std::string::npos) << ok.out;
  EXPECT_EQ(read_file(out / "answer.txt"), "42");

  auto spawn = run_soyaos({"run", (dir.path() / "pack").string(), "--out", (dir.path() / "out2").string(),
                           "--", "spawn"});
  EXPECT_EQ(spawn.exit_code, 3) << spawn.err;
  EXPECT_NE(spawn.out.find("spawn EPERM"), std::string::npos) << spawn.out;
}

TEST(Runtimes, NativeDynamicBinaryRuns) {
  TempDir dir;
  dir.write("pack/soyapack.yaml", R"(soyapack: v0
name: native-probe
version: 0.1.0
agent: {runtime: native, entrypoint: agent, args: ["hello from native"]}
capabilities:
  egress: []
  fs: {read: [/workdir]}
  determinism_tier: read-only
)");
  std::filesystem::copy_file("/usr/bin/echo", dir.path() / "pack" / "agent");
  auto r = run_soyaos({"run", (dir.path() / "pack").string(), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello from native\n");
}

TEST(Runtimes, NonExecutableNativeEntrypointIs126) {
  TempDir dir;
  dir.write("pack/soyapack.yaml", R"(soyapack: v0
name: native-probe
version: 0.1.0
agent: {runtime: native, entrypoint: agent}
capabilities:
  egress: []
  fs: {read: [/workdir]}
  determinism_tier: read-only
)");
  dir.write("pack/agent", "not a program\n");
  auto r = run_soyaos({"run", (dir.path() / "pack").string(), "--out", (dir.path() / "out").string()});
  EXPECT_EQ(r.exit_code, 126) << r.err;
}

TEST(Doctor, EveryLayerIsInForceHere) {
  auto r = run_soyaos({"doctor"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* layer : {"user namespace", "mount namespace", "pid namespace", "network namespace",
                            "landlock", "seccomp", "comet"}) {
    EXPECT_NE(r.out.find(layer), std::string::npos) << layer;
  }
  EXPECT_EQ(r.out.find("MISSING"), std::string::npos) << r.out;
}

// C9: doctor names the mechanism of each limit. As root on this project's hosts (cgroup v1
// writable by root) memory and pids are cgroups; as nobody they are rlimits only, and the
// line says what that leaves unbounded.
TEST(Doctor, SaysWhichMechanismBoundsEachLimit) {
  auto r = run_soyaos({"doctor"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  if (rootless_mode()) {
    EXPECT_NE(r.out.find("memory limit       rlimit   RLIMIT_DATA only: shared memory, memfd and tmpfs pages are NOT"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("pids limit         rlimit"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("no cgroup because"), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("memory limit       cgroup   cgroup v"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("pids limit         cgroup   cgroup v"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("cpu weight         cgroup   cgroup v"), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("write quota        tmpfs"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace soyaos::testing
