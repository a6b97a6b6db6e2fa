#include "compat_env.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "harness.h"

extern char** environ;

namespace soyaos::testing {
namespace {

using nlohmann::json;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

void fail(const std::string& what) { throw std::runtime_error("test CA: " + what); }

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) fail("extension " + value);
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) fail("X509_add_ext " + value);
}

// A certificate for `cn` with `key`'s public half, valid from an hour ago for two days
// (signed later, by the caller).
Cert new_cert(EVP_PKEY* key, const std::string& cn, long serial) {
  Cert cert(X509_new());
  if (!cert) fail("X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 2L * 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("soyaos compat tests"),
                             -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                             0);
  return cert;
}

void write_pem(const std::filesystem::path& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) fail("cannot write " + path.string() + ": " + std::strerror(errno));
  const bool ok = cert != nullptr ? PEM_write_X509(f, cert) == 1
                                  : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) fail("PEM write " + path.string());
  std::filesystem::permissions(path, std::filesystem::perms(0644));
}

}  // namespace

TestCa make_test_ca(const std::filesystem::path& dir, const std::vector<std::string>& dns_names) {
  Pkey ca_key(EVP_EC_gen("P-256"));
  Pkey server_key(EVP_EC_gen("P-256"));
  if (!ca_key || !server_key) fail("EVP_EC_gen");
  Cert ca = new_cert(ca_key.get(), "soyaos compat test CA", 1);
  X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
  add_ext(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_ext(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(ca.get(), ca.get(), NID_subject_key_identifier, "hash");
  add_ext(ca.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) <= 0) fail("signing the CA");

  Cert server = new_cert(server_key.get(), dns_names.empty() ? "compat.test" : dns_names.front(), 2);
  X509_set_issuer_name(server.get(), X509_get_subject_name(ca.get()));
  std::string san;
  for (const auto& n : dns_names) san += (san.empty() ? "DNS:" : ",DNS:") + n;
  add_ext(server.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(server.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
  add_ext(server.get(), ca.get(), NID_ext_key_usage, "serverAuth");
  add_ext(server.get(), ca.get(), NID_subject_alt_name, san);
  add_ext(server.get(), ca.get(), NID_subject_key_identifier, "hash");
  add_ext(server.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
  if (X509_sign(server.get(), ca_key.get(), EVP_sha256()) <= 0) fail("signing the server certificate");

  std::filesystem::create_directories(dir);
  TestCa out{dir / "ca.pem", dir / "server.pem", dir / "server.key"};
  write_pem(out.ca_pem, ca.get(), nullptr);
  write_pem(out.server_pem, server.get(), nullptr);
  write_pem(out.server_key, nullptr, server_key.get());
  return out;
}

MockApi::MockApi(const std::filesystem::path& dir, const TestCa& ca, const std::string& key)
    : log_(dir / "mock_api.log") {
  int in_pipe[2];
  int out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("mock api: pipe2: ") + std::strerror(errno));
  }
  // The host's own interpreter, as the agents' runtime layer uses it (not a PATH shim).
  std::vector<std::string> args = {"/usr/bin/python3",  source_path("tests/compat/mock_api.py").string(),
                                   "--cert",            ca.server_pem.string(),
                                   "--key-file",        ca.server_key.string(),
                                   "--log",             log_.string(),
                                   "--key",             key};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  const int rc = ::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  stdin_fd_ = in_pipe[1];
  if (rc != 0) {
    ::close(out_pipe[0]);
    throw std::runtime_error(std::string("mock api: posix_spawn: ") + std::strerror(rc));
  }
  // Its first line names the two ports; it must come within 10 s.
  std::string line;
  pollfd pfd{out_pipe[0], POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    if (::poll(&pfd, 1, 200) <= 0) continue;
    char buf[256];
    const ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out_pipe[0]);
  try {
    const json ports = json::parse(line.substr(0, line.find('\n')));
    https_port_ = ports.at("https").get<int>();
    http_port_ = ports.at("http").get<int>();
  } catch (const std::exception& e) {
    throw std::runtime_error("mock api did not start (first line: '" + line + "'): " + e.what());
  }
}

MockApi::~MockApi() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  if (pid_ <= 0) return;
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
}

std::vector<json> MockApi::requests() const {
  std::vector<json> out;
  std::error_code ec;
  if (!std::filesystem::exists(log_, ec)) return out;
  std::istringstream lines(read_file(log_));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.push_back(json::parse(line, nullptr, false));
  }
  return out;
}

std::string MockApi::describe() const {
  std::string out;
  for (const auto& r : requests()) out += r.dump() + "\n";
  return out.empty() ? "(the mock API saw no request)" : out;
}

int run_command(const std::vector<std::string>& args, std::string* output) {
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  std::string got;
  if (rc == 0) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(out_pipe[0]);
  if (output != nullptr) *output = got;
  if (rc != 0) {
    if (output != nullptr) *output = args[0] + ": " + std::strerror(rc);
    return 127;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void copy_tree(const std::filesystem::path& from, const std::filesystem::path& to, bool skip_symlinks,
               bool hard_link) {
  namespace fs = std::filesystem;
  fs::create_directories(to);
  for (auto it = fs::recursive_directory_iterator(from); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path target = to / it->path().lexically_relative(from);
    if (it->is_symlink()) {
      if (!skip_symlinks) fs::create_symlink(fs::read_symlink(it->path()), target);
      continue;
    }
    if (it->is_directory()) {
      fs::create_directories(target);
      continue;
    }
    std::error_code ec;
    if (hard_link) fs::create_hard_link(it->path(), target, ec);
    if (!hard_link || ec) fs::copy_file(it->path(), target);
  }
}

std::vector<nlohmann::json> read_events(const std::filesystem::path& events_jsonl) {
  std::vector<nlohmann::json> out;
  if (!std::filesystem::exists(events_jsonl)) return out;
  std::istringstream lines(read_file(events_jsonl));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::map<std::string, CheckResult> parse_results(const std::string& stdout_text) {
  std::map<std::string, CheckResult> out;
  std::istringstream lines(stdout_text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("RESULT ", 0) != 0) continue;
    std::istringstream f(line.substr(7));
    std::string name;
    CheckResult r;
    f >> name >> r.status;
    std::getline(f, r.detail);
    out[name] = r;
  }
  return out;
}

std::string connect_to_yaml(const std::vector<std::pair<std::string, int>>& from, const std::vector<int>& to_ports) {
  std::string y = "egress:\n  connect_to:\n";
  for (size_t i = 0; i < from.size() && i < to_ports.size(); ++i) {
    y += "    \"" + from[i].first + ":" + std::to_string(from[i].second) + "\": \"127.0.0.1:" +
         std::to_string(to_ports[i]) + "\"\n";
  }
  return y;
}

}  // namespace soyaos::testing
