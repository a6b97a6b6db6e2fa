// A real OCI registry for the registry client's tests: Debian's docker-registry (the CNCF
// distribution registry) started on 127.0.0.1 with a temporary configuration and storage —
// plain http, or TLS with a fresh test CA (openssl, EC P-256) plus htpasswd basic auth.
// Skips (GTEST_SKIP in the caller) when docker-registry is not installed.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace soyaos::testing {

class RegistryServer {
 public:
  struct Options {
    bool tls = false;
    bool auth = false;  // htpasswd basic auth, user "tester", password kPassword
    int port = 0;       // 0: a free one; else this one (a restart on the same address)
    bool access_log = false;  // every request, one line each, in access_log() (from this start)
  };
  static constexpr const char* kUser = "tester";
  static constexpr const char* kPassword = "s3cret-pw";

  RegistryServer() = default;
  ~RegistryServer();
  RegistryServer(const RegistryServer&) = delete;
  RegistryServer& operator=(const RegistryServer&) = delete;

  static bool available();
  // Starts it under `dir` (config, storage, certificates); "" on success, else why not.
  std::string start(const std::filesystem::path& dir, const Options& options);
  void stop();

  // "127.0.0.1:PORT", as references name it.
  [[nodiscard]] const std::string& address() const { return address_; }
  // The test CA's PEM file (TLS only).
  [[nodiscard]] const std::filesystem::path& ca_file() const { return ca_; }
  // The registry's storage root (tampering tests modify blobs there).
  [[nodiscard]] const std::filesystem::path& storage() const { return storage_; }
  // Options::access_log: the combined-format access log (the requests since the last start).
  [[nodiscard]] const std::filesystem::path& access_log() const { return access_log_; }

 private:
  pid_t pid_ = -1;
  std::string address_;
  std::filesystem::path ca_, storage_, access_log_;
};

// A free TCP port on 127.0.0.1 (bound, read and closed: a tiny race is accepted).
int free_port();
// Runs a shell command; its exit status (output discarded unless `out` is given).
int sh(const std::string& command, std::string* out = nullptr);

}  // namespace soyaos::testing
