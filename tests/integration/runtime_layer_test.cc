// The runtime layer (issue #11, docs/sandbox.md "Runtime layer"): what python3 and node and
// their standard libraries probe on their own is answered inside the Comet and is not a
// violation; the agent's own attempts beyond its manifest still are. Real interpreters, real
// Comets; ctest runs these as root and (prefix `rootless.`) as nobody.
//
// Each row of the table in src/policy/runtime_layer.cc is exercised here by the stdlib call
// that probes it (named in the row), and its forbidden neighbours are tried too.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CometRun {
  RunOutput output;
  std::vector<json> events;
  json result;  // the agent's last stdout line, parsed

  [[nodiscard]] std::vector<json> violations() const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.value("type", "") == "capability_violation") out.push_back(e);
    }
    return out;
  }
  [[nodiscard]] bool has_fs_violation(const std::string& path, const std::string& err) const {
    for (const auto& v : violations()) {
      const auto& d = v["data"];
      if (d.value("surface", "") == "fs" && d.value("resource", "") == path && d.value("errno", "") == err) return true;
    }
    return false;
  }
  [[nodiscard]] std::string context() const {
    std::string v;
    for (const auto& e : violations()) v += e["data"].dump() + "\n";
    return "exit=" + std::to_string(output.exit_code) + "\nstdout:\n" + output.out + "\nstderr:\n" +
           output.err.substr(0, 4000) + "\nviolations:\n" + v;
  }
};

class RuntimesLayer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
  }

  CometRun run(const std::string& runtime, const std::string& entry, const std::string& program,
               const std::string& caps_extra = "", const std::string& tag = "a") {
    dir_.write("pack/soyapack.yaml", "soyapack: v0\nname: runtime-layer\nversion: 0.1.0\n"
                                     "agent: {runtime: " + runtime + ", entrypoint: " + entry + "}\n"
                                     "capabilities:\n  egress: []\n"
                                     "  fs: {read: [/workdir], write: [/workdir/out" + caps_extra + "]}\n"
                                     "  determinism_tier: read-only\n"
                                     "resources: {memory: 512Mi}\n");
    dir_.write("pack/" + entry, program);
    CometRun r;
    const fs::path events = dir_.path() / ("events-" + tag + ".jsonl");
    r.output = run_soyaos({"run", (dir_.path() / "pack").string(), "--out", (dir_.path() / ("out-" + tag)).string(),
                           "--events", events.string(), "--no-cache"},
                          {{"SOYAOS_HOME", (dir_.path() / "home").string()}}, dir_.path());
    std::istringstream lines(read_file(events));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) r.events.push_back(json::parse(line));
    }
    std::istringstream out(r.output.out);
    for (std::string line; std::getline(out, line);) {
      if (!line.empty() && line[0] == '{') r.result = json::parse(line, nullptr, false);
    }
    return r;
  }

  static int allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    return CPU_COUNT(&set);
  }

  TempDir dir_;
};

constexpr const char* kNodeProbes = R"JS(
const os = require('os');
const dns = require('dns');  // c-ares: /etc/resolv.conf, nsswitch.conf, svc.conf, netsvc.conf, host.conf
const out = {};
const cpus = os.cpus();  // /proc/stat, /proc/cpuinfo, /sys/devices/system/cpu/cpuN/cpufreq
out.cpus = cpus.length;
out.cpu_model = cpus.length ? cpus[0].model : '';
out.cpu_times = cpus.length ? cpus[0].times.user + cpus[0].times.idle : 0;
out.parallelism = os.availableParallelism();
out.ifaces = Object.keys(os.networkInterfaces()).sort();  // getifaddrs: NETLINK_ROUTE
out.lo = (os.networkInterfaces().lo || []).map((a) => a.address).sort();
out.user = os.userInfo().username;  // /etc/passwd
out.homedir = os.homedir();
out.hostname = os.hostname();
out.totalmem = os.totalmem();  // /proc/meminfo
out.freemem = os.freemem();
out.loadavg = os.loadavg().length;  // /proc/loadavg
out.uptime = os.uptime() > 0;  // /proc/uptime
out.tmpdir = os.tmpdir();
out.release = os.release().length > 0;
out.machine = os.machine();
out.tz = Intl.DateTimeFormat().resolvedOptions().timeZone;  // ICU: TZ, /etc/localtime
out.uuid = require('crypto').randomUUID().length;
out.roots = require('tls').rootCertificates.length > 0;
require('https'); require('http'); require('zlib'); require('child_process');
out.resolver = new dns.Resolver().getServers();
dns.lookup('localhost', { family: 4 }, (err, addr) => {  // getaddrinfo: /etc/hosts, gai.conf
  out.lookup = err ? err.code : addr;
  console.log(JSON.stringify(out));
});
)JS";

TEST_F(RuntimesLayer, NodeStandardProbesAreAnsweredWithoutViolations) {
  auto r = run("node", "main.js", kNodeProbes);
  ASSERT_EQ(r.output.exit_code, 0) << r.context();
  EXPECT_TRUE(r.violations().empty()) << r.context();
  ASSERT_TRUE(r.result.is_object()) << r.context();
  const auto& o = r.result;
  // The CPUs the agent may use, with real times and the host's model name.
  EXPECT_EQ(o["cpus"], allowed_cpus()) << o.dump();
  EXPECT_EQ(o["parallelism"], allowed_cpus()) << o.dump();
  EXPECT_NE(o["cpu_model"], "") << o.dump();
  EXPECT_GT(o["cpu_times"].get<double>(), 0) << o.dump();
  // The sandbox's own interfaces, nothing of the host's.
  EXPECT_EQ(o["ifaces"], json::array({"lo", "soyaos0"})) << o.dump();
  EXPECT_EQ(o["lo"], json::array({"127.0.0.1", "::1"})) << o.dump();
  EXPECT_EQ(o["user"], "agent");
  EXPECT_EQ(o["hostname"], "comet");
  // resources.memory (512Mi) bounds what the agent is told it has.
  EXPECT_LE(o["totalmem"].get<double>(), 512.0 * 1024 * 1024) << o.dump();
  EXPECT_GT(o["freemem"].get<double>(), 0) << o.dump();
  EXPECT_LE(o["freemem"].get<double>(), o["totalmem"].get<double>()) << o.dump();
  EXPECT_EQ(o["loadavg"], 3);
  EXPECT_EQ(o["uptime"], true);
  EXPECT_EQ(o["tz"], "UTC");
  EXPECT_EQ(o["roots"], true);
  EXPECT_EQ(o["resolver"], json::array({"127.0.0.1"}));
  EXPECT_EQ(o["lookup"], "127.0.0.1");
}

constexpr const char* kPythonProbes = R"PY(
import datetime, getpass, json, locale, mimetypes, multiprocessing, os, platform, socket, ssl
import sys, sysconfig, tempfile, time, uuid, zoneinfo
out = {}
out["os_release"] = platform.freedesktop_os_release().get("ID")  # /etc/os-release
out["platform"] = platform.platform()  # uname, and platform.processor(): `uname -p` (sitecustomize)
out["processor"] = platform.processor()
out["machine"] = platform.uname().machine
out["libc"] = platform.libc_ver()[0]
out["cpu_count"] = os.cpu_count()  # glibc get_nprocs: /sys/devices/system/cpu/online, /proc/stat
out["mp_cpu_count"] = multiprocessing.cpu_count()
out["affinity"] = len(os.sched_getaffinity(0))
out["nprocs_conf"] = os.sysconf("SC_NPROCESSORS_CONF")  # /sys/devices/system/cpu, /proc/cpuinfo
out["loadavg"] = len(os.getloadavg())  # /proc/loadavg
out["phys_pages"] = os.sysconf("SC_PHYS_PAGES") > 0
with open("/proc/meminfo") as f:
    out["memtotal_kib"] = int(f.readline().split()[1])
out["locale"] = locale.setlocale(locale.LC_ALL, "")
out["encoding"] = locale.getpreferredencoding()
out["user"] = getpass.getuser()  # /etc/passwd
out["hostname"] = socket.gethostname()
out["fqdn"] = socket.getfqdn()  # /etc/hosts
out["ifaces"] = sorted(n for _, n in socket.if_nameindex())  # NETLINK_ROUTE
out["cafile"] = ssl.get_default_verify_paths().openssl_cafile
ssl.create_default_context()
out["zone"] = str(zoneinfo.ZoneInfo("Europe/Paris"))  # /usr/share/zoneinfo
out["utc"] = datetime.datetime.now().astimezone().tzname()  # TZ=UTC
out["localtime"] = os.path.realpath("/etc/localtime")
with open("/etc/timezone") as f:
    out["timezone"] = f.read().strip()
mimetypes.init()  # /etc/mime.types
out["mimetype"] = mimetypes.guess_type("a.json")[0]
out["uuid"] = len(str(uuid.uuid4()))
out["uuid1"] = uuid.uuid1().version  # libuuid: /var/lib/libuuid/clock.txt (absent, tolerated)
out["home"] = os.path.expanduser("~")
out["tmp"] = tempfile.gettempdir()
with tempfile.NamedTemporaryFile() as t:
    t.write(b"x")
out["scheme"] = sysconfig.get_default_scheme()
print(json.dumps(out))
)PY";

TEST_F(RuntimesLayer, PythonStandardProbesAreAnsweredWithoutViolations) {
  auto r = run("python3", "main.py", kPythonProbes, ", /tmp");
  ASSERT_EQ(r.output.exit_code, 0) << r.context();
  EXPECT_TRUE(r.violations().empty()) << r.context();
  ASSERT_TRUE(r.result.is_object()) << r.context();
  const auto& o = r.result;
  EXPECT_EQ(o["os_release"], "debian");
  EXPECT_EQ(o["processor"], "");  // what Debian's `uname -p` ("unknown") gives, without a process
  EXPECT_NE(o["platform"].get<std::string>().find("Linux-"), std::string::npos) << o.dump();
  EXPECT_EQ(o["libc"], "glibc");
  EXPECT_EQ(o["cpu_count"], allowed_cpus()) << o.dump();
  EXPECT_EQ(o["mp_cpu_count"], allowed_cpus()) << o.dump();
  EXPECT_EQ(o["affinity"], allowed_cpus()) << o.dump();
  EXPECT_EQ(o["nprocs_conf"], allowed_cpus()) << o.dump();
  EXPECT_EQ(o["loadavg"], 3);
  EXPECT_EQ(o["phys_pages"], true);
  EXPECT_LE(o["memtotal_kib"].get<long>(), 512L * 1024) << o.dump();
  EXPECT_EQ(o["locale"], "C.UTF-8");
  EXPECT_EQ(o["encoding"], "UTF-8");
  EXPECT_EQ(o["user"], "agent");
  EXPECT_EQ(o["hostname"], "comet");
  EXPECT_EQ(o["ifaces"], json::array({"lo", "soyaos0", "soyaos1"})) << o.dump();
  EXPECT_EQ(o["zone"], "Europe/Paris");
  EXPECT_EQ(o["utc"], "UTC");
  EXPECT_EQ(o["localtime"], "/usr/share/zoneinfo/Etc/UTC");
  EXPECT_EQ(o["timezone"], "Etc/UTC");
  EXPECT_EQ(o["mimetype"], "application/json");
  EXPECT_EQ(o["uuid"], 36);
  EXPECT_EQ(o["uuid1"], 1);
  EXPECT_EQ(o["home"], "/tmp");  // the declared scratch path (M6)
  EXPECT_EQ(o["tmp"], "/tmp");
}

// What the runtime layer does not serve stays absent, and reaching for it is the agent's
// violation: host identity files, procfs beyond the sandbox's processes and the served rows,
// /sys, and writing a served file.
constexpr const char* kForbidden = R"PY(
import errno, json, os
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
read = lambda p: (lambda: open(p, "rb").read())
for p in ["/etc/shadow", "/etc/machine-id", "/etc/hostname", "/proc/kallsyms", "/proc/version",
          "/proc/sys/kernel/hostname", "/proc/net/dev", "/proc/modules", "/sys/class/net/lo/address",
          "/var/lib/dbus/machine-id"]:
    attempt(p, read(p))
attempt("write:/proc/stat", lambda: open("/proc/stat", "w"))
attempt("write:/etc/os-release", lambda: open("/etc/os-release", "a"))
attempt("write:/var/lib/other", lambda: open("/var/lib/other", "w"))
# Served rows, read as the agent sees them.
with open("/proc/stat") as f:
    out["stat_cpus"] = sum(1 for l in f if l.startswith("cpu") and l[3].isdigit())
with open("/proc/loadavg") as f:
    out["loadavg_fields"] = f.read().split()[3:]
print(json.dumps(out))
)PY";

TEST_F(RuntimesLayer, ForbiddenNeighboursAreStillRefusedAndReported) {
  auto r = run("python3", "main.py", kForbidden);
  EXPECT_EQ(r.output.exit_code, 3) << r.context();
  ASSERT_TRUE(r.result.is_object()) << r.context();
  const auto& o = r.result;
  // (/proc/net is not part of a subset=pid procfs; /proc/self/net is, and stays readable.)
  for (const char* p : {"/etc/shadow", "/etc/machine-id", "/etc/hostname", "/proc/kallsyms", "/proc/version",
                        "/proc/sys/kernel/hostname", "/proc/net/dev", "/proc/modules", "/sys/class/net/lo/address",
                        "/var/lib/dbus/machine-id"}) {
    EXPECT_EQ(o[p], "ENOENT") << p << "\n" << r.context();
    EXPECT_TRUE(r.has_fs_violation(p, "ENOENT")) << p << "\n" << r.context();
  }
  EXPECT_EQ(o["write:/proc/stat"], "EACCES") << r.context();
  EXPECT_TRUE(r.has_fs_violation("/proc/stat", "EACCES")) << r.context();
  EXPECT_EQ(o["write:/etc/os-release"], "EACCES") << r.context();
  EXPECT_EQ(o["write:/var/lib/other"], "EACCES") << r.context();
  EXPECT_TRUE(r.has_fs_violation("/var/lib/other", "EACCES")) << r.context();
  EXPECT_EQ(o["stat_cpus"], allowed_cpus()) << r.context();
  EXPECT_EQ(o["loadavg_fields"], json::array({"1/1", "1"})) << r.context();
}

// M6: a read-only pack with /tmp gets HOME and TMPDIR there; tempfile and ~/.cache work, and
// the result is still cached (the scratch tmpfs is discarded, only /workdir/out replays).
TEST_F(RuntimesLayer, ScratchSpaceInAReadOnlyPackKeepsItCached) {
  const std::string program = R"PY(
import json, os, pathlib, tempfile
cache = pathlib.Path.home() / ".cache" / "agent"
cache.mkdir(parents=True, exist_ok=True)
(cache / "model.bin").write_bytes(b"weights")
with tempfile.NamedTemporaryFile(mode="w+") as t:
    t.write("scratch")
    t.flush()
    t.seek(0)
    scratch = t.read()
with tempfile.TemporaryDirectory() as d:
    (pathlib.Path(d) / "f").write_text("x")
with open("/workdir/out/result.txt", "w") as f:
    f.write(scratch + " " + (cache / "model.bin").read_text())
print(json.dumps({"HOME": os.environ["HOME"], "TMPDIR": os.environ.get("TMPDIR"), "scratch": scratch}))
)PY";
  dir_.write("pack/soyapack.yaml", "soyapack: v0\nname: scratch\nversion: 0.1.0\n"
                                   "agent: {runtime: python3, entrypoint: main.py}\n"
                                   "capabilities:\n  egress: []\n"
                                   "  fs: {read: [/workdir], write: [/workdir/out, /tmp]}\n"
                                   "  determinism_tier: read-only\n");
  dir_.write("pack/main.py", program);
  const std::map<std::string, std::string> env = {{"SOYAOS_HOME", (dir_.path() / "home").string()}};
  const std::string pack = (dir_.path() / "pack").string();
  auto v = run_soyaos({"pack", "validate", pack}, env);
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  auto l = run_soyaos({"pack", "lint", pack}, env);
  EXPECT_EQ(l.exit_code, 0) << l.out << l.err;

  auto first = run_soyaos({"run", pack, "--out", (dir_.path() / "out1").string(), "--events",
                           (dir_.path() / "e1.jsonl").string()}, env);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(read_file(dir_.path() / "e1.jsonl").find("capability_violation"), std::string::npos);
  auto o = json::parse(first.out.substr(first.out.find('{')));
  EXPECT_EQ(o["HOME"], "/tmp");
  EXPECT_EQ(o["TMPDIR"], "/tmp");
  EXPECT_EQ(read_file(dir_.path() / "out1" / "result.txt"), "scratch weights");
  // Nothing of the scratch space reaches the host's out directory.
  EXPECT_FALSE(fs::exists(dir_.path() / "out1" / ".cache"));

  auto second = run_soyaos({"run", pack, "--out", (dir_.path() / "out2").string(), "--events",
                            (dir_.path() / "e2.jsonl").string()}, env);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const std::string events = read_file(dir_.path() / "e2.jsonl");
  EXPECT_NE(events.find("\"cache_hit\""), std::string::npos) << events;
  EXPECT_EQ(events.find("\"run_started\""), std::string::npos) << events;
  EXPECT_EQ(second.out, first.out);
  EXPECT_EQ(read_file(dir_.path() / "out2" / "result.txt"), "scratch weights");
}

// HOME prefers a scratch path under /home; TMPDIR prefers /tmp; a read-only pack may not
// write operator data (M6): --mount :rw is refused before the run.
TEST_F(RuntimesLayer, HomeAndTmpdirChoiceAndNoOperatorWritesInReadOnly) {
  auto r = run("python3", "main.py",
               "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in ('HOME', 'TMPDIR')}))\n",
               ", /var/scratch, /tmp, /home/agent");
  ASSERT_EQ(r.output.exit_code, 0) << r.context();
  EXPECT_EQ(r.result["HOME"], "/home/agent") << r.context();
  EXPECT_EQ(r.result["TMPDIR"], "/tmp") << r.context();

  auto none = run("python3", "main.py",
                  "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in ('HOME', 'TMPDIR')}))\n", "", "b");
  ASSERT_EQ(none.output.exit_code, 0) << none.context();
  EXPECT_EQ(none.result["HOME"], "/workdir");
  EXPECT_TRUE(none.result["TMPDIR"].is_null());

  dir_.write("data/x", "operator data");
  auto rw = run_soyaos({"run", (dir_.path() / "pack").string(), "--out", (dir_.path() / "out-rw").string(), "--mount",
                        (dir_.path() / "data").string() + ":/workdir/out/data:rw"},
                       {{"SOYAOS_HOME", (dir_.path() / "home").string()}});
  EXPECT_EQ(rw.exit_code, 125) << rw.err;
  EXPECT_NE(rw.err.find("read-only pack may not write operator data"), std::string::npos) << rw.err;
}

}  // namespace
}  // namespace soyaos::testing
