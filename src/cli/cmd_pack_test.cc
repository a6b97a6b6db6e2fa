// `soyaos pack test [DIR|NAME@VERSION|REF] [--strict] [--format text|json]` (SPEC.md T4, C12):
// runs every example of a pack in its own Comet, checks its `expect`, and reports which
// declared capabilities no example exercised (the run-time twin of lint's static check).
// Exit 0 all examples pass, 1 any failure (or no examples, or an invalid manifest, or with
// --strict a capability not exercised), 2 usage error, 125 a Comet could not start.
//
// Examples are independent: up to --jobs of them (default: the CPUs this process may use)
// run at once, each in a worker process of its own (fork() while this process has no
// thread), and the results are printed in example order as soon as every earlier one is in.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/pack_runs.h"
#include "cli/print_error.h"
#include "cli/remote_packs.h"
#include "cli/run_moon.h"
#include "cli/run_secrets.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "manifest/manifest.h"
#include "moon/store.h"
#include "oci/reference.h"
#include "policy/operator_network.h"
#include "supervisor/run.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOut = "/workdir/out";
constexpr const char* kInputs = "/workdir/inputs";
constexpr size_t kStderrTailLines = 20;

struct TestArgs {
  std::string pack = ".";
  bool strict = false;
  std::string format = "text";
  std::vector<std::string> secrets;  // --secret
  unsigned jobs = 0;                  // --jobs; 0: the CPUs this process may use
};

struct ExampleResult {
  std::string name;
  bool passed = false;
  bool not_started = false;  // the Comet could not start (exit 125 before the agent ran)
  long long ms = 0;
  int exit_code = 0;
  std::string reason;
  std::string run_id;
  std::string stderr_tail;
  int stop_signal = 0;  // soyaos received SIGINT/SIGTERM/SIGHUP during it (C9)
};

std::string last_lines(const std::string& text, size_t n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  size_t from = lines.size() > n ? lines.size() - n : 0;
  std::string out;
  // The agent's text inside our report: escaped (E7) and indented, so that it can neither
  // drive the terminal nor pass for a report line (a forged "PASS ...").
  for (size_t i = from; i < lines.size(); ++i) out += "    " + escape_for_terminal(lines[i]) + "\n";
  return out;
}

const manifest::Tool* find_tool(const manifest::Manifest& m, const std::string& name) {
  for (const auto& t : m.tools) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// Marks the declared fs paths one example exercised (see docs/cli.md § soyaos pack test).
void mark_exercised(const manifest::Manifest& m, const manifest::Example& ex, const fs::path& pack_dir,
                    const std::vector<std::string>& outputs, std::vector<bool>& read_hit,
                    std::vector<bool>& write_hit) {
  std::vector<std::string> read_targets, write_targets;
  // The runtime reads its entrypoint from /workdir on every run.
  read_targets.push_back("/workdir/" + m.agent.entrypoint);
  if (!ex.input.empty()) {
    read_targets.emplace_back(kInputs);
    // A declared path below /workdir/inputs: exercised when the input has it.
    for (const auto& r : m.capabilities.fs_read) {
      if (r.path.size() > std::string(kInputs).size() && manifest::path_covers(kInputs, r.path)) {
        std::error_code ec;
        const std::string below = r.path.substr(std::string(kInputs).size() + 1);
        const fs::path input = pack_dir / ex.input;
        if (fs::is_directory(input, ec)) {
          if (fs::exists(input / below, ec)) read_targets.push_back(r.path);
        } else if (below == input.filename().string()) {  // a file input keeps its name
          read_targets.push_back(r.path);
        }
      }
    }
  }
  for (const auto& name : ex.tools) {
    const manifest::Tool* t = find_tool(m, name);
    if (t == nullptr || t->path.empty()) continue;
    if (t->kind == manifest::ToolKind::fs_read) read_targets.push_back(t->path);
    if (t->kind == manifest::ToolKind::fs_write) write_targets.push_back(t->path);
  }
  write_targets.insert(write_targets.end(), outputs.begin(), outputs.end());
  for (size_t i = 0; i < m.capabilities.fs_read.size(); ++i) {
    for (const auto& t : read_targets) {
      if (manifest::path_covers(m.capabilities.fs_read[i].path, t)) read_hit[i] = true;
    }
  }
  for (size_t i = 0; i < m.capabilities.fs_write.size(); ++i) {
    for (const auto& t : write_targets) {
      if (manifest::path_covers(m.capabilities.fs_write[i].path, t)) write_hit[i] = true;
    }
  }
}

std::string violation_text(const supervisor::Violation& v) {
  return v.surface + (v.access.empty() ? "" : " " + v.access) + " " + escape_for_terminal(v.resource);
}

ExampleResult run_example(const manifest::Manifest& m, const manifest::Example& ex, const PackRunContext& ctx,
                          std::vector<bool>& read_hit, std::vector<bool>& write_hit, std::vector<bool>& egress_hit) {
  ExampleResult r;
  r.name = ex.name;
  auto run = run_in_comet(ctx, example_run(ex, ctx.pack_dir));
  const auto& report = run.report;
  r.ms = run.ms;
  r.exit_code = report.exit_code;
  r.run_id = report.run_id;
  r.stderr_tail = last_lines(report.captured.err, kStderrTailLines);
  r.stop_signal = report.outcome.stop_signal;
  if (run.never_ran) {
    r.not_started = report.exit_code == supervisor::kExitSetup;
    // A reason is for people, and quotes what the pack chose: escaped like a violation's
    // resource (violation_text), in the text and the JSON alike.
    r.reason = report.error.empty() ? escape_for_terminal(run.error)
                                    : "the Comet could not start: " + escape_for_terminal(run.error);
    return r;
  }

  const auto& outputs = run.outputs;
  mark_exercised(m, ex, ctx.pack_dir, outputs, read_hit, write_hit);
  // Egress: an entry is exercised when the gateway relayed a connection for it.
  for (size_t i = 0; i < m.capabilities.egress.size(); ++i) {
    const auto& used = report.egress_used;
    const auto& e = m.capabilities.egress[i];
    const std::string key = e.protocol == manifest::Protocol::moon_proxy ? "moon-proxy" : e.key_path;
    if (std::find(used.begin(), used.end(), key) != used.end()) egress_hit[i] = true;
  }

  const int expected = ex.expect.exit_code.value_or(0);
  std::vector<std::string> reasons;
  if (!report.error.empty()) reasons.push_back(escape_for_terminal(report.error));
  if (report.violation_count > 0 && expected != supervisor::kExitViolation) {
    reasons.push_back("capability violation: " + violation_text(report.violations.front()) +
                      (report.violation_count > 1
                           ? " (+" + std::to_string(report.violation_count - 1) + " more)"
                           : ""));
  } else if (report.exit_code != expected) {
    std::string why = "exit " + std::to_string(report.exit_code);
    if (report.outcome.ending == supervisor::Ending::timed_out) why += " (timed out)";
    reasons.push_back(why + ", expected " + std::to_string(expected));
  }
  if (ex.expect.stdout_contains && report.captured.out.find(*ex.expect.stdout_contains) == std::string::npos) {
    reasons.push_back("stdout lacks \"" + escape_for_terminal(*ex.expect.stdout_contains) + "\"");
  }
  for (const auto& o : ex.expect.outputs) {
    fs::path rel = fs::path(o).lexically_normal();
    bool inside = !rel.empty() && rel.is_relative() && *rel.begin() != "..";
    const bool collected =
        inside && std::find(outputs.begin(), outputs.end(), std::string(kOut) + "/" + rel.generic_string()) != outputs.end();
    if (!collected) reasons.push_back("missing output " + escape_for_terminal(o));
  }
  for (size_t i = 0; i < reasons.size(); ++i) r.reason += (i == 0 ? "" : "; ") + reasons[i];
  r.passed = reasons.empty();
  return r;
}

bool print(const std::string& s) { return std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0; }

// What the capabilities' exercise checks collect, one flag per declared entry.
struct Hits {
  std::vector<bool> read, write, egress;
  void merge(const Hits& o) {
    for (size_t i = 0; i < read.size() && i < o.read.size(); ++i) read[i] = read[i] || o.read[i];
    for (size_t i = 0; i < write.size() && i < o.write.size(); ++i) write[i] = write[i] || o.write[i];
    for (size_t i = 0; i < egress.size() && i < o.egress.size(); ++i) egress[i] = egress[i] || o.egress[i];
  }
};

Hits no_hits(const manifest::Manifest& m) {
  return {std::vector<bool>(m.capabilities.fs_read.size()), std::vector<bool>(m.capabilities.fs_write.size()),
          std::vector<bool>(m.capabilities.egress.size())};
}

// The CPUs this process may run on (its affinity mask), at least 1.
unsigned cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
}

// fork() copies only the calling thread: safe while it is the only one (no lock can be
// held by a thread that does not exist in the child).
bool single_threaded() {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return false;
  char line[256];
  long threads = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "Threads:", 8) == 0) {
      threads = std::strtol(line + 8, nullptr, 10);
      break;
    }
  }
  (void)std::fclose(f);
  return threads == 1;
}

nlohmann::json result_json(const ExampleResult& r, const Hits& h) {
  return {{"name", r.name},         {"passed", r.passed},   {"not_started", r.not_started}, {"ms", r.ms},
          {"exit_code", r.exit_code}, {"reason", r.reason}, {"run_id", r.run_id},
          {"stderr_tail", r.stderr_tail}, {"stop_signal", r.stop_signal},
          {"read", h.read}, {"write", h.write}, {"egress", h.egress}};
}

// A worker's answer; nullopt when it is not one (the worker died before writing it).
std::optional<std::pair<ExampleResult, Hits>> parse_result(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    ExampleResult r;
    r.name = j.at("name").get<std::string>();
    r.passed = j.at("passed").get<bool>();
    r.not_started = j.at("not_started").get<bool>();
    r.ms = j.at("ms").get<long long>();
    r.exit_code = j.at("exit_code").get<int>();
    r.reason = j.at("reason").get<std::string>();
    r.run_id = j.at("run_id").get<std::string>();
    r.stderr_tail = j.at("stderr_tail").get<std::string>();
    r.stop_signal = j.at("stop_signal").get<int>();
    Hits h{j.at("read").get<std::vector<bool>>(), j.at("write").get<std::vector<bool>>(),
           j.at("egress").get<std::vector<bool>>()};
    return std::make_pair(std::move(r), std::move(h));
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

bool write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// What one example needs, in the parent and in a worker alike.
struct TestPlan {
  const TestArgs& args;
  fs::path home;
  fs::path pack_dir;
  const manifest::Manifest& m;
  policy::OperatorNetwork network;
  std::string config_digest;
};

// A worker process: runs example `index` with Moon connections of its own (a SQLite
// connection must not cross fork()) and secrets resolved again (the parent's values are
// MADV_WIPEONFORK pages: zeros here), writes its result as one JSON document, exits.
[[noreturn]] void example_worker(const TestPlan& plan, size_t index, int result_fd, pid_t parent) {
  // Its own process group: a terminal's ^C reaches the parent only, which forwards it once
  // to each worker (a second copy would escalate the agent's graceful stop to SIGKILL, C9).
  // Writing to the terminal from a background group must not stop it (stty tostop).
  (void)::setpgid(0, 0);
  (void)::signal(SIGTTOU, SIG_IGN);
  // The parent gone (killed), the example stops as if interrupted: SIGTERM, blocked, is
  // read by the supervisor like any stop signal.
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) != 0 || ::getppid() != parent) (void)::kill(::getpid(), SIGTERM);
  std::string out;
  {
    const manifest::Example& ex = plan.m.examples[index];
    Hits hits = no_hits(plan.m);
    ExampleResult r;
    r.name = ex.name;
    auto secrets = resolve_secrets(plan.m, plan.args.secrets, plan.home);
    auto hooks = moon_run_hooks(plan.home);
    if (secrets.exit_code != 0) {
      r.not_started = true;
      r.exit_code = secrets.exit_code;
      r.reason = escape_for_terminal(secrets.error);  // a reason is escaped when made, as every reason is
    } else if (!hooks) {
      r.not_started = true;
      r.exit_code = supervisor::kExitSetup;
      r.reason = "moon: " + escape_for_terminal(hooks.error().describe());
    } else {
      const PackRunContext ctx{plan.pack_dir, *hooks, plan.network, plan.config_digest, &secrets.secrets};
      r = run_example(plan.m, ex, ctx, hits.read, hits.write, hits.egress);
    }
    out = result_json(r, hits).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  ::_exit(write_all(result_fd, out) ? 0 : 1);  // no atexit handler, no stdio buffer of the parent's
}

// Runs the examples `jobs` at a time in worker processes; `report(i, result, hits)` is
// called in example order, each as soon as it and every earlier one are done. Returns the
// stop signal that interrupted the test (forwarded to every running worker; no new
// example starts), or 0.
int run_in_workers(const TestPlan& plan, unsigned jobs,
                   const std::function<bool(ExampleResult&, const Hits&)>& report, bool& output_failed) {
  const size_t n = plan.m.examples.size();
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  UniqueFd signals(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  struct Running {
    pid_t pid;
    size_t index;
    UniqueFd fd;
    std::string data;
  };
  std::vector<Running> running;
  std::vector<std::optional<std::pair<ExampleResult, Hits>>> done(n);
  size_t next = 0, reported = 0;
  int interrupted = 0;
  const pid_t self = ::getpid();
  while (reported < n) {
    while (interrupted == 0 && running.size() < jobs && next < n) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) break;  // retried when a worker ends (none running: below)
      (void)std::fflush(stdout);
      (void)std::fflush(stderr);
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(p[0]);
        example_worker(plan, next, p[1], self);
      }
      ::close(p[1]);
      if (pid < 0) {
        ::close(p[0]);
        break;
      }
      running.push_back({pid, next++, UniqueFd(p[0]), {}});
    }
    if (running.empty()) {
      // Nothing can start (fork or pipe failed) or nothing is left: what did not run is a
      // Comet that could not start.
      if (next < n && interrupted == 0) {
        ExampleResult r;
        r.name = plan.m.examples[next].name;
        r.not_started = true;
        r.exit_code = supervisor::kExitSetup;
        r.reason = "cannot start a worker process: " + std::string(std::strerror(errno));
        done[next++] = std::make_pair(std::move(r), no_hits(plan.m));
      } else {
        break;
      }
    } else {
      std::vector<struct pollfd> fds;
      for (const auto& w : running) fds.push_back({w.fd.get(), POLLIN, 0});
      if (signals) fds.push_back({signals.get(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
      if (signals && (fds.back().revents & POLLIN) != 0) {
        struct signalfd_siginfo si {};
        while (::read(signals.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          if (interrupted == 0) interrupted = static_cast<int>(si.ssi_signo);
          // Each stop signal goes to every running example once (a second one escalates, C9).
          for (const auto& w : running) (void)::kill(w.pid, static_cast<int>(si.ssi_signo));
        }
      }
      for (size_t k = running.size(); k-- > 0;) {
        if (fds[k].revents == 0) continue;
        char buf[65536];
        ssize_t got = ::read(running[k].fd.get(), buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got > 0) {
          running[k].data.append(buf, static_cast<size_t>(got));
          continue;
        }
        int status = 0;
        while (::waitpid(running[k].pid, &status, 0) < 0 && errno == EINTR) {
        }
        auto parsed = parse_result(running[k].data);
        if (!parsed) {
          ExampleResult r;
          r.name = plan.m.examples[running[k].index].name;
          r.not_started = true;
          r.exit_code = supervisor::kExitSetup;
          r.reason = "the example's worker process ended without a result (" +
                     (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                          : "exit " + std::to_string(WEXITSTATUS(status))) + ")";
          parsed = std::make_pair(std::move(r), no_hits(plan.m));
        }
        if (parsed->first.stop_signal != 0 && interrupted == 0) interrupted = parsed->first.stop_signal;
        done[running[k].index] = std::move(parsed);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    while (reported < n && done[reported]) {
      if (!report(done[reported]->first, done[reported]->second)) output_failed = true;
      ++reported;
    }
    if (interrupted != 0 && running.empty()) break;
  }
  // Interrupted: the examples that did finish, in order, past a gap of ones never started.
  for (size_t i = reported; i < n; ++i) {
    if (done[i] && !report(done[i]->first, done[i]->second)) output_failed = true;
  }
  return interrupted;
}

int run_test(const TestArgs& a, const CliContext& ctx) {
  // As `soyaos run` (C9): before any thread exists, stop signals go to the supervisor only
  // (the example's agent is stopped gracefully and its run recorded), and a closed stdout
  // is an EPIPE, not a death.
  supervisor::block_stop_signals();
  (void)::signal(SIGPIPE, SIG_IGN);
  auto home = moon::default_home();
  if (!home) {
    print_error("pack test", "moon: " + home.error().describe());
    return supervisor::kExitSetup;
  }
  // The operator's network policy (moon.yaml, C6a) applies to every example's Comet.
  policy::OperatorNetwork network;
  std::string config_digest = "none";
  if (!load_operator_network(*home, network, &config_digest)) return supervisor::kExitSetup;
  fs::path pack_dir;
  std::error_code ec;
  if (fs::is_directory(a.pack, ec)) {
    pack_dir = a.pack;
  } else if (std::string why; oci::looks_remote(a.pack) && oci::parse_reference(a.pack, why)) {
    // REGISTRY/REPO[:TAG|@DIGEST]: as `run REF` (C12) — pulled on first use through the
    // same signature and consent gate (refused: 125, "approve"), offline afterwards. (A
    // path that is neither a directory nor a reference is "no such pack directory", 1.)
    auto remote = remote_pack_dir(*home, a.pack);
    if (remote.dir.empty()) {
      print_error("pack test", remote.error);
      return remote.exit_code != 0 ? remote.exit_code : supervisor::kExitSetup;
    }
    pack_dir = remote.dir;
  } else if (a.pack.find('@') != std::string::npos) {
    auto dir = pack_dir_for_ref(*home, a.pack);
    if (!dir) {
      print_error("pack test", dir.error());
      return 1;
    }
    pack_dir = *dir;
  } else {
    print_error("pack test", a.pack + ": no such pack directory (or NAME@VERSION)");
    return 1;
  }
  auto loaded = manifest::load_pack(pack_dir);
  if (!loaded.manifest) {
    for (const auto& d : loaded.errors) std::fprintf(stderr, "%s\n", d.format().c_str());
    return 1;
  }
  const manifest::Manifest& m = *loaded.manifest;
  if (m.examples.empty()) {
    std::fprintf(stderr,
                 "soyaos pack test: %s@%s declares no examples: nothing was tested "
                 "(add an `examples:` list to soyapack.yaml)\n",
                 m.name.c_str(), m.version.c_str());
    return 1;
  }
  // C11: every declared secret's value, before any example runs (2: a bad --secret; 125: a
  // value that cannot be found).
  auto secrets = resolve_secrets(m, a.secrets, *home);
  if (secrets.exit_code != 0) {
    print_error("pack test", secrets.error);
    return secrets.exit_code;
  }
  auto hooks = moon_run_hooks(*home);
  if (!hooks) {
    print_error("pack test", "moon: " + hooks.error().describe());
    return supervisor::kExitSetup;
  }

  const bool text = a.format == "text";
  Hits hits = no_hits(m);
  std::vector<ExampleResult> results;
  int passed = 0, failed = 0;
  bool not_started = false;
  // One example's result, in example order.
  auto report = [&](ExampleResult& r, const Hits& h) -> bool {
    hits.merge(h);
    (r.passed ? passed : failed)++;
    not_started = not_started || r.not_started;
    bool ok = true;
    if (text) {
      std::string line = std::string(r.passed ? "PASS" : "FAIL") + "  " + r.name + "  (" + std::to_string(r.ms) + " ms)";
      if (!r.passed) line += "  " + r.reason;
      line += "\n";
      if (!r.passed && !r.stderr_tail.empty()) line += r.stderr_tail;
      ok = print(line);
    } else if (!r.passed && !r.stderr_tail.empty()) {
      std::fprintf(stderr, "%s: stderr:\n%s", r.name.c_str(), r.stderr_tail.c_str());
    }
    results.push_back(std::move(r));
    return ok;
  };
  const auto jobs = static_cast<unsigned>(std::min<size_t>(a.jobs != 0 ? a.jobs : cpu_count(), m.examples.size()));
  int sig = 0;
  if (jobs > 1 && single_threaded()) {
    // The workers open their own Moon connections: none of ours may cross fork().
    *hooks = supervisor::RunHooks{};
    TestPlan plan{a, *home, pack_dir, m, network, config_digest};
    bool output_failed = false;
    sig = run_in_workers(plan, jobs, report, output_failed);
    if (output_failed) return 1;
  } else {
    const PackRunContext ctx{pack_dir, *hooks, network, config_digest, &secrets.secrets};
    for (const auto& ex : m.examples) {
      Hits h = no_hits(m);
      auto r = run_example(m, ex, ctx, h.read, h.write, h.egress);
      sig = r.stop_signal != 0 ? r.stop_signal : supervisor::take_pending_stop_signal();
      if (!report(r, h)) return 1;
      if (sig != 0) break;
    }
  }
  if (sig != 0) {
    // Interrupted: the examples that were running are recorded; the rest are not started.
    std::fprintf(stderr, "soyaos pack test: interrupted (signal %d); %zu of %zu examples not run\n", sig,
                 m.examples.size() - results.size(), m.examples.size());
    return 128 + sig;
  }

  // Only meaningful when every example ran: a Comet that could not start exercised nothing.
  std::vector<std::string> not_exercised;
  for (size_t i = 0; !not_started && i < hits.read.size(); ++i) {
    if (!hits.read[i]) not_exercised.push_back(m.capabilities.fs_read[i].key_path + " " + m.capabilities.fs_read[i].path);
  }
  for (size_t i = 0; !not_started && i < hits.write.size(); ++i) {
    // Private scratch (/tmp, M6) is the Comet's own tmpfs, as lint's SP113 exempts it.
    if (manifest::is_private_scratch(m.capabilities.fs_write[i].path)) continue;
    if (!hits.write[i]) not_exercised.push_back(m.capabilities.fs_write[i].key_path + " " + m.capabilities.fs_write[i].path);
  }
  for (size_t i = 0; !not_started && i < hits.egress.size(); ++i) {
    const auto& e = m.capabilities.egress[i];
    if (!hits.egress[i]) {
      not_exercised.push_back(e.key_path + " " + e.host + ":" + std::to_string(e.port) + "/" +
                              manifest::to_string(e.protocol));
    }
  }

  if (text) {
    std::string out = std::to_string(passed) + " passed, " + std::to_string(failed) + " failed\n";
    if (!not_exercised.empty()) {
      out += std::string(a.strict ? "error" : "warning") + ": capabilities not exercised by any example: ";
      for (size_t i = 0; i < not_exercised.size(); ++i) out += (i == 0 ? "" : ", ") + escape_for_terminal(not_exercised[i]);
      out += "\n";
    }
    if (!print(out)) return 1;
  } else {
    nlohmann::ordered_json doc;
    doc["examples"] = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      doc["examples"].push_back({{"name", r.name},
                                 {"passed", r.passed},
                                 {"ms", r.ms},
                                 {"exit_code", r.exit_code},
                                 {"reason", r.reason},
                                 {"run_id", r.run_id}});
    }
    doc["passed"] = passed;
    doc["failed"] = failed;
    doc["not_exercised"] = not_exercised;
    if (!print(doc.dump() + "\n")) return 1;
  }
  (void)ctx;
  if (not_started) return supervisor::kExitSetup;
  if (failed > 0 || (a.strict && !not_exercised.empty())) return 1;
  return 0;
}

}  // namespace

void register_pack_test(Command pack, CliContext& ctx) {
  auto args = std::make_shared<TestArgs>();
  auto cmd = pack.add_subcommand("test", "Run every example of a pack in a Comet and check its `expect`");
  cmd.add_option("pack", args->pack,
                 "Pack directory (default: the current directory), NAME@VERSION, or REGISTRY/REPO[:TAG|@DIGEST]");
  cmd.add_flag("--strict", args->strict, "Fail when a declared fs or egress capability is exercised by no example");
  cmd.add_option("--secret", args->secrets,
                 "NAME, NAME=env:VAR or NAME=file:PATH: the value of a declared secret (as for `soyaos run`); "
                 "repeatable. Without it, the Moon's secret store")
      .allow_extra_args(false);
  cmd.add_option("--format", args->format, "Output format: text (default) or json")
      .check_member({"text", "json"});
  cmd.add_option("--jobs", args->jobs,
                 "How many examples run at once, each in its own Comet (default: the CPUs soyaos may use); "
                 "results are printed in example order")
      .check_positive();
  cmd.callback([args, &ctx] { ctx.exit_code = run_test(*args, ctx); });
}

}  // namespace soyaos::cli
