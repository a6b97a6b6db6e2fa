// Runs the real soyaos binary (built alongside the tests) and captures what it printed.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace soyaos::testing {

struct RunOutput {
  int exit_code = -1;  // exit status, or 128+signal
  std::string out;     // stdout
  std::string err;     // stderr
};

// An `env` key run_soyaos() and Background take for themselves (not passed on): soyaos runs
// with RLIMIT_NOFILE (soft and hard) set to this number, as under `ulimit -n N` (the egress
// gateway's descriptor budget, docs/network.md).
inline constexpr const char* kNofileEnv = "SOYAOS_TEST_RLIMIT_NOFILE";

// Runs `soyaos ARGS...` with stdin from /dev/null. `env` entries are added to (or replace
// in) the inherited environment; `cwd` empty means the current directory.
RunOutput run_soyaos(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env = {},
                     const std::filesystem::path& cwd = {});

// As run_soyaos, with `stdin_data` on stdin (`soyaos secret set`).
RunOutput run_soyaos_stdin(const std::vector<std::string>& args, const std::string& stdin_data,
                           const std::map<std::string, std::string>& env = {},
                           const std::filesystem::path& cwd = {});

// A soyaos started in the background (the stop-signal tests, C9), with the environment
// run_soyaos() gives. With `via_terminal` it runs under script(1) on a pseudo-terminal of
// its own, and write_stdin() types on that terminal (e.g. "\x03", Ctrl-C).
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
             const std::filesystem::path& cwd = {}, bool via_terminal = false);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  // Reads output until stdout or stderr contains `text`; false after `timeout_ms`.
  bool wait_for(const std::string& text, int timeout_ms = 30000);
  // Closes the test's end of soyaos's stdout: its next write gets EPIPE (`| head`).
  void close_stdout();
  void signal(int sig) const;
  void write_stdin(const std::string& data) const;
  // Waits for the exit (at most `timeout_ms`, then SIGKILL) and returns what it printed.
  RunOutput finish(int timeout_ms = 60000);
  [[nodiscard]] const RunOutput& so_far() const { return result_; }

 private:
  void pump(int timeout_ms);
  int pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1, in_fd_ = -1;
  RunOutput result_;
};

// True when the suite runs soyaos as an unprivileged user (SOYAOS_TEST_ROOTLESS=1, set by
// ctest for the `rootless.` copies of the tests): run_soyaos then drops to nobody with
// setpriv, using a world-readable copy of the binary.
bool rootless_mode();

// The copy of soyaos_binary() that nobody may execute (the build tree may sit under a
// directory nobody cannot traverse): what a rootless command runs.
std::string rootless_binary();

// The soyaos binary under test: $SOYAOS_TEST_BIN when set (scripts/sanitize.sh points the
// suite's test programs at the ASan+UBSan build of soyaos), else the one built beside them.
const std::string& soyaos_binary();

// True when the soyaos under test is built with AddressSanitizer: this test program is
// (the ASan build's own suites), or scripts/sanitize.sh points the normal build's programs
// at the sanitized binary (SOYAOS_TEST_SANITIZED=1 beside SOYAOS_TEST_BIN). Bounds that
// measure soyaos's memory or CPU do not hold under ASan and are relaxed by it.
bool soyaos_sanitized();

// Absolute path of a file in the source tree ("examples/hello").
std::filesystem::path source_path(const std::string& relative);

// A fresh directory under $TMPDIR, removed when the object dies. World-accessible
// (mode 0777) so that a rootless soyaos can read packs from it and write results to it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // Writes `content` to path()/relative, creating parent directories.
  void write(const std::string& relative, const std::string& content) const;
  // Copies a source-tree directory (a fixture pack) to path()/relative.
  std::filesystem::path copy_from_source(const std::string& source_relative,
                                         const std::string& relative) const;

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& path);

// The host's first non-loopback IPv4 address that is up ("" when it has none): where a leak
// out of a sandbox could land.
std::string host_ipv4_address();

}  // namespace soyaos::testing
