// E7 at the terminal (docs/events.md): every CLI error line is escaped exactly once, where it
// is printed (src/cli/print_error.h). An Error quotes text someone else chose — an operator's
// argument, a file of a pack, a pack's manifest key, a Moon configuration's key — and that
// text reaches stderr with no ESC, CR or BEL byte, in the escaped form, once, never with
// its backslashes doubled by a second escaping.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;

// A name that clears the screen's title (OSC ... BEL), returns the carriage and holds a
// backslash; and how escape_for_terminal shows it.
const std::string kHostile = "x\x1b]0;pwned\a\r a\\b";
const std::string kShown = "x\\x1B]0;pwned\\x07\\r a\\\\b";

const std::string kManifest =
    "soyapack: v0\n"
    "name: demo\n"
    "version: 1.2.3\n"
    "agent:\n"
    "  runtime: python3\n"
    "  entrypoint: main.py\n"
    "capabilities:\n"
    "  determinism_tier: read-only\n";

// No raw control byte anywhere; `shown` in stderr exactly once; no backslash doubled twice.
void expect_escaped_once(const RunOutput& r, const std::string& shown, const std::string& what) {
  for (const char c : {'\x1b', '\r', '\a'}) {
    EXPECT_EQ(r.err.find(c), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(r.out.find(c), std::string::npos) << what << ": " << r.out;
  }
  const auto at = r.err.find(shown);
  EXPECT_NE(at, std::string::npos) << what << ": " << r.err;
  if (at != std::string::npos) {
    EXPECT_EQ(r.err.find(shown, at + 1), std::string::npos) << what << ": twice: " << r.err;
  }
  EXPECT_EQ(r.err.find("\\\\\\"), std::string::npos) << what << ": escaped twice: " << r.err;
}

TEST(ErrorLines, AnOperatorsArgumentIsEscapedOnce) {
  TempDir t;
  const std::map<std::string, std::string> env = {{"SOYAOS_HOME", (t.path() / "home").string()}, {"SOYAOS_MOON_CONFIG", ""}};
  const std::string dir = (t.path() / kHostile).string();
  const std::string dir_shown = (t.path() / kShown).string();

  auto r = run_soyaos({"run", dir}, env);
  EXPECT_EQ(r.exit_code, 125) << r.err;
  expect_escaped_once(r, "soyaos: " + dir_shown + ": no such pack directory", "run");

  r = run_soyaos({"pack", "test", dir}, env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, "soyaos pack test: " + dir_shown + ": no such pack directory", "pack test");

  r = run_soyaos({"pack", "learn", dir}, env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, "soyaos pack learn: " + dir_shown + ": no such pack directory", "pack learn");

  r = run_soyaos({"scope", "query", "--user", kHostile}, env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, "soyaos scope query: --user " + kShown + ": no such user", "scope query");

  r = run_soyaos({"pack", "lint", "--explain", kHostile}, env);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_escaped_once(r, "soyaos pack lint: unknown rule id '" + kShown + "'", "pack lint --explain");

  auto cache_env = env;
  cache_env["SOYAOS_CACHE_MAX"] = "1" + kHostile;
  r = run_soyaos({"cache", "stats"}, cache_env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, "soyaos cache stats: SOYAOS_CACHE_MAX=1" + kShown + ":", "cache stats");
}

// A pack directory holding a FIFO named with ESC, BEL, CR and a backslash: `pack push`
// refuses the special file and names it, escaped once.
TEST(ErrorLines, APackFilesNameIsEscapedOnce) {
  TempDir t;
  t.write("pack/soyapack.yaml", kManifest);
  t.write("pack/main.py", "print('hi')\n");
  const fs::path fifo = t.path() / "pack" / kHostile;
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto r = run_soyaos({"pack", "push", (t.path() / "pack").string()}, {{"SOYAOS_HOME", (t.path() / "home").string()}, {"SOYAOS_MOON_CONFIG", ""}});
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, "special file: " + kShown, "pack push");
}

// A manifest diagnostic quotes the pack's own key: through `pack diff` (an Error built from
// the diagnostic) and a Moon configuration's key through `pack pull` (the registry client's
// Error), its backslash is shown as \\ once.
TEST(ErrorLines, ADiagnosticsBackslashIsPrintedOnce) {
  TempDir t;
  t.write("a/soyapack.yaml", "\"" + std::string("k\\e]0;t\\a\\r a\\\\b") + "\": 1\n" + kManifest);
  t.write("a/main.py", "");
  t.write("b/soyapack.yaml", kManifest);
  t.write("b/main.py", "");
  const std::map<std::string, std::string> env = {{"SOYAOS_HOME", (t.path() / "home").string()}, {"SOYAOS_MOON_CONFIG", ""}};
  auto r = run_soyaos({"pack", "diff", (t.path() / "a").string(), (t.path() / "b").string()}, env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, ":1:1: error: k\\x1B]0;t\\x07\\r a\\\\b: unknown key", "pack diff");

  t.write("moon.yaml", "\"m\\e]0;t\\a\\r a\\\\b\": 1\n");
  auto pull_env = env;
  pull_env["SOYAOS_MOON_CONFIG"] = (t.path() / "moon.yaml").string();
  r = run_soyaos({"pack", "pull", "127.0.0.1:9/team/x:1.0.0", "-o", (t.path() / "out").string()}, pull_env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  expect_escaped_once(r, ":1:1: error: m\\x1B]0;t\\x07\\r a\\\\b: unknown key", "pack pull");
}

// `soyaos doctor` prints cgroup paths read from /proc/self/cgroup: their names are chosen by
// whoever may create cgroups (a delegated subtree's user). Run from a memory cgroup with a
// hostile name (cgroup v1 as root; skipped elsewhere), its line shows the name escaped.
TEST(ErrorLines, DoctorEscapesAHostileCgroupName) {
  if (rootless_mode() || ::geteuid() != 0) GTEST_SKIP() << "needs root to create a memory cgroup";
  std::string own;
  {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
      const auto first = line.find(':');
      const auto second = line.find(':', first + 1);
      if (first == std::string::npos || second == std::string::npos) continue;
      if (line.substr(first + 1, second - first - 1) == "memory") own = line.substr(second + 1);
    }
  }
  const fs::path hierarchy = "/sys/fs/cgroup/memory";
  if (own.empty() || !fs::exists(hierarchy / "cgroup.procs")) GTEST_SKIP() << "no cgroup v1 memory hierarchy";
  // One name per test process, and leftovers of a killed run removed first (empty cgroups).
  const fs::path parent = hierarchy / fs::path(own).relative_path();
  for (const auto& e : fs::directory_iterator(parent)) {
    if (e.path().filename().string().rfind("doctor-x", 0) == 0) ::rmdir(e.path().c_str());
  }
  const std::string name = "doctor-x\x1b]0;pwned\a\r a" + std::to_string(::getpid());
  const fs::path hostile = parent / name;
  ASSERT_EQ(::mkdir(hostile.c_str(), 0755), 0) << std::strerror(errno);
  auto move_to = [](const fs::path& dir) { std::ofstream(dir / "cgroup.procs") << ::getpid() << std::flush; };
  move_to(hostile);
  auto r = run_soyaos({"doctor"}, {{"SOYAOS_MOON_CONFIG", ""}});
  move_to(parent);
  for (int i = 0; i < 100 && ::rmdir(hostile.c_str()) != 0 && errno == EBUSY; ++i) ::usleep(10000);
  for (const char c : {'\x1b', '\r', '\a'}) EXPECT_EQ(r.out.find(c), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("doctor-x\\x1B]0;pwned\\x07\\r a" + std::to_string(::getpid()) + "/soyaos-RUN_ID"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace soyaos::testing
