#include "net_servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace soyaos::testing {
namespace {

bool is_v6(const std::string& address) { return address.find(':') != std::string::npos; }

void set_timeouts(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// A self-signed P-256 certificate for CN=tls.test, valid from an hour ago for a day.
SSL_CTX* make_tls_context() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) throw std::runtime_error("SSL_CTX_new failed");
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  bool ok = key != nullptr && cert != nullptr;
  if (ok) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("tls.test"), -1, -1,
                               0);
    X509_set_issuer_name(cert, name);
    ok = X509_sign(cert, key, EVP_sha256()) > 0 && SSL_CTX_use_certificate(ctx, cert) == 1 &&
         SSL_CTX_use_PrivateKey(ctx, key) == 1;
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!ok) {
    SSL_CTX_free(ctx);
    throw std::runtime_error("cannot generate the test TLS certificate");
  }
  return ctx;
}

}  // namespace

NetServer::NetServer(const Options& options) : options_(options) {
  const bool v6 = is_v6(options.address);
  const bool udp = options.kind == Kind::kUdpEcho;
  listen_fd_ = ::socket(v6 ? AF_INET6 : AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (v6) {
    ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(options.port);
    if (::inet_pton(AF_INET6, options.address.c_str(), &a->sin6_addr) != 1) {
      throw std::runtime_error("bad IPv6 address " + options.address);
    }
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(options.port);
    if (::inet_pton(AF_INET, options.address.c_str(), &a->sin_addr) != 1) {
      throw std::runtime_error("bad IPv4 address " + options.address);
    }
    len = sizeof *a;
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || (!udp && ::listen(listen_fd_, 128) != 0)) {
    int e = errno;
    ::close(listen_fd_);
    throw std::runtime_error("bind/listen " + options.address + ": " + std::strerror(e));
  }
  len = sizeof ss;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (options.kind == Kind::kTls || options.kind == Kind::kHttps || options.kind == Kind::kTlsHrr) {
    auto* ctx = make_tls_context();
    ssl_ctx_ = ctx;
    SSL_CTX_set_client_hello_cb(ctx, &NetServer::client_hello_cb, this);
    // P-256 only: a client whose first hello carries only an x25519 share (OpenSSL's and
    // Python's default) gets a HelloRetryRequest and sends a second ClientHello.
    if (options.kind == Kind::kTlsHrr && SSL_CTX_set1_groups_list(ctx, "P-256") != 1) {
      SSL_CTX_free(ctx);
      throw std::runtime_error("cannot restrict the TLS groups to P-256");
    }
  }
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  thread_ = std::thread([this, udp] { udp ? udp_loop() : accept_loop(); });
}

NetServer::~NetServer() {
  char c = 1;
  (void)!::write(stop_pipe_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (int fd : conn_fds_) {
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
    threads.swap(conn_threads_);
  }
  for (auto& t : threads) t.join();
  ::close(listen_fd_);
  ::close(stop_pipe_[0]);
  ::close(stop_pipe_[1]);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

int NetServer::accepted() const {
  std::lock_guard lock(mu_);
  return record_.accepted;
}

ServerRecord NetServer::record() const {
  std::lock_guard lock(mu_);
  return record_;
}

std::string NetServer::describe() const {
  auto r = record();
  std::string out = options_.address + ":" + std::to_string(port_) + " accepted " + std::to_string(r.accepted);
  for (const auto& d : r.data) out += "\n  received: " + d.substr(0, 200);
  for (const auto& s : r.sni) out += "\n  sni: " + s;
  return out;
}

bool NetServer::wait_served(int n, int ms) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (served_ >= n) return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void NetServer::accept_loop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(mu_);
    record_.accepted++;
    size_t slot = conn_fds_.size();
    conn_fds_.push_back(fd);
    conn_threads_.emplace_back([this, fd, slot] {
      serve(fd);
      std::lock_guard inner(mu_);
      conn_fds_[slot] = -1;
      ::close(fd);
      served_++;
    });
  }
}

void NetServer::udp_loop() {
  std::vector<char> buf(65536);
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    ssize_t n = ::recvfrom(listen_fd_, buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from),
                           &from_len);
    if (n < 0) continue;
    {
      std::lock_guard lock(mu_);
      record_.accepted++;
      record_.data.emplace_back(buf.data(), static_cast<size_t>(n));
    }
    ::sendto(listen_fd_, buf.data(), static_cast<size_t>(n), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from),
             from_len);
    std::lock_guard lock(mu_);
    served_++;
  }
}

void NetServer::serve(int fd) {
  set_timeouts(fd, options_.idle_timeout_ms);
  std::string got;
  switch (options_.kind) {
    case Kind::kTcpEcho:
      serve_tcp_echo(fd, got);
      break;
    case Kind::kHttp:
      serve_http(fd, got);
      break;
    case Kind::kHttpKeepAlive:
      set_timeouts(fd, 30'000);  // held connections stay quiet for seconds
      serve_http_keep_alive(fd, got);
      break;
    case Kind::kTls:
    case Kind::kHttps:
    case Kind::kTlsHrr:
      serve_tls(fd, got);
      break;
    case Kind::kSentinel: {
      set_timeouts(fd, 500);
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) got.assign(buf, static_cast<size_t>(n));
      break;
    }
    case Kind::kUdpEcho:
      break;
  }
  std::lock_guard lock(mu_);
  record_.data.push_back(std::move(got));
}

void NetServer::serve_tcp_echo(int fd, std::string& got) {
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    if (got.size() < (1u << 20)) got.append(buf, static_cast<size_t>(n));
    if (!write_all(fd, buf, static_cast<size_t>(n))) return;
  }
}

void NetServer::serve_http(int fd, std::string& got) {
  serve_http_with(
      got,
      [fd](char* buf, size_t n) -> ssize_t {
        for (;;) {
          ssize_t r = ::recv(fd, buf, n, 0);
          if (r < 0 && errno == EINTR) continue;
          return r;
        }
      },
      [fd](const std::string& out) { return write_all(fd, out.data(), out.size()); });
  ::shutdown(fd, SHUT_WR);
  // Let the client read the response before the close (a close with unread data would
  // reset the connection).
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {
  }
}

void NetServer::serve_http_keep_alive(int fd, std::string& got) {
  std::string pending;
  char buf[4096];
  for (;;) {
    const auto end = pending.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (pending.size() > 16384) return;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      pending.append(buf, static_cast<size_t>(n));
      if (got.size() < 65536) got.append(buf, static_cast<size_t>(n));
      continue;
    }
    const std::string head = pending.substr(0, end + 4);
    pending.erase(0, end + 4);
    {
      std::lock_guard lock(mu_);
      record_.heads.push_back(head);
    }
    const bool close = lower(head).find("\r\nconnection: close") != std::string::npos;
    const std::string body = "hello, kept alive";
    const std::string response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                                 std::to_string(body.size()) + (close ? "\r\nConnection: close" : "") +
                                 "\r\n\r\n" + body;
    if (!write_all(fd, response.data(), response.size()) || close) return;
  }
}

void NetServer::serve_http_with(std::string& got, const std::function<ssize_t(char*, size_t)>& read,
                                const std::function<bool(const std::string&)>& write) {
  char buf[4096];
  while (got.find("\r\n\r\n") == std::string::npos && got.size() < 16384) {
    ssize_t n = read(buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  auto end = got.find("\r\n\r\n");
  if (end == std::string::npos) return;
  std::string head = got.substr(0, end + 4);
  std::string host;
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    size_t next = head.find("\r\n", pos + 2);
    std::string line = head.substr(pos + 2, next - pos - 2);
    auto colon = line.find(':');
    if (colon != std::string::npos && lower(line.substr(0, colon)) == "host") {
      host = line.substr(colon + 1);
      host.erase(0, host.find_first_not_of(" \t"));
      host.erase(host.find_last_not_of(" \t") + 1);
      break;
    }
    pos = next;
  }
  {
    std::lock_guard lock(mu_);
    record_.heads.push_back(head);
  }
  std::string body = "hello from " + host;
  std::string response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  write(response);
}

// Every ClientHello the server processes (a second one after a HelloRetryRequest too):
// its SNI, so a test sees whether a refused second hello reached the server.
int NetServer::client_hello_cb(SSL* ssl, int* /*alert*/, void* arg) {
  auto* self = static_cast<NetServer*>(arg);
  const unsigned char* ext = nullptr;
  size_t len = 0;
  std::string name;
  // server_name: list length (2), type (1), name length (2), name.
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) == 1 && len > 5) {
    const size_t n = (static_cast<size_t>(ext[3]) << 8) | ext[4];
    if (5 + n <= len) name.assign(reinterpret_cast<const char*>(ext + 5), n);
  }
  std::lock_guard lock(self->mu_);
  self->record_.hello_sni.push_back(name);
  return SSL_CLIENT_HELLO_SUCCESS;
}

void NetServer::serve_tls(int fd, std::string& got) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
  if (ssl == nullptr) return;
  SSL_set_fd(ssl, fd);
  int accepted = SSL_accept(ssl);
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  {
    std::lock_guard lock(mu_);
    record_.sni.emplace_back(sni != nullptr ? sni : "");
  }
  if (accepted == 1 && options_.kind == Kind::kHttps) {
    serve_http_with(
        got, [ssl](char* buf, size_t n) -> ssize_t { return SSL_read(ssl, buf, static_cast<int>(n)); },
        [ssl](const std::string& out) { return SSL_write(ssl, out.data(), static_cast<int>(out.size())) > 0; });
    SSL_shutdown(ssl);
  } else if (accepted == 1) {
    char buf[16384];
    while (true) {
      int n = SSL_read(ssl, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      if (SSL_write(ssl, buf, n) <= 0) break;
    }
    SSL_shutdown(ssl);
  }
  SSL_free(ssl);
  ERR_clear_error();
}

bool host_has_ipv6_loopback() {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// ---- DnsServer ------------------------------------------------------------------------------

DnsServer::DnsServer(std::map<std::string, std::vector<std::string>> records) : records_(std::move(records)) {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || ::pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(fd_);
    throw std::runtime_error("DnsServer: " + std::string(std::strerror(e)));
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { loop(); });
}

DnsServer::~DnsServer() {
  char c = 1;
  (void)!::write(stop_pipe_[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  ::close(stop_pipe_[0]);
  ::close(stop_pipe_[1]);
}

std::vector<std::string> DnsServer::questions() const {
  std::lock_guard lock(mu_);
  return questions_;
}

void DnsServer::loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    uint8_t q[512];
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    const ssize_t n = ::recvfrom(fd_, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 12) continue;
    // One question: labels, then type and class.
    size_t off = 12;
    std::string name;
    while (off < static_cast<size_t>(n) && q[off] != 0 && q[off] < 64) {
      const size_t l = q[off];
      if (off + 1 + l >= static_cast<size_t>(n)) break;
      if (!name.empty()) name += '.';
      for (size_t i = 0; i < l; ++i) name += static_cast<char>(std::tolower(q[off + 1 + i]));
      off += 1 + l;
    }
    if (off + 5 > static_cast<size_t>(n) || q[off] != 0) continue;
    const uint16_t type = static_cast<uint16_t>(q[off + 1] << 8 | q[off + 2]);
    const size_t question_end = off + 5;
    {
      std::lock_guard lock(mu_);
      questions_.push_back(name + " " + (type == 1 ? "A" : type == 28 ? "AAAA" : std::to_string(type)));
    }
    std::vector<uint8_t> r(q, q + question_end);
    r[2] = 0x81;  // QR, RD
    r[3] = 0x80;  // RA, NOERROR
    r[6] = r[7] = r[8] = r[9] = r[10] = r[11] = 0;
    auto it = records_.find(name);
    uint16_t answers = 0;
    if (it == records_.end()) {
      r[3] |= 3;  // NXDOMAIN
    } else {
      for (const auto& text : it->second) {
        uint8_t bytes[16];
        const bool v6 = text.find(':') != std::string::npos;
        if ((type == 1 && v6) || (type == 28 && !v6) || (type != 1 && type != 28)) continue;
        if (::inet_pton(v6 ? AF_INET6 : AF_INET, text.c_str(), bytes) != 1) continue;
        const uint8_t rr[] = {0xc0, 0x0c, 0, static_cast<uint8_t>(type), 0, 1, 0, 0, 0, 60, 0,
                              static_cast<uint8_t>(v6 ? 16 : 4)};
        r.insert(r.end(), rr, rr + sizeof rr);
        r.insert(r.end(), bytes, bytes + (v6 ? 16 : 4));
        ++answers;
      }
    }
    r[6] = static_cast<uint8_t>(answers >> 8);
    r[7] = static_cast<uint8_t>(answers & 0xff);
    (void)::sendto(fd_, r.data(), r.size(), 0, reinterpret_cast<sockaddr*>(&from), from_len);
  }
}

}  // namespace soyaos::testing
