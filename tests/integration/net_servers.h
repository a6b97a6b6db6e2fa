// Real servers on the host's loopback for the egress tests (issue #4): each listens on an
// ephemeral port, serves from its own threads, and records what reached it, so a test can
// assert both that an allowed round trip arrived and that a refused one did not.
//
// Every server starts listening in its constructor (the port is known at once) and stops
// in its destructor (RAII: the accept thread and every connection thread are joined; open
// connections are shut down). Counters and records are safe to read while it runs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct ssl_st;  // OpenSSL's SSL

namespace soyaos::testing {

// What one server saw.
struct ServerRecord {
  int accepted = 0;                 // TCP connections accepted (UDP: datagrams received)
  std::vector<std::string> data;    // per connection (UDP: per datagram), what it received
  std::vector<std::string> sni;     // TLS: the SNI of each handshake ("" when none was sent)
  std::vector<std::string> hello_sni;  // TLS: the SNI of every ClientHello processed, in order
                                       // (a second one after a HelloRetryRequest too)
  std::vector<std::string> heads;   // HTTP: each request head, up to and including CRLFCRLF
};

// The common part: a listening (or bound, for UDP) socket, a stop pipe, an accept loop.
class NetServer {
 public:
  enum class Kind { kTcpEcho, kTls, kTlsHrr, kHttp, kHttpKeepAlive, kHttps, kUdpEcho, kSentinel };
  struct Options {
    Kind kind = Kind::kTcpEcho;
    std::string address = "127.0.0.1";  // "127.0.0.1", "::1", "0.0.0.0", "::"
    uint16_t port = 0;                  // 0: ephemeral
    // A connection quiet for this long is closed by the server (so that a test that leaves
    // one open cannot hang a serving thread). A test that holds relayed connections open on
    // purpose for seconds needs it well above its hold.
    int idle_timeout_ms = 3000;
  };

  explicit NetServer(const Options& options);
  virtual ~NetServer();
  NetServer(const NetServer&) = delete;
  NetServer& operator=(const NetServer&) = delete;

  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] const std::string& address() const { return options_.address; }
  // Connections accepted (TCP) or datagrams received (UDP) so far.
  [[nodiscard]] int accepted() const;
  [[nodiscard]] ServerRecord record() const;
  // Everything received, all connections concatenated (for messages in test failures).
  [[nodiscard]] std::string describe() const;
  // Waits up to `ms` for at least `n` connections/datagrams to have been fully served
  // (the record is written when a connection ends). True when reached.
  bool wait_served(int n, int ms = 2000) const;

 protected:
  Options options_;

 private:
  void accept_loop();
  void udp_loop();
  void serve(int fd);
  void serve_tcp_echo(int fd, std::string& got);
  void serve_http(int fd, std::string& got);
  void serve_http_keep_alive(int fd, std::string& got);
  // One request head read with `read`, recorded, answered with `write` (plain or TLS).
  void serve_http_with(std::string& got, const std::function<ssize_t(char*, size_t)>& read,
                       const std::function<bool(const std::string&)>& write);
  void serve_tls(int fd, std::string& got);
  static int client_hello_cb(ssl_st* ssl, int* alert, void* arg);

  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  ServerRecord record_;
  int served_ = 0;
  std::vector<std::thread> conn_threads_;
  std::vector<int> conn_fds_;
  void* ssl_ctx_ = nullptr;  // SSL_CTX*, TLS only
};

// Echoes every byte back until the client closes (half-closes) its side.
class TcpEchoServer : public NetServer {
 public:
  explicit TcpEchoServer(const std::string& address = "127.0.0.1", int idle_timeout_ms = 3000)
      : NetServer({Kind::kTcpEcho, address, 0, idle_timeout_ms}) {}
};

// TLS with a fresh self-signed certificate (CN tls.test, generated in-process at start):
// completes the handshake, records the SNI, echoes application data.
class TlsEchoServer : public NetServer {
 public:
  explicit TlsEchoServer(const std::string& address = "127.0.0.1") : NetServer({Kind::kTls, address, 0}) {}
};

// TlsEchoServer restricted to the P-256 group: a client whose first ClientHello offers only
// an x25519 key share gets a HelloRetryRequest (issue #18's second-hello checks).
class TlsHrrServer : public NetServer {
 public:
  explicit TlsHrrServer(const std::string& address = "127.0.0.1") : NetServer({Kind::kTlsHrr, address, 0}) {}
};

// HTTP/1.1: reads one request head, records it, answers 200 with the body
// "hello from HOST" (HOST = the request's Host header value, verbatim) and closes.
class HttpServer : public NetServer {
 public:
  explicit HttpServer(const std::string& address = "127.0.0.1") : NetServer({Kind::kHttp, address, 0}) {}
};

// HTTP/1.1 keep-alive: answers every request head on a connection (200, "hello from HOST",
// Content-Length) and keeps the connection until the client closes it, so a client can hold
// many connections open through the gateway (the intercepted-connection caps).
class HttpKeepAliveServer : public NetServer {
 public:
  explicit HttpKeepAliveServer(const std::string& address = "127.0.0.1")
      : NetServer({Kind::kHttpKeepAlive, address, 0}) {}
};

// HttpServer's exchange inside TLS (the TlsEchoServer's self-signed certificate, CN
// tls.test; clients must not verify it): records the SNI and the request head.
class HttpsServer : public NetServer {
 public:
  explicit HttpsServer(const std::string& address = "127.0.0.1") : NetServer({Kind::kHttps, address, 0}) {}
};

// Sends every datagram back to its sender.
class UdpEchoServer : public NetServer {
 public:
  explicit UdpEchoServer(const std::string& address = "127.0.0.1") : NetServer({Kind::kUdpEcho, address, 0}) {}
};

// A listener that must see nothing: accepts (counts), records what arrives within a short
// wait, closes. Bind it to "0.0.0.0" / "::" to catch a leak to any host address, or to
// "::1" for the IPv6 loopback.
class SentinelListener : public NetServer {
 public:
  explicit SentinelListener(const std::string& address = "0.0.0.0") : NetServer({Kind::kSentinel, address, 0}) {}
};

// A DNS server on 127.0.0.1 (UDP), to be the Moon's `dns.upstream`: answers A and AAAA
// questions from `records` (a name -> its addresses, IPv4 and IPv6 text forms; a name with
// no address of the asked type gets NODATA), NXDOMAIN for other names. So a test controls
// what an upstream resolver answers, private and odd address forms included (dns.hosts
// answers are trusted as given and would skip the checks under test).
class DnsServer {
 public:
  explicit DnsServer(std::map<std::string, std::vector<std::string>> records);
  ~DnsServer();
  DnsServer(const DnsServer&) = delete;
  DnsServer& operator=(const DnsServer&) = delete;
  [[nodiscard]] uint16_t port() const { return port_; }
  // Every question asked so far, "NAME TYPE" (TYPE: A, AAAA or the number).
  [[nodiscard]] std::vector<std::string> questions() const;

 private:
  void loop();
  std::map<std::string, std::vector<std::string>> records_;
  int fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> questions_;
};

// host_ipv4_address() is in harness.h.
// True when the host has IPv6 loopback (::1) configured.
bool host_has_ipv6_loopback();

}  // namespace soyaos::testing
