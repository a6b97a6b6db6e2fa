#include "registry_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace soyaos::testing {

namespace fs = std::filesystem;

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(s);
  return port;
}

int sh(const std::string& command, std::string* out) {
  std::FILE* p = ::popen((command + (out ? " 2>&1" : " >/dev/null 2>&1")).c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) {
    if (out != nullptr) out->append(buf.data(), n);
  }
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool RegistryServer::available() { return ::access("/usr/bin/docker-registry", X_OK) == 0; }

RegistryServer::~RegistryServer() { stop(); }

void RegistryServer::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
}

std::string RegistryServer::start(const fs::path& dir, const Options& o) {
  fs::create_directories(dir);
  storage_ = dir / "storage";
  const int port = o.port > 0 ? o.port : free_port();
  if (port <= 0) return "no free port";
  address_ = "127.0.0.1:" + std::to_string(port);
  // The access log goes to the registry's stdout (distribution's CombinedLoggingHandler).
  access_log_ = o.access_log ? dir / "access.log" : fs::path();
  std::string cfg = std::string("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: ") +
                    (o.access_log ? "false" : "true") + "\nstorage:\n  filesystem:\n    rootdirectory: " +
                    storage_.string() + "\n  delete:\n    enabled: true\nhttp:\n  addr: " + address_ + "\n";
  if (o.tls) {
    ca_ = dir / "ca.pem";
    const std::string d = dir.string();
    // A test CA and a server certificate for 127.0.0.1 (IP SAN), EC keys: fast to make.
    const std::string cmd =
        "cd '" + d + "' && openssl ecparam -name prime256v1 -genkey -noout -out ca.key && "
        "openssl req -x509 -new -key ca.key -subj '/CN=soyaos test CA' -days 2 -out ca.pem && "
        "openssl ecparam -name prime256v1 -genkey -noout -out server.key && "
        "openssl req -new -key server.key -subj '/CN=127.0.0.1' -out server.csr && "
        "printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext.cnf && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf -out server.pem";
    std::string out;
    if (sh(cmd, &out) != 0) return "openssl: " + out;
    cfg += "  tls:\n    certificate: " + (dir / "server.pem").string() + "\n    key: " + (dir / "server.key").string() + "\n";
  }
  if (o.auth) {
    std::string out;
    if (sh(std::string("htpasswd -Bbn -C 4 ") + kUser + " " + kPassword + " > '" + (dir / "htpasswd").string() + "'",
           &out) != 0) {
      return "htpasswd: " + out;
    }
    cfg += "auth:\n  htpasswd:\n    realm: soyaos-test\n    path: " + (dir / "htpasswd").string() + "\n";
  }
  std::ofstream(dir / "config.yml") << cfg;
  pid_ = ::fork();
  if (pid_ == 0) {
    const std::string log = (dir / "registry.log").string();
    std::FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    (void)std::freopen(access_log_.empty() ? "/dev/null" : access_log_.c_str(), "w", stdout);
    ::execl("/usr/bin/docker-registry", "docker-registry", "serve", (dir / "config.yml").c_str(), nullptr);
    ::_exit(127);
  }
  // Ready when it accepts connections (it starts in well under a second).
  for (int i = 0; i < 500; ++i) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool up = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    if (up) return "";
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream in(dir / "registry.log");
      return "docker-registry exited: " + std::string(std::istreambuf_iterator<char>(in), {});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "docker-registry did not listen within 5 s";
}

}  // namespace soyaos::testing
