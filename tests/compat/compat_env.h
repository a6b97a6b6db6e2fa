// The compatibility corpus' host side (tests/compat): a test certificate authority, the
// mock model API (mock_api.py, run on the host by the host's python3), and small helpers
// to assemble a pack in a temporary directory (copy trees, compile a C extension).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace soyaos::testing {

// A fresh test CA (P-256, CA:TRUE) and one server certificate it signed, with every name
// in `dns_names` as a subjectAltName. Written as PEM files into `dir`: ca.pem (the CA
// certificate, what agents trust), server.pem and server.key.
struct TestCa {
  std::filesystem::path ca_pem;
  std::filesystem::path server_pem;
  std::filesystem::path server_key;
};
TestCa make_test_ca(const std::filesystem::path& dir, const std::vector<std::string>& dns_names);

// tests/compat/mock_api.py on 127.0.0.1 (one TLS port with the CA's server certificate,
// one plain HTTP port), started in the constructor, stopped in the destructor. The server
// exits by itself when its stdin (held here) closes, so it never outlives the test.
class MockApi {
 public:
  // `key`: the API key the model routes accept (Authorization: Bearer KEY, x-api-key: KEY).
  MockApi(const std::filesystem::path& dir, const TestCa& ca, const std::string& key = "test-key-not-secret");
  ~MockApi();
  MockApi(const MockApi&) = delete;
  MockApi& operator=(const MockApi&) = delete;

  [[nodiscard]] int https_port() const { return https_port_; }
  [[nodiscard]] int http_port() const { return http_port_; }
  // Every request the server has answered so far (one JSON object each, mock_api.py's log).
  [[nodiscard]] std::vector<nlohmann::json> requests() const;
  [[nodiscard]] std::string describe() const;

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int https_port_ = 0;
  int http_port_ = 0;
};

// What both compat suites (compat_test.cc, secrets_test.cc) read back from a run.
// The events file, one JSON object per line (empty when the file is missing).
std::vector<nlohmann::json> read_events(const std::filesystem::path& events_jsonl);
// One check's line `RESULT NAME STATUS DETAIL` (the packs' convention).
struct CheckResult {
  std::string status;  // ok | fail | refused
  std::string detail;
};
// Every RESULT line of the agent's stdout, by check name.
std::map<std::string, CheckResult> parse_results(const std::string& stdout_text);
// The Moon configuration's egress.connect_to section: each "HOST:PORT" key to
// "127.0.0.1:TARGET" (the mock's ports), in order.
std::string connect_to_yaml(const std::vector<std::pair<std::string, int>>& from, const std::vector<int>& to_ports);

// Runs argv[0] (searched in PATH) with stdin from /dev/null; returns the exit status
// (128+N for a signal) and what it printed on stdout and stderr, together, in `output`.
int run_command(const std::vector<std::string>& argv, std::string* output);

// Copies the directory tree `from` to `to` (created). Symbolic links are copied as links
// (their text unchanged) unless `skip_symlinks`. With `hard_link`, regular files are
// hard-linked when possible (same filesystem) instead of copied — only for trees nothing
// writes to afterwards (node_modules is large): a write through the link changes the source.
void copy_tree(const std::filesystem::path& from, const std::filesystem::path& to, bool skip_symlinks,
               bool hard_link);

}  // namespace soyaos::testing
