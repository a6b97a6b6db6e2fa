// Helpers of the Moon daemon tests (moon_daemon_test.cc): a real
// `soyaos moon serve` child, a raw client of the wire protocol (moon/wire.h) for requests
// `soyaos` never sends, and that client run as nobody (uid 65534) against a root daemon.
// In rootless mode the daemon itself runs as nobody.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.h"

extern char** environ;

namespace soyaos::testing {

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

// A `soyaos moon serve` child process.
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() { kill(SIGKILL); }

  // Starts `soyaos moon serve ARGS...` with SOYAOS_HOME=home; stderr goes to `log`. In
  // rootless mode (the `rootless.` copies) the daemon runs as nobody, like the clients
  // run_soyaos starts: setpriv exec()s it, so pid() is the daemon's own.
  void start(const std::string& home, const std::vector<std::string>& args, const std::filesystem::path& log) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string s = *e;
      if (s.rfind("SOYAOS_HOME=", 0) == 0 || s.rfind("SOYAOS_MOON_SOCKET=", 0) == 0) continue;
      env.push_back(s);
    }
    env.push_back("SOYAOS_HOME=" + home);
    std::vector<std::string> argv;
    if (rootless_mode()) {
      argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", rootless_binary()};
    } else {
      argv = {soyaos_binary()};
    }
    argv.insert(argv.end(), {"moon", "serve"});
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      int in = ::open("/dev/null", O_RDONLY);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(out, 2);
      std::vector<char*> a, e;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      for (auto& s : env) e.push_back(s.data());
      e.push_back(nullptr);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
  }
  [[nodiscard]] pid_t pid() const { return pid_; }
  // The exit status once it ended (waits up to `seconds`), -1 if it is still running.
  int wait(int seconds) {
    for (int i = 0; i < seconds * 50; ++i) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (sig == SIGKILL) (void)wait(10);
  }

 private:
  pid_t pid_ = -1;
};

// A minimal client of the wire protocol (moon/wire.h), for requests `soyaos` never sends.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), std::min(path.size(), sizeof addr.sun_path - 1));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  [[nodiscard]] bool connected() const { return fd_ >= 0; }
  // One request, one reply (as JSON text, "" when the connection failed).
  std::string call(const nlohmann::json& req) {
    const std::string line = req.dump() + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    std::string reply;
    char c = 0;
    while (::read(fd_, &c, 1) == 1 && c != '\n') reply += c;
    return reply;
  }

 private:
  int fd_ = -1;
};

// The requests `reqs`, sent as nobody (uid 65534) over one connection to `sock`; the replies.
inline std::vector<nlohmann::json> call_as_nobody(const std::string& sock, const std::vector<nlohmann::json>& reqs) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return {};
  pid_t pid = ::fork();
  if (pid < 0) return {};
  if (pid == 0) {
    ::close(pipefd[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(120);
    RawClient c(sock);
    if (!c.connected()) ::_exit(121);
    std::string out;
    for (const auto& r : reqs) out += c.call(r) + "\n";
    if (::write(pipefd[1], out.data(), out.size()) != static_cast<ssize_t>(out.size())) ::_exit(122);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  std::vector<nlohmann::json> replies;
  for (const auto& l : lines(got)) replies.push_back(nlohmann::json::parse(l, nullptr, false));
  return replies;
}

}  // namespace soyaos::testing
