#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace soyaos::testing {

const std::string& soyaos_binary() {
  static const std::string path = [] {
    const char* override_bin = std::getenv("SOYAOS_TEST_BIN");
    return std::string(override_bin != nullptr && *override_bin != '\0' ? override_bin : SOYAOS_BIN);
  }();
  return path;
}

bool soyaos_sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  const char* v = std::getenv("SOYAOS_TEST_SANITIZED");
  return v != nullptr && std::string(v) == "1";
#endif
}

namespace {

void drain(int out_fd, int err_fd, std::string& out, std::string& err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open_count = 2;
  char buf[65536];
  while (open_count > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
}

}  // namespace

// A world-readable copy of the binary for rootless runs (the build tree may sit under a
// directory nobody cannot traverse).
std::string rootless_binary() {
  static std::string path = [] {
    std::string dir = "/tmp/soyaos-rootless-bin";
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms(0755));
    // One copy per build (tests of different build trees may run at once); each test
    // process refreshes it through a private temporary name and an atomic rename.
    std::string bin = dir + "/soyaos-" + std::to_string(std::hash<std::string>{}(soyaos_binary()));
    std::string tmp = bin + ".tmp." + std::to_string(::getpid());
    std::filesystem::copy_file(soyaos_binary(), tmp, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(tmp, std::filesystem::perms(0755));
    std::filesystem::rename(tmp, bin);
    return bin;
  }();
  return path;
}

namespace {

// Each test process gets its own Moon home (SOYAOS_HOME), world-writable so that a
// rootless soyaos can use it too, removed when the process ends. A test that sets
// SOYAOS_HOME itself keeps its own.
const std::string& test_home() {
  static TempDir dir;
  static const std::string path = (dir.path() / "home").string();
  return path;
}

// Daemon mode (SOYAOS_TEST_MOON_DAEMON=1, the `daemon.` copies of the Moon suites): every
// SOYAOS_HOME a test uses gets a `soyaos moon serve` of its own (socket HOME/moon.sock),
// started on first use, and the commands get SOYAOS_MOON_SOCKET pointing at it, so they
// go through the daemon or fail (never a silent fallback). A home the daemon cannot open
// (a file, a corrupt moon.db) gets no daemon: those commands use the embedded Moon.
class MoonDaemons {
 public:
  ~MoonDaemons() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [home, pid] : pids_) stop(pid);
  }
  // The socket of HOME's daemon, "" when none could be started.
  std::string socket_for(const std::string& home) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string sock = home + "/moon.sock";
    auto it = pids_.find(home);
    if (it != pids_.end()) {
      int status = 0;
      if (it->second > 0 && ::waitpid(it->second, &status, WNOHANG) == 0) return sock;
      pids_.erase(it);
    }
    // Daemons of homes that tests removed since are not needed any more.
    for (auto i = pids_.begin(); i != pids_.end();) {
      std::error_code ec;
      if (!std::filesystem::exists(i->first, ec)) {
        stop(i->second);
        i = pids_.erase(i);
      } else {
        ++i;
      }
    }
    std::error_code ec;
    if (std::filesystem::exists(home, ec) && !std::filesystem::is_directory(home, ec)) return "";
    // PR_SET_PDEATHSIG fires when the *thread* that forked exits, not the process: a daemon
    // first needed by a test's worker thread (racing runs) would be killed when that thread
    // ends, under the other thread's run. Only a daemon forked by the main thread gets it;
    // the others are stopped by ~MoonDaemons like every daemon.
    const bool main_thread = ::syscall(SYS_gettid) == ::getpid();
    const char* bin = soyaos_binary().c_str();  // before fork: no lazy initialisation in the child
    pid_t pid = ::fork();
    if (pid < 0) return "";
    if (pid == 0) {
      if (main_thread) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int devnull = ::open("/dev/null", O_RDWR);
      ::dup2(devnull, STDIN_FILENO);
      ::dup2(devnull, STDOUT_FILENO);
      ::dup2(devnull, STDERR_FILENO);
      ::setenv("SOYAOS_HOME", home.c_str(), 1);
      ::unsetenv("SOYAOS_MOON_SOCKET");
      ::execl(bin, bin, "moon", "serve", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return "";  // could not start
      if (answers(sock)) {
        pids_[home] = pid;
        return sock;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop(pid);
    return "";
  }

 private:
  static bool answers(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return false;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }
  static void stop(pid_t pid) {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 500; ++i) {
      if (::waitpid(pid, &status, WNOHANG) != 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  std::mutex mu_;
  std::map<std::string, pid_t> pids_;
};

bool moon_daemon_mode() {
  const char* v = std::getenv("SOYAOS_TEST_MOON_DAEMON");
  return v != nullptr && std::string(v) == "1" && !rootless_mode();
}

}  // namespace

bool rootless_mode() {
  const char* v = std::getenv("SOYAOS_TEST_ROOTLESS");
  return v != nullptr && std::string(v) == "1";
}

namespace {

// The environment and argv of a soyaos command (run_soyaos and Background).
struct Command {
  std::vector<std::string> env_strings;
  std::vector<std::string> argv_strings;
  rlim_t nofile = 0;  // kNofileEnv: RLIMIT_NOFILE (soft and hard) for soyaos; 0 = inherited
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Command make_command(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                     bool via_terminal);

// Forks and execs `cmd` with stdout/stderr to new pipes (read ends returned) and stdin from
// `stdin_fd` (or /dev/null when -1).
pid_t spawn(Command& cmd, const std::filesystem::path& cwd, int stdin_fd, int& out_fd, int& err_fd) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  std::vector<char*> envp;
  for (auto& s : cmd.env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& s : cmd.argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int in = stdin_fd >= 0 ? stdin_fd : ::open("/dev/null", O_RDONLY);
    ::dup2(in, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    // A test runner that ignores SIGPIPE or blocks signals must not pass that on.
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    if (cmd.nofile > 0) {
      struct rlimit rl {cmd.nofile, cmd.nofile};
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out_fd = out_pipe[0];
  err_fd = err_pipe[0];
  return pid;
}

}  // namespace

RunOutput run_soyaos(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env,
                     const std::filesystem::path& cwd) {
  Command cmd = make_command(args, env, false);
  int out_fd = -1, err_fd = -1;
  pid_t pid = spawn(cmd, cwd, -1, out_fd, err_fd);
  RunOutput result;
  drain(out_fd, err_fd, result.out, result.err);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

RunOutput run_soyaos_stdin(const std::vector<std::string>& args, const std::string& stdin_data,
                           const std::map<std::string, std::string>& env, const std::filesystem::path& cwd) {
  // A memfd holds any amount without a writer thread (a pipe would block past 64 KiB).
  int in = ::memfd_create("soyaos-test-stdin", MFD_CLOEXEC);
  if (in < 0) throw std::runtime_error("memfd_create failed");
  if (::write(in, stdin_data.data(), stdin_data.size()) != static_cast<ssize_t>(stdin_data.size()) ||
      ::lseek(in, 0, SEEK_SET) != 0) {
    ::close(in);
    throw std::runtime_error("memfd write failed");
  }
  Command cmd = make_command(args, env, false);
  int out_fd = -1, err_fd = -1;
  pid_t pid = spawn(cmd, cwd, in, out_fd, err_fd);
  ::close(in);
  RunOutput result;
  drain(out_fd, err_fd, result.out, result.err);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

Background::Background(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                       const std::filesystem::path& cwd, bool via_terminal) {
  Command cmd = make_command(args, env, via_terminal);
  int in_pipe[2] = {-1, -1};
  if (via_terminal && ::pipe2(in_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  pid_ = spawn(cmd, cwd, in_pipe[0], out_fd_, err_fd_);
  if (via_terminal) {
    ::close(in_pipe[0]);
    in_fd_ = in_pipe[1];
  }
}

Background::~Background() {
  if (pid_ > 0) (void)finish(1000);
  for (int fd : {out_fd_, err_fd_, in_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void Background::pump(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) <= 0) return;
  char buf[65536];
  for (int i = 0; i < 2; ++i) {
    if (fds[i].fd < 0 || fds[i].revents == 0) continue;
    ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
    if (n > 0) {
      (i == 0 ? result_.out : result_.err).append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      ::close(fds[i].fd);
      (i == 0 ? out_fd_ : err_fd_) = -1;
    }
  }
}

bool Background::wait_for(const std::string& text, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (result_.out.find(text) == std::string::npos && result_.err.find(text) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || (out_fd_ < 0 && err_fd_ < 0)) return false;
    pump(static_cast<int>(std::min<long long>(left.count(), 100)));
  }
  return true;
}

void Background::close_stdout() {
  if (out_fd_ >= 0) ::close(out_fd_);
  out_fd_ = -1;
}

void Background::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

void Background::write_stdin(const std::string& data) const {
  if (in_fd_ >= 0) (void)!::write(in_fd_, data.data(), data.size());
}

RunOutput Background::finish(int timeout_ms) {
  if (pid_ <= 0) return result_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    if (out_fd_ >= 0 || err_fd_ >= 0) {
      pump(20);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  pid_ = -1;
  while (out_fd_ >= 0 || err_fd_ >= 0) pump(1000);
  result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result_;
}

namespace {

Command make_command(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                     bool via_terminal) {
  Command cmd;
  std::vector<std::string>& env_strings = cmd.env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq != std::string::npos && env.count(entry.substr(0, eq)) != 0) continue;
    env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) {
    if (k == kNofileEnv) {
      cmd.nofile = std::stoul(v);  // the harness's, not passed on
      continue;
    }
    env_strings.push_back(k + "=" + v);
  }
  if (env.count("SOYAOS_HOME") == 0) {
    const std::string& home = test_home();
    std::filesystem::create_directories(home);
    std::filesystem::permissions(home, std::filesystem::perms::all);
    std::erase_if(env_strings, [](const std::string& e) { return e.rfind("SOYAOS_HOME=", 0) == 0; });
    env_strings.push_back("SOYAOS_HOME=" + home);
  }
  if (moon_daemon_mode() && env.count("SOYAOS_MOON_SOCKET") == 0 &&
      !(args.size() >= 2 && args[0] == "moon" && args[1] == "serve")) {
    std::string home;
    for (const auto& e : env_strings) {
      if (e.rfind("SOYAOS_HOME=", 0) == 0) home = e.substr(12);
    }
    static MoonDaemons daemons;
    const std::string sock = home.empty() ? std::string() : daemons.socket_for(home);
    std::erase_if(env_strings, [](const std::string& e) { return e.rfind("SOYAOS_MOON_SOCKET=", 0) == 0; });
    if (!sock.empty()) env_strings.push_back("SOYAOS_MOON_SOCKET=" + sock);
  }
  std::vector<std::string>& argv_strings = cmd.argv_strings;
  if (rootless_mode()) {
    argv_strings = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  }
  const std::string bin = rootless_mode() ? rootless_binary() : soyaos_binary();
  if (via_terminal) {
    // script(1): a new session on a pseudo-terminal; its stdin is typed on that terminal,
    // so "\x03" there is a real Ctrl-C (the line discipline sends SIGINT to the
    // foreground process group). -e: script exits with the command's status.
    std::string line = "exec " + shell_quote(bin);
    for (const auto& a : args) line += " " + shell_quote(a);
    argv_strings.insert(argv_strings.end(), {"/usr/bin/script", "-qefc", line, "/dev/null"});
  } else {
    argv_strings.push_back(bin);
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  }
  return cmd;
}

}  // namespace

std::filesystem::path source_path(const std::string& relative) {
  return std::filesystem::path(SOYAOS_SOURCE_DIR) / relative;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/soyaos-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
  std::filesystem::permissions(path_, std::filesystem::perms::all);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void TempDir::write(const std::string& relative, const std::string& content) const {
  auto p = path_ / relative;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << content;
}

std::filesystem::path TempDir::copy_from_source(const std::string& source_relative,
                                                const std::string& relative) const {
  auto dst = path_ / relative;
  std::filesystem::create_directories(dst.parent_path());
  std::filesystem::copy(source_path(source_relative), dst, std::filesystem::copy_options::recursive);
  return dst;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string host_ipv4_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    out = text;
    break;
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace soyaos::testing
