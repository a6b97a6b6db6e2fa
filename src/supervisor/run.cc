#include "supervisor/run.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <unistd.h>

#include "comet/cgroup.h"
#include "comet/launcher.h"
#include "comet/seccomp_filter.h"
#include "common/digest.h"
#include "common/phase_trace.h"
#include "common/text.h"
#include "manifest/manifest.h"
#include "supervisor/egress_plan.h"
#include "supervisor/egress_service.h"
#include "supervisor/interception.h"
#include "supervisor/network_log.h"
#include "supervisor/provenance.h"
#include "supervisor/violation_log.h"

namespace soyaos::supervisor {
namespace {

// The supervisor's own CPU time (user + system, every thread; not the agent's), in ms.
long supervisor_cpu_ms() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
}

// The supervisor's own peak resident memory (VmHWM), in KiB.
long supervisor_peak_rss_kb() {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      kb = std::strtol(line + 6, nullptr, 10);
      break;
    }
  }
  (void)std::fclose(f);
  return kb;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// `v` is already bounded (ViolationLog::bounded): valid UTF-8, cut to size.
nlohmann::ordered_json violation_data(const Violation& v) {
  nlohmann::ordered_json d = {{"surface", v.surface},       {"resource", v.resource},
                      {"syscall", v.syscall},       {"errno", v.errno_name},
                      {"manifest_entry", v.manifest_entry}};
  // Network refusals seen by the netns (NFLOG) or the gateway carry no pid.
  if (v.pid != 0) d["pid"] = v.pid;
  if (!v.access.empty()) d["access"] = v.access;
  if (!v.detail.empty()) d["detail"] = v.detail;
  return d;
}

int exit_code_for(const RunOutcome& o) {
  // C9: soyaos itself received signal N (also when the agent had already ended by then).
  if (o.stop_signal != 0) return 128 + o.stop_signal;
  switch (o.ending) {
    case Ending::exec_failed: return kExitNotExecutable;
    case Ending::timed_out: return kExitTimeout;
    case Ending::interrupted: return 128 + o.status;
    case Ending::signaled: return o.status == SIGKILL ? kExitKilled : 128 + o.status;
    case Ending::exited: return o.status;
  }
  return kExitSetup;
}

const char* ending_name(Ending e) {
  switch (e) {
    case Ending::exited: return "exited";
    case Ending::signaled: return "signaled";
    case Ending::timed_out: return "timed_out";
    case Ending::exec_failed: return "exec_failed";
    case Ending::interrupted: return "interrupted";
  }
  return "?";
}

nlohmann::ordered_json limit_mechanisms(const comet::CgroupPlan& plan) {
  nlohmann::ordered_json m = {{"memory", plan.mechanism(plan.memory, true)},
                              {"pids", plan.mechanism(plan.pids, true)},
                              {"cpu", plan.mechanism(plan.cpu, false)},
                              {"write_quota", "tmpfs"},
                              {"open_files", "rlimit"}};
  if (!plan.why_not.empty()) m["why_not_cgroup"] = plan.why_not;
  return m;
}

// What the run's cgroup counted against its limits: an OOM kill (the run then exits 137,
// docs/events.md `limit_exceeded`) and refused threads at pids.max.
void emit_limits_exceeded(const comet::CgroupUsage& u, const comet::CgroupPlan& plan, const policy::Policy& policy,
                          const RunOutcome& outcome, const EmitFn& emit, std::vector<std::string>& said) {
  if (u.oom_kills > 0) {
    said.push_back("killed by the kernel: memory limit of " + std::to_string(policy.limits.memory_bytes) +
                   " bytes exceeded (resources.memory, " + comet::to_string(plan.memory.version) + ")");
    nlohmann::ordered_json d = {{"limit", "memory"},
                                {"mechanism", comet::to_string(plan.memory.version)},
                                {"limit_bytes", policy.limits.memory_bytes},
                                {"action", "killed"},
                                {"oom_kills", u.oom_kills}};
    if (u.memory_peak > 0) d["peak_bytes"] = u.memory_peak;
    d["agent_signal"] = outcome.ending == Ending::signaled ? outcome.status : 0;
    emit("limit_exceeded", std::move(d));
  }
  if (u.pids_refused > 0) {
    said.push_back(std::to_string(u.pids_refused) + " thread(s) refused at the pids limit of " +
                   std::to_string(policy.limits.pids) + " (resources.pids)");
    emit("limit_exceeded", {{"limit", "pids"},
                            {"mechanism", comet::to_string(plan.pids.version)},
                            {"limit_pids", policy.limits.pids},
                            {"action", "refused"},
                            {"refused", u.pids_refused}});
  }
}

}  // namespace

RunReport run_pack(const RunRequest& request) {
  // Before any thread of this run exists (C9): see block_stop_signals().
  block_stop_signals();
  RunReport report;
  report.run_id = request.options.run_id.empty() ? scope::new_run_id() : request.options.run_id;

  manifest::LoadResult loaded = request.loaded != nullptr ? *request.loaded : manifest::load_pack(request.pack_dir);
  if (!loaded.manifest) {
    report.error = "invalid manifest:";
    for (const auto& d : loaded.errors) report.error += "\n  " + d.format();
    return report;
  }
  if (request.amend_manifest) request.amend_manifest(*loaded.manifest);
  const auto& m = *loaded.manifest;
  trace_phase("manifest");
  // C11: exactly the declared secrets, each with a value (the CLI resolves them and refuses
  // a missing one; this keeps every other caller honest).
  for (const auto& d : m.secrets) {
    auto it = std::find_if(request.secrets.begin(), request.secrets.end(),
                           [&](const policy::RunSecret& s) { return s.name == d.name; });
    if (it == request.secrets.end() || it->value.empty() || it->placeholder.empty()) {
      report.error = "secret " + d.name + " has no value (give --secret " + d.name + " or `soyaos secret set " +
                     d.name + "`)";
      return report;
    }
  }
  for (const auto& s : request.secrets) {
    if (std::none_of(m.secrets.begin(), m.secrets.end(), [&](const manifest::SecretDecl& d) { return d.name == s.name; })) {
      report.error = "secret " + s.name + " is not declared by the manifest";
      return report;
    }
  }
  // One scan gives the digest and the exclusions: the /workdir view is what the digest
  // covers (SPEC T6).
  auto tree = scan_pack(request.pack_dir);
  if (!tree) {
    report.error = "pack " + request.pack_dir.string() + ": " + tree.error().describe();
    return report;
  }
  auto digest = tree_digest(request.pack_dir, *tree);
  if (!digest) {
    report.error = "digest of the pack: " + digest.error().describe();
    return report;
  }
  trace_phase("pack_digest");
  policy::RunOptions options = request.options;
  options.run_id = report.run_id;
  options.digest = *digest;
  options.pack_excluded = std::move(tree->excluded);
  for (const auto& secret : request.secrets) options.secret_placeholders.emplace_back(secret.name, secret.placeholder);
  auto policy = policy::compile_policy(m, options);
  if (!policy) {
    report.error = policy.error().describe();
    return report;
  }
  // C11: the gateway reads the connections of entries with `http` rules or a bound secret,
  // terminating TLS with a CA of this run's own, which the Comet then trusts.
  auto interception = make_interception(policy->egress, request.secrets, request.network.tls_ca_files);
  if (!interception) {
    report.error = interception.error().describe();
    return report;
  }
  if (*interception && (*interception)->authority) {
    if (auto s = trust_run_ca(*policy, (*interception)->authority->ca_pem()); !s) {
      report.error = s.error().describe();
      return report;
    }
  }
  // What run_started records about the run's inputs and manifest (E5): read now, before
  // anything starts; an input that vanished since the usage checks refuses the run.
  auto inputs = inputs_record(options.inputs);
  if (!inputs) {
    report.error = inputs.error().describe();
    return report;
  }
  // The manifest recorded and kept (E5) is the text that was parsed into the policy in force
  // (LoadResult::text), not a second read of the file, which could have changed meanwhile.
  const std::string* manifest_text = &loaded.text;
  trace_phase("policy");
  // Every run gets the network layer, also with `egress: []`: then every attempt is
  // refused by the netns and reported, instead of failing unseen with ENETUNREACH.
  auto egress = EgressPlan::build(*policy, request.network, request.network.proxy_allow, request.learn);
  if (!egress) {
    report.error = egress.error().describe();
    return report;
  }
  // Benchmark baseline only (bench/observe.sh); recorded in run_started.
  const char* unobserved_env = std::getenv("SOYAOS_BENCH_UNOBSERVED");
  const bool observe_paths = unobserved_env == nullptr || std::string(unobserved_env) != "1";
  auto program = comet::build_agent_filter(observe_paths);
  if (!program) {
    report.error = "seccomp: " + program.error().describe();
    return report;
  }

  // Which kernel mechanism bounds memory and pids on this host (C9): the plan the caller's
  // launcher thread was started from, if any.
  auto cgroups = request.launcher != nullptr ? Result<comet::CgroupPlan>(request.launcher->plan())
                                             : comet::probe_cgroups();
  if (!cgroups) {
    report.error = "cgroup: " + cgroups.error().describe();
    return report;
  }
  // The run's cgroup, and the thread that will clone the Comet into it, enter it now at the
  // latest: the kernel's grace-period wait for that move (7-25 ms of idle wall) passes while
  // the run is recorded below (launch_thread.h). The limits are in place before the clone.
  // A failure is reported by launch_comet.
  std::optional<comet::LaunchThread> own_launcher;
  comet::LaunchThread* launcher = request.launcher;
  if (launcher == nullptr) launcher = &own_launcher.emplace(*cgroups, comet::run_cgroup_name(policy->identity.run_id));
  launcher->set_limits(policy->limits);
  trace_phase("plan");

  scope::EventSink sink;
  for (const auto& f : request.event_files) {
    if (auto s = sink.add_file(f); !s) {
      report.error = s.error().describe();
      return report;
    }
  }
  if (request.events_to_stdout) sink.add_stdout();
  scope::RunContext ctx{hostname(), report.run_id, m.name, m.version, *digest};
  // Each event is serialized once, for the files, stdout and the Moon alike.
  const scope::EventFormat event_format(ctx);
  // Events come from three threads (this one, the seccomp notifier, the egress loop).
  std::recursive_mutex emit_mu;
  // The network's events are bounded per class (network_log.h), violations by ViolationLog.
  NetworkEventLog network_log;
  std::map<std::string, uint64_t> dropped_events;  // per type, past their caps (E4)
  auto emit = [&](const std::string& type, nlohmann::ordered_json data) {
    std::lock_guard lock(emit_mu);
    const std::string closed_reason = type == "egress_closed" ? data.value("reason", "") : "";
    if ((closed_reason == "upstream unreachable" || closed_reason == "upstream error") &&
        report.upstream_failures.size() < kMaxUpstreamFailures) {
      // The agent saw only a reset (or the Moon proxy's 502): the summary says why, and
      // that the upstream failed (not a violation of the agent's).
      const std::string host = data.value("host", "");
      const uint64_t port = data.value("port", uint64_t{0});
      std::string line = closed_reason + ": " +
                         egress_target(host, static_cast<uint16_t>(port), data.value("protocol", "")) + ": " +
                         data.value("error", "unreachable");
      if (std::find(report.upstream_failures.begin(), report.upstream_failures.end(), line) ==
          report.upstream_failures.end()) {
        report.upstream_failures.push_back(std::move(line));
      }
    }
    if (type == "limit_exceeded" && data.contains("limit_connections")) {  // the egress gateway's caps
      const std::string limit = data.value("limit", "");
      report.limits_exceeded.push_back(
          std::to_string(data.value("refused", uint64_t{0})) +
          (limit == "dns_tcp_connections"       ? " DNS-over-TCP connection(s)"
           : limit == "intercepted_connections" ? " intercepted connection(s)"
                                                : " connection(s)") +
          " refused at the egress gateway's limit of " + std::to_string(data.value("limit_connections", uint64_t{0})) +
          " open at once (docs/network.md, Limits)");
    }
    const std::string time = scope::now_rfc3339();
    if (NetworkEventLog::bounds(type) && !network_log.record(type, data, time)) return;
    if (type == "egress_opened" && data.contains("entry") && data["entry"].is_string()) {
      // Through the Moon proxy the entry is the operator's proxy.allow[i]; the pack's
      // moon-proxy entry is what was exercised.
      const std::string entry = data.contains("via") ? "moon-proxy" : data["entry"].get<std::string>();
      if (std::find(report.egress_used.begin(), report.egress_used.end(), entry) == report.egress_used.end()) {
        report.egress_used.push_back(entry);
      }
    }
    scope::Event event = event_format.make(type, data, scope::new_event_id(), time);
    // A failing event sink must not go unnoticed (E4): remember it and fail the run.
    if (auto s = sink.emit(event); !s && report.error.empty()) {
      report.error = "events: " + s.error().describe();
    }
    event.data = &data;
    if (request.hooks.on_event) request.hooks.on_event(ctx, event);  // the Moon, as it happens
  };
  nlohmann::ordered_json started = {{"host", ctx.host},
                       {"user", run_user()},
                       {"rootless", ::geteuid() != 0},
                       {"manifest_digest", "sha256:" + sha256_hex(*manifest_text)},
                       {"moon_config_digest", request.moon_config_digest},
                       {"capabilities", capabilities_in_force(m, *policy, options.mounts)},
                       {"operator_policy", operator_policy(request.network)},
                       {"inputs", std::move(inputs.value())},
                       {"runtime", manifest::to_string(m.agent.runtime)},
                       {"entrypoint", m.agent.entrypoint},
                       {"argv", policy->argv},
                       {"determinism_tier", manifest::to_string(m.capabilities.tier)},
                       {"limits",
                        {{"memory_bytes", policy->limits.memory_bytes},
                         {"pids", policy->limits.pids},
                         {"timeout_ms", policy->limits.timeout_ms},
                         {"write_quota_bytes", policy->limits.write_quota_bytes},
                         {"open_files", policy->limits.open_files}}},
                       {"limit_mechanisms", limit_mechanisms(*cgroups)},
                       {"rlimit_only", cgroups->rlimit_only()},
                       {"path_observation", observe_paths}};
  if (request.learn) started["learn"] = request.learn_record.is_null() ? nlohmann::ordered_json::object()
                                                                       : request.learn_record;
  emit("run_started", std::move(started));
  trace_phase("run_started_emitted");
  // The run's record is complete in the Moon: every event durable (E4). A failure fails the run.
  auto store_events = [&] {
    if (!request.hooks.finish) return;
    if (auto s = request.hooks.finish(); !s) {
      report.error = "moon: " + s.error().describe();
      report.exit_code = kExitSetup;
    }
  };
  if (request.hooks.keep_manifest) {
    if (auto s = request.hooks.keep_manifest(*manifest_text); !s) {
      // As with before_launch: the Moon failed, the run does not start.
      report.error = "moon: keep the run's manifest: " + s.error().describe();
      emit("run_finished", {{"exit_code", kExitSetup}, {"error", report.error}, {"violations", 0}});
      (void)sink.flush();
      store_events();
      report.exit_code = kExitSetup;
      return report;
    }
  }
  trace_phase("manifest_kept");
  if (request.hooks.before_launch) {
    if (auto s = request.hooks.before_launch(ctx, emit); !s) {
      report.error = "moon: " + s.error().describe();
      emit("run_finished", {{"exit_code", kExitSetup}, {"error", report.error}, {"violations", 0}});
      (void)sink.flush();
      store_events();
      return report;
    }
  }
  trace_phase("flag_check");
  // No agent runs without its run_started on disk: a run killed from here on is found
  // dead by the Moon (run_incomplete) instead of leaving no trace.
  if (request.hooks.wait_durable) {
    if (auto s = request.hooks.wait_durable(); !s) {
      report.error = "moon: " + s.error().describe();
      emit("run_finished", {{"exit_code", kExitSetup}, {"error", report.error}, {"violations", 0}});
      (void)sink.flush();
      store_events();
      report.exit_code = kExitSetup;
      return report;
    }
  }

  trace_phase("run_started_durable");
  // Interrupted during setup: the agent is not started at all, the run is still recorded.
  if (int sig = take_pending_stop_signal(); sig != 0) {
    report.exit_code = 128 + sig;
    report.outcome.ending = Ending::interrupted;
    report.outcome.status = sig;
    report.outcome.stop_signal = sig;
    emit("run_finished", {{"exit_code", report.exit_code}, {"ending", ending_name(Ending::interrupted)},
                          {"signal", sig}, {"violations", 0}, {"started", false}});
    (void)sink.flush();
    store_events();
    return report;
  }
  auto launched = comet::launch_comet(*policy, *program, egress->network_plan(), *cgroups, *launcher);
  if (!launched) {
    report.error = launched.error().describe();
    emit("run_finished", {{"exit_code", kExitSetup}, {"error", report.error}, {"violations", 0}});
    (void)sink.flush();
    store_events();
    report.exit_code = kExitSetup;
    return report;
  }
  if (launcher->entered_ns() != 0) trace_phase_at("mark:cgroup_entered", launcher->entered_ns());
  trace_phase_at("clone3", launched->launch_ns);
  for (int i = 0; i < comet::kStepCount; ++i) {
    trace_child_phase(comet::kSetupStepNames[i], launched->step_ns[i], launched->step_cpu_ns[i]);
  }
  trace_phase("comet_ready");
  // Each layer's cost, from the child's timestamps (bench/startup.sh reads these).
  nlohmann::ordered_json setup_us = nlohmann::ordered_json::object();
  uint64_t prev = launched->launch_ns;
  for (int i = 0; i < comet::kStepCount; ++i) {
    setup_us[comet::kSetupStepNames[i]] = (launched->step_ns[i] - prev) / 1000;
    prev = launched->step_ns[i];
  }
  report.captured.enabled = request.capture_output;
  report.captured.tee = request.tee_output;
  // `--events -`: stdout carries only the events; the agent's stdout goes to stderr.
  report.captured.relay_stdout_fd = request.events_to_stdout ? STDERR_FILENO : STDOUT_FILENO;
  ViolationLog violation_log;
  auto on_violation = [&](const Violation& raw) {
    Violation v = ViolationLog::bounded(raw);
    std::lock_guard lock(emit_mu);
    if (violation_log.record(v, scope::now_rfc3339())) {
      report.violations.push_back(v);
      // A learn run (C13) observes: the same data, a type that flags nothing in the registry.
      emit(request.learn ? "learn_observed" : "capability_violation", violation_data(v));
    }
  };
  EgressCallbacks egress_callbacks;
  egress_callbacks.violation = on_violation;
  egress_callbacks.event = emit;
  EgressService network(*egress, std::move(launched->network), egress_callbacks, {}, interception->get());
  if (auto s = network.start(); !s) {
    report.error = "network: egress gateway: " + s.error().describe();
    ::kill(launched->pid, SIGKILL);
    emit("run_finished", {{"exit_code", kExitSetup}, {"error", report.error}, {"violations", 0}});
    (void)sink.flush();
    store_events();
    report.exit_code = kExitSetup;
    return report;
  }
  trace_phase("gateway_started");
  auto outcome = supervise(*launched, *policy, on_violation, &report.captured);
  trace_phase("agent_exited");
  // The agent is gone: the last refusals are read, open connections closed (and logged).
  network.stop();
  trace_phase("network_stopped");
  if (!outcome) {
    report.error = "supervisor: " + outcome.error().describe();
    emit("run_finished", {{"exit_code", kExitSetup}, {"error", report.error}, {"violations", 0}});
    (void)sink.flush();
    store_events();
    report.exit_code = kExitSetup;
    return report;
  }
  report.outcome = *outcome;
  emit_limits_exceeded(launched->cgroup.usage(), *cgroups, *policy, report.outcome, emit, report.limits_exceeded);
  report.out_dir = policy->out_host_dir.string();
  if (policy->out_writable) {
    auto collected = collect_outputs(launched->out_dir, report.out_dir, policy->limits.write_quota_bytes);
    if (collected) {
      report.outputs = *collected;
    } else {
      report.error = "collect /workdir/out: " + collected.error().describe();
    }
  }
  // A signal during the collection counts as one during the run (C9: 128+N).
  if (int sig = take_pending_stop_signal(); sig != 0 && report.outcome.stop_signal == 0) {
    report.outcome.stop_signal = sig;
  }
  trace_phase("collected");
  report.violation_count = violation_log.total();
  report.violation_aggregates = violation_log.aggregated();
  report.violations_dropped = violation_log.dropped();
  report.exit_code = report.violation_count == 0 ? exit_code_for(report.outcome) : kExitViolation;
  if (report.outcome.ending == Ending::exec_failed) report.exit_code = kExitNotExecutable;

  nlohmann::ordered_json counts = nlohmann::ordered_json::object();
  for (const auto& [surface, n] : violation_log.by_surface()) counts[surface] = n;
  if (violation_log.dropped() > 0) {
    dropped_events[request.learn ? "learn_observed" : "capability_violation"] = violation_log.dropped();
  }
  for (const auto& [type, n] : network_log.dropped_by_class()) dropped_events[type] = n;
  nlohmann::ordered_json network_by_class = nlohmann::ordered_json::object();
  for (const auto& [type, n] : network_log.totals()) network_by_class[type] = n;
  nlohmann::ordered_json dropped = nlohmann::ordered_json::object();
  for (const auto& [type, n] : dropped_events) dropped[type] = n;
  nlohmann::ordered_json finished = {{"exit_code", report.exit_code},
                        {"ending", ending_name(report.outcome.ending)},
                        {"agent_status", report.outcome.agent_status},
                        {"agent_signaled", report.outcome.agent_signaled},
                        {"duration_ms", static_cast<double>(report.outcome.duration_us) / 1000.0},
                        {"violations", report.violation_count},
                        {"violations_by_surface", counts},
                        {"violations_aggregated", violation_log.aggregated_json()},
                        {"events_dropped", dropped},
                        {"notifications", report.outcome.notifications},
                        {"network_events", network_log.total()},
                        {"network_events_by_type", network_by_class},
                        {"network_events_aggregated", network_log.aggregated_json()},
                        {"network_events_dropped", network_log.dropped()},
                        {"setup_us", setup_us},
                        {"supervisor_peak_rss_kb", supervisor_peak_rss_kb()},
                        {"supervisor_cpu_ms", supervisor_cpu_ms()},
                        {"outputs", {{"files", report.outputs.files}, {"bytes", report.outputs.bytes},
                                     {"skipped", report.outputs.skipped},
                                     {"skipped_count", report.outputs.skipped_count},
                                     {"dir", valid_utf8(report.out_dir)}}}};
  // What the run produced, by digest (E5): a cache entry must match these (E6).
  std::string digest_error;
  nlohmann::ordered_json produced =
      output_digests(report.captured, policy->out_writable && report.error.empty(), report.out_dir, digest_error);
  for (auto& [k, v] : produced.items()) finished["outputs"][k] = std::move(v);
  if (!digest_error.empty() && report.error.empty()) report.error = digest_error;
  if (request.result_cache_key) {
    if (std::string key = request.result_cache_key(report); !key.empty()) finished["cache_key"] = key;
  }
  if (report.outcome.stop != Stop::none || report.outcome.stop_signal != 0) {
    // How the run was stopped (C9): what the operator or the timeout asked, and whether
    // the agent ended within its grace period.
    nlohmann::ordered_json stop = {{"reason", report.outcome.ending == Ending::timed_out ? "timeout" : "signal"},
                                   {"how", to_string(report.outcome.stop)},
                                   {"grace_ms", report.outcome.grace_ms}};
    if (report.outcome.stop_signal != 0) {
      stop["signal"] = report.outcome.stop_signal;
      stop["signal_name"] = sigabbrev_np(report.outcome.stop_signal) != nullptr
                                ? std::string("SIG") + sigabbrev_np(report.outcome.stop_signal)
                                : std::to_string(report.outcome.stop_signal);
    }
    finished["stop"] = std::move(stop);
  }
  trace_phase("outputs_digested");
  emit("run_finished", std::move(finished));
  if (auto s = sink.flush(); !s && report.error.empty()) report.error = "events: " + s.error().describe();
  if (!report.error.empty() && report.exit_code == 0) report.exit_code = kExitSetup;
  store_events();
  trace_phase("durable");
  return report;
}

}  // namespace soyaos::supervisor
