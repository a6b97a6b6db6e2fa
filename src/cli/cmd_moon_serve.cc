// `soyaos moon serve [--socket PATH] [--group NAME]` and `soyaos moon status
// [--format text|json]` (docs/moon.md "Daemon mode").
//
// serve: the Moon as a daemon on a unix socket (default $SOYAOS_MOON_SOCKET, else
// $SOYAOS_HOME/moon.sock; mode 0600,
// or 0660 owned by --group). Runs in the foreground, logs one line per notable request on
// stderr, stops on SIGTERM/SIGINT/SIGHUP (removing the socket). Exit 0 after a clean stop,
// 1 when it cannot start (another daemon answers on the socket, an unknown group...).
//
// status: which Moon this `soyaos` uses (the same selection as every other command:
// SOYAOS_MOON_SOCKET, else a daemon answering on $SOYAOS_HOME/moon.sock, else embedded),
// its state directory and counts, and the daemon's pid and uptime. Exit 0, 1 when the Moon
// cannot be reached or read.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "comet/network.h"
#include "cli/remote_flags.h"
#include "common/text.h"
#include "moon/backend.h"
#include "moon/server.h"
#include "scope/events.h"

#ifndef SOYAOS_VERSION
#define SOYAOS_VERSION "0.0.0"
#endif

namespace soyaos::cli {
namespace {

struct ServeArgs {
  std::string socket;
  std::string group;
  size_t max_clients = 64;
};

// How often `moon serve` publishes queued flags: 60 s, or SOYAOS_MOON_FLAG_INTERVAL_MS (tests).
std::chrono::milliseconds flag_publish_interval() {
  const char* v = std::getenv("SOYAOS_MOON_FLAG_INTERVAL_MS");
  if (v == nullptr || *v == '\0') return std::chrono::seconds(60);
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  if (end == nullptr || *end != '\0' || ms < 10 || ms > 86'400'000) return std::chrono::seconds(60);
  return std::chrono::milliseconds(ms);
}

int serve(const ServeArgs& a) {
  auto home = moon::default_home();
  if (!home) {
    print_error("moon serve", home.error());
    return 1;
  }
  moon::ServeOptions opt;
  opt.home = *home;
  // --socket, else SOYAOS_MOON_SOCKET (where this operator's clients look), else the home's.
  const char* env = std::getenv(moon::kSocketEnv);
  opt.socket = !a.socket.empty()                 ? std::filesystem::path(a.socket)
               : (env != nullptr && *env != '\0') ? std::filesystem::path(env)
                                                  : moon::default_socket(*home);
  opt.group = a.group;
  opt.max_clients = a.max_clients;
  opt.version = SOYAOS_VERSION;
  // Every log line is escaped here, once (E7): it quotes what clients sent (an op, a name, an
  // error of their request) and what registries answered; the callers pass it raw.
  opt.log = [](const std::string& line) {
    std::fprintf(stderr, "soyaos moon serve: %s  %s\n", scope::now_rfc3339().c_str(), escape_for_terminal(line).c_str());
    (void)std::fflush(stderr);
  };
  // Netfilter's hooks kept enabled while the daemon lives: each Comet's network layer is
  // then cheaper to set up and tear down (comet/network.h). An optimisation, not a layer:
  // without it (no namespaces for this user, say) runs are as they are without a daemon.
  auto hooks = comet::hold_netfilter_hooks();
  if (!hooks) opt.log("netfilter hooks not held (runs set them up each time): " + hooks.error().describe());
  // C12: the flags queued for registries in this Moon (by embedded commands of the home and
  // by the daemon's clients) are published from here too (cli/remote_flags.h), every 60 s,
  // honouring their backoff. The thread is started with the stop signals
  // blocked (serve() takes them through a signalfd, which every thread must leave to it)
  // and ends with serve().
  struct Publisher {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
  };
  auto pub = std::make_shared<Publisher>();
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  sigset_t old_mask;
  (void)::pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  std::thread publisher([pub, home = *home, log = opt.log] {
    std::unique_lock<std::mutex> lock(pub->mu);
    for (;;) {
      if (pub->cv.wait_for(lock, flag_publish_interval(), [&] { return pub->stop; })) return;
      lock.unlock();
      PublishOptions publish;
      publish.honour_backoff = true;
      publish.quick = true;
      // The daemon's own queue (what its clients' runs queued), with the credentials and
      // configuration of the daemon's user and home; no reaping from this thread.
      if (auto m = moon::open_embedded(home, /*reap=*/false); !m) {
        log("queued flags: " + m.error().describe());
      } else {
        for (const auto& n : publish_queued_flags(**m, home, publish)) log(n);
      }
      lock.lock();
    }
  });
  (void)::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  auto s = moon::serve(opt);
  {
    std::lock_guard<std::mutex> lock(pub->mu);
    pub->stop = true;
  }
  pub->cv.notify_all();
  publisher.join();
  if (!s) {
    print_error("moon serve", s.error());
    return 1;
  }
  return 0;
}

std::string uptime(int64_t s) {
  char buf[64];
  if (s >= 86400) {
    (void)std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400), static_cast<long long>(s % 86400 / 3600));
  } else if (s >= 3600) {
    (void)std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
  } else if (s >= 60) {
    (void)std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    (void)std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  }
  return buf;
}

int status(const std::string& format) {
  auto home = moon::default_home();
  if (!home) {
    print_error("moon status", home.error());
    return 1;
  }
  auto m = moon::open_moon(*home);
  if (!m) {
    print_error("moon status", m.error());
    return 1;
  }
  auto st = (*m)->status();
  if (!st) {
    print_error("moon status", st.error());
    return 1;
  }
  if (format == "json") {
    std::printf("%s\n", moon::to_json(*st).dump(2).c_str());
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  if (st->daemon) {
    std::printf("mode:     daemon at %s\n", st->socket.c_str());
  } else {
    std::printf("mode:     embedded\n");
  }
  std::printf("home:     %s\n", st->home.c_str());
  if (st->daemon) {
    std::printf("pid:      %lld\n", static_cast<long long>(st->pid));
    std::printf("started:  %s  (up %s)\n", st->started_at.c_str(), uptime(st->uptime_s).c_str());
    std::printf("version:  soyaos %s\n", st->version.c_str());
    std::printf("clients:  %lld\n", static_cast<long long>(st->clients));
  }
  std::printf("packs:    %lld\n", static_cast<long long>(st->packs));
  std::printf("events:   %lld\n", static_cast<long long>(st->events));
  if (!st->stale_socket.empty()) {
    std::printf("note:     %s exists but no daemon answers on it (a stale socket: `soyaos moon serve` replaces it)\n",
                st->stale_socket.c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

void register_moon_serve_commands(Command moon_cmd, CliContext& ctx) {
  {
    auto a = std::make_shared<ServeArgs>();
    auto cmd = moon_cmd.add_subcommand("serve", "Run the Moon as a daemon on a unix socket (foreground)");
    cmd.add_option("--socket", a->socket, "Socket path (default: $SOYAOS_MOON_SOCKET, else $SOYAOS_HOME/moon.sock)");
    cmd.add_option("--group", a->group, "Let this group use the daemon (socket mode 0660), else 0600");
    cmd.add_option("--max-clients", a->max_clients, "Clients served at once (default 64); more wait")
        .check_positive();
    cmd.callback([a, &ctx] { ctx.exit_code = serve(*a); });
  }
  {
    auto format = std::make_shared<std::string>("text");
    auto cmd = moon_cmd.add_subcommand("status", "Which Moon soyaos uses (daemon or embedded), its state and counts");
    cmd.add_option("--format", *format, "Output format: text (default) or json")
        .check_member({"text", "json"});
    cmd.callback([format, &ctx] { ctx.exit_code = status(*format); });
  }
}

}  // namespace soyaos::cli
