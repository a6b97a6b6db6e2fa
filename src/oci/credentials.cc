#include "oci/credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/unique_fd.h"
#include "common/wipe.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawnp's envp

namespace soyaos::oci {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr std::size_t kMaxConfigBytes = std::size_t{4} << 20;
constexpr std::size_t kMaxHelperOutput = std::size_t{1} << 20;
constexpr std::size_t kMaxAuthChars = 65536;

Result<std::string> read_bounded(const fs::path& p, bool& missing) {
  missing = false;
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    if (errno == ENOENT) {
      missing = true;
      return std::string();
    }
    return errno_error("open " + p.string());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + p.string());
  if (!S_ISREG(st.st_mode)) return make_error(p.string() + ": not a regular file");
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read " + p.string());
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxConfigBytes) return make_error(p.string() + ": larger than 4 MiB");
  }
  return out;
}

Result<json> load_config(const fs::path& p) {
  bool missing = false;
  auto text = read_bounded(p, missing);
  if (!text) return text.error();
  if (missing || text->find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(p.string() + ": not a JSON object");
  return j;
}

// "https://r.example:5000/v1/" -> "r.example:5000"
std::string normalise_key(std::string k) {
  if (auto s = k.find("://"); s != std::string::npos) k = k.substr(s + 3);
  if (auto s = k.find('/'); s != std::string::npos) k = k.substr(0, s);
  return k;
}

std::string str_at(const json& o, const char* key) {
  if (!o.is_object()) return "";
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

bool valid_helper_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

struct HelperResult {
  int status = 0;  // exit status (0 success)
  std::string out;
};

// Runs docker-credential-NAME ACTION with `input` on stdin.
Result<HelperResult> run_helper(const std::string& name, const std::string& action, const std::string& input) {
  if (!valid_helper_name(name)) return make_error("credential helper name \"" + name + "\" is not valid");
  const std::string prog = "docker-credential-" + name;
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return errno_error("pipe");
  UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) return errno_error("pipe");
  UniqueFd out_r(out[0]), out_w(out[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_r.get(), 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  std::string a0 = prog, a1 = action;
  char* argv[] = {a0.data(), a1.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, prog.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return make_error("run " + prog + " (from PATH)", rc);
  in_r.reset();
  out_w.reset();
  // The input is a registry name or a small JSON document: it fits in the pipe buffer.
  const ssize_t w = ::write(in_w.get(), input.data(), input.size());
  (void)w;  // a helper that does not read its input fails on its own, visibly
  in_w.reset();
  HelperResult r;
  char buf[4096];
  bool too_big = false;
  while (true) {
    const ssize_t n = ::read(out_r.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (r.out.size() + static_cast<size_t>(n) > kMaxHelperOutput) {
      too_big = true;
      break;
    }
    r.out.append(buf, static_cast<size_t>(n));
  }
  out_r.reset();
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (too_big) return make_error(prog + " " + action + ": output larger than 1 MiB");
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

std::string helper_for(const json& cfg, const std::string& registry) {
  if (cfg.contains("credHelpers") && cfg["credHelpers"].is_object()) {
    for (const auto& [k, v] : cfg["credHelpers"].items()) {
      if (normalise_key(k) == registry && v.is_string()) return v.get<std::string>();
    }
  }
  return "";
}

Status write_config(const fs::path& p, const json& cfg) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) return make_error("create " + p.parent_path().string(), ec.value());
  const fs::path tmp = p.string() + ".tmp-" + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return errno_error("create " + tmp.string());
  const std::string text = cfg.dump(1, '\t') + "\n";
  std::string_view left = text;
  while (!left.empty()) {
    const ssize_t n = ::write(fd.get(), left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e = errno_error("write " + tmp.string());
      (void)::unlink(tmp.c_str());
      return e;
    }
    left.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(fd.get()) != 0 || ::rename(tmp.c_str(), p.c_str()) != 0) {
    Error e = errno_error("write " + p.string());
    (void)::unlink(tmp.c_str());
    return e;
  }
  return {};
}

}  // namespace

fs::path docker_config_path() {
  if (const char* d = std::getenv("DOCKER_CONFIG"); d != nullptr && *d != '\0') return fs::path(d) / "config.json";
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr && *home != '\0' ? home : "/") / ".docker" / "config.json";
}

Result<std::optional<Credentials>> find_credentials(const std::string& registry) {
  const fs::path path = docker_config_path();
  auto cfg = load_config(path);
  if (!cfg) return cfg.error();
  auto from_helper = [&](const std::string& name) -> Result<std::optional<Credentials>> {
    auto r = run_helper(name, "get", registry);
    if (!r) return r.error();
    if (r->status != 0) {
      if (r->out.find("not found") != std::string::npos) return std::optional<Credentials>();
      return make_error("docker-credential-" + name + " get " + registry + " failed (exit " +
                        std::to_string(r->status) + ")");
    }
    json j = json::parse(r->out, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return make_error("docker-credential-" + name + ": its answer is not JSON");
    Credentials c;
    c.username = str_at(j, "Username");
    c.password = str_at(j, "Secret");
    if (c.username == "<token>") {
      c.identity_token = c.password;
      c.username.clear();
      c.password.clear();
    }
    return std::optional<Credentials>(c);
  };
  if (auto h = helper_for(*cfg, registry); !h.empty()) return from_helper(h);
  if (cfg->contains("auths") && (*cfg)["auths"].is_object()) {
    for (const auto& [k, v] : (*cfg)["auths"].items()) {
      if (normalise_key(k) != registry || !v.is_object()) continue;
      Credentials c;
      c.identity_token = str_at(v, "identitytoken");
      if (auto a = str_at(v, "auth"); !a.empty()) {
        // Decoded as Docker decodes it (common/base64.h), the decoding wiped once split.
        Result<std::string> dec = make_error("longer than 64 KiB");
        if (a.size() <= kMaxAuthChars) dec = base64_decode_lenient(a);
        const auto colon = dec ? dec->find(':') : std::string::npos;
        if (colon == std::string::npos) {
          if (dec) wipe(*dec);
          return make_error(path.string() + ": auths." + k + ".auth is not base64 of USER:PASSWORD");
        }
        const WipeOnExit wipe_dec(*dec);
        c.username = dec->substr(0, colon);
        c.password = dec->substr(colon + 1);
      } else {
        c.username = str_at(v, "username");
        c.password = str_at(v, "password");
      }
      if (c.username.empty() && c.password.empty() && c.identity_token.empty()) continue;
      return std::optional<Credentials>(c);
    }
  }
  if (auto store = str_at(*cfg, "credsStore"); !store.empty()) return from_helper(store);
  return std::optional<Credentials>();
}

Result<std::string> store_credentials(const std::string& registry, const Credentials& creds) {
  const fs::path path = docker_config_path();
  auto cfg = load_config(path);
  if (!cfg) return cfg.error();
  std::string helper = helper_for(*cfg, registry);
  if (helper.empty()) helper = str_at(*cfg, "credsStore");
  if (!helper.empty()) {
    const json in = {{"ServerURL", registry}, {"Username", creds.username}, {"Secret", creds.password}};
    auto r = run_helper(helper, "store", in.dump());
    if (!r) return r.error();
    if (r->status != 0) return make_error("docker-credential-" + helper + " store failed (exit " + std::to_string(r->status) + ")");
    return "docker-credential-" + helper;
  }
  if (!cfg->contains("auths") || !(*cfg)["auths"].is_object()) (*cfg)["auths"] = json::object();
  (*cfg)["auths"][registry] = {{"auth", base64_encode(creds.username + ":" + creds.password)}};
  if (auto s = write_config(path, *cfg); !s) return s.error();
  return path.string();
}

Result<bool> erase_credentials(const std::string& registry) {
  const fs::path path = docker_config_path();
  auto cfg = load_config(path);
  if (!cfg) return cfg.error();
  bool erased = false;
  if (cfg->contains("auths") && (*cfg)["auths"].is_object()) {
    json& auths = (*cfg)["auths"];
    for (auto it = auths.begin(); it != auths.end();) {
      if (normalise_key(it.key()) == registry) {
        it = auths.erase(it);
        erased = true;
      } else {
        ++it;
      }
    }
    if (erased) {
      if (auto s = write_config(path, *cfg); !s) return s.error();
    }
  }
  std::string helper = helper_for(*cfg, registry);
  if (helper.empty()) helper = str_at(*cfg, "credsStore");
  if (!helper.empty()) {
    auto r = run_helper(helper, "erase", registry);
    if (!r) return r.error();
    if (r->status == 0) erased = true;
  }
  return erased;
}

}  // namespace soyaos::oci
