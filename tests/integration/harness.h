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

// Runs `soyaos ARGS...` with stdin from /dev/null. `env` entries are added to (or replace
// in) the inherited environment; `cwd` empty means the current directory.
RunOutput run_soyaos(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env = {},
                     const std::filesystem::path& cwd = {});

// Absolute path of a file in the source tree ("examples/hello").
std::filesystem::path source_path(const std::string& relative);

// A fresh directory under $TMPDIR, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // Writes `content` to path()/relative, creating parent directories.
  void write(const std::string& relative, const std::string& content) const;

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& path);

}  // namespace soyaos::testing
