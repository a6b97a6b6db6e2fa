#include "cli/print_error.h"
#include "cli/run_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "common/digest.h"
#include "common/phase_trace.h"
#include "manifest/manifest.h"
#include "common/text.h"
#include "moon/audit.h"
#include "moon/cache.h"
#include "moon/backend.h"
#include "policy/policy.h"
#include "scope/events.h"

namespace soyaos::cli {
namespace fs = std::filesystem;

struct RunCache::State {
  bool active = false;
  std::string key;
  bool provable = false;
  std::string pack, version, pack_digest, run_id;
  fs::path out_dir;
  bool out_writable = false;
  std::vector<std::string> event_files;
  bool events_to_stdout = false;
  std::optional<moon::ResultCache> cache;
  std::unique_ptr<moon::MoonBackend> moon;  // the daemon when one answers, else embedded
  // An entry found but not genuine (E6): why, for the run's `cache_rejected` event.
  std::optional<nlohmann::ordered_json> rejected;
};

namespace {

void warn(const std::string& what) { print_error("", "cache: " + what); }

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// Writes all of `data` to fd (the replayed output); a closed reader (EPIPE) is not ours
// to report, as with a live run's relay.
void write_fd(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(w);
  }
}

// The operator's Moon configuration shapes what an egress pack can reach (C6a), so it is
// part of such a pack's key. Its bytes as they are ("none" when there is no file).
std::string operator_config_digest(const fs::path& home) {
  fs::path config = home / "moon.yaml";
  if (const char* c = std::getenv("SOYAOS_MOON_CONFIG"); c != nullptr && *c != '\0') config = c;
  std::error_code ec;
  if (!fs::exists(config, ec)) return "none";
  auto d = moon::input_digest(config);
  return d ? *d : "unreadable";
}

// Only a clean, complete run that exited 0 (C10): no violation, no timeout, signal or
// setup failure, nothing the collection had to skip, no output past the capture bound.
// A failure is never stored: it may be transient and must not outlive its cause.
bool result_qualifies(const supervisor::RunReport& r) {
  if (!r.error.empty() || r.violation_count > 0) return false;
  if (r.outcome.ending != supervisor::Ending::exited || r.outcome.stop_signal != 0) return false;
  if (r.exit_code != 0 || r.outcome.status != 0) return false;
  if (!r.captured.enabled || r.captured.out_dropped != 0 || r.captured.err_dropped != 0) return false;
  return r.outputs.skipped.empty();
}

}  // namespace

RunCache::RunCache(std::unique_ptr<State> s) : s_(std::move(s)) {}
RunCache::RunCache(RunCache&&) noexcept = default;
RunCache& RunCache::operator=(RunCache&&) noexcept = default;
RunCache::~RunCache() = default;

RunCache RunCache::prepare(const fs::path& home, const supervisor::RunRequest& req, const manifest::LoadResult& loaded,
                           bool no_cache) {
  auto s = std::make_unique<State>();
  if (no_cache) return RunCache(std::move(s));
  // An invalid manifest or options: run_pack reports them; the cache stays out of the way.
  if (!loaded.manifest) return RunCache(std::move(s));
  const auto& m = *loaded.manifest;
  auto eligible = moon::cache_eligibility(m, !req.options.mounts.empty());
  if (!eligible.cacheable) return RunCache(std::move(s));
  auto policy = policy::compile_policy(m, req.options);
  if (!policy) return RunCache(std::move(s));
  // The replayed tree goes where the run would collect it, and only into a fresh place:
  // a non-empty --out would mix old files into what is stored, or differ from a run.
  std::error_code ec;
  if (fs::exists(policy->out_host_dir, ec) &&
      (!fs::is_directory(policy->out_host_dir, ec) || !fs::is_empty(policy->out_host_dir, ec))) {
    return RunCache(std::move(s));
  }
  auto max = moon::ResultCache::configured_max();
  if (!max) {
    warn(max.error().describe());
    return RunCache(std::move(s));
  }
  auto cache = moon::ResultCache::open(home, *max);
  if (!cache) {
    warn(cache.error().describe() + "; running without the cache");
    return RunCache(std::move(s));
  }
  trace_phase("cache_open");  // bench/startup.sh names a hit's phases too
  auto pack_digest = tree_digest(req.pack_dir);
  if (!pack_digest) return RunCache(std::move(s));
  trace_phase("cache_pack_digest");
  moon::CacheKeyParts parts;
  parts.pack_digest = *pack_digest;
  parts.input_digest = "none";
  // Every input, its content and where it appears (T6): a JSON array of [sandbox path,
  // digest] pairs in mount order, so renaming an input or swapping two changes the key.
  if (!req.options.inputs.empty()) {
    auto targets = policy::input_targets(req.options.inputs);
    if (!targets) return RunCache(std::move(s));  // run_pack says what is wrong with --input
    nlohmann::json enc = nlohmann::json::array();
    for (size_t i = 0; i < req.options.inputs.size(); ++i) {
      auto d = moon::input_digest(req.options.inputs[i].path);
      if (!d) return RunCache(std::move(s));
      enc.push_back({(*targets)[i], *d});
    }
    parts.input_digest = "inputs:sha256:" + sha256_hex(enc.dump());
  }
  parts.args = req.options.extra_args;
  if (m.agent.runtime == manifest::Runtime::native) {
    // The executable is the pack's own entry point: the pack digest covers it.
    parts.interpreter = "native";
    parts.interpreter_digest = "none";
  } else {
    // The runtime layer binds the host's interpreter at the same path (policy.cc).
    parts.interpreter = policy->executable;
    auto id = cache->file_identity(policy->executable);
    if (!id) {
      warn(id.error().describe() + "; running without the cache");
      return RunCache(std::move(s));
    }
    parts.interpreter_digest = *id;
  }
  if (!m.capabilities.egress.empty()) parts.operator_config = operator_config_digest(home);

  trace_phase("cache_key");
  // A flagged version (C8 (4)) is run, never replayed: its runs must warn and emit
  // pack_flagged, which the run's own Moon hooks do.
  // Flagged as NAME@VERSION or as this content (a directory run flags by digest too).
  auto moon_backend = moon::open_moon(home);
  if (!moon_backend) {
    warn(moon_backend.error().describe() + "; running without the cache");
    return RunCache(std::move(s));
  }
  auto flags = (*moon_backend)->flags(m.name, m.version, *pack_digest);
  if (!flags) {
    warn(flags.error().describe() + "; running without the cache");
    return RunCache(std::move(s));
  }
  for (const auto& f : *flags) {
    if (f.active) return RunCache(std::move(s));
  }

  trace_phase("cache_flag_check");
  s->active = true;
  s->key = moon::cache_key(parts);
  s->provable = eligible.provable;
  s->pack = m.name;
  s->version = m.version;
  s->pack_digest = *pack_digest;
  s->run_id = req.options.run_id;
  s->out_dir = policy->out_host_dir;
  s->out_writable = policy->out_writable;
  s->event_files = req.event_files;
  s->events_to_stdout = req.events_to_stdout;
  s->cache.emplace(std::move(cache.value()));
  s->moon = std::move(moon_backend.value());
  return RunCache(std::move(s));
}

std::optional<int> RunCache::replay(const supervisor::RunRequest& /*request*/) {
  if (!s_->active) return std::nullopt;
  bool corrupt = false;
  auto hit = s_->cache->lookup(s_->key, &corrupt);
  if (!hit) {
    warn(hit.error().describe() + "; running");
    return std::nullopt;
  }
  if (corrupt) warn("entry " + s_->key.substr(0, 12) + " failed verification and was removed; running");
  if (!*hit) {
    (void)s_->cache->count_miss();
    return std::nullopt;
  }
  const moon::CacheHit& h = **hit;
  trace_phase("cache_hit_read");
  // The entry must be the result of the run it credits, as the record holds that run
  // (E6: the check `moon check` makes): a forged or edited entry is never replayed. It is
  // dropped (not trusted again), the pack runs, and the run records why (cache_rejected).
  moon::CacheEntryAudit audit;
  audit.key = h.key;
  audit.run_id = audit.manifest_run_id = h.run_id;
  audit.pack = h.pack;
  audit.version = h.version;
  audit.pack_digest = h.pack_digest;
  audit.exit_code = h.exit_code;
  // lookup() checked the bytes against these digests (read_verified): not hashed twice.
  audit.stdout_digest = h.out_digest;
  audit.stderr_digest = h.err_digest;
  audit.has_out = h.has_out_dir;
  for (const auto& n : h.tree) {
    if (n.dir) continue;
    ++audit.out_files;
    audit.out_bytes += n.size;
  }
  auto problem = moon::verify_cache_entry(*s_->moon, audit);
  if (!problem || !problem->empty()) {
    const std::string why = problem ? *problem : "the record cannot be read: " + problem.error().describe();
    warn("entry " + s_->key.substr(0, 12) + " (credited to run " + h.run_id + ") is not replayed: " +
         why + "; running");
    // Only a proven forgery is dropped; an unreadable record leaves the entry for later.
    const bool dropped = problem && s_->cache->drop(s_->key, true);
    (void)s_->cache->count_miss();
    s_->rejected = nlohmann::ordered_json{{"key", s_->key},          {"original_run_id", h.run_id},
                                          {"stored_at", h.stored_at}, {"reason", why},
                                          {"dropped", dropped}};
    return std::nullopt;
  }
  // Sinks first: a bad --events file fails the run (125) before anything is replayed.
  scope::EventSink sink;
  for (const auto& f : s_->event_files) {
    if (auto st = sink.add_file(f); !st) {
      print_error("", st.error());
      return supervisor::kExitSetup;
    }
  }
  if (s_->events_to_stdout) sink.add_stdout();
  uint64_t files = 0, bytes = 0;
  if (h.has_out_dir) {
    if (auto st = s_->cache->materialise_out(h, s_->out_dir); !st) {
      warn(st.error().err == EBADMSG ? "entry " + s_->key.substr(0, 12) + " failed verification and was removed; running"
                                     : st.error().describe() + "; running");
      return std::nullopt;
    }
    for (const auto& n : h.tree) {
      if (n.dir) continue;
      ++files;
      bytes += n.size;
    }
  }
  // As a run relays them: with `--events -` stdout carries the events, the agent's stdout
  // goes to stderr (docs/cli.md).
  write_fd(s_->events_to_stdout ? STDERR_FILENO : STDOUT_FILENO, h.out);
  write_fd(STDERR_FILENO, h.err);
  // C10: a person is never misled into taking a replay for a run.
  const std::string note = "replayed from cache: run " + h.run_id + ", " + h.stored_at + "\n";
  write_fd(STDERR_FILENO, note);
  trace_phase("cache_replayed");
  scope::RunContext ctx{hostname(), s_->run_id, s_->pack, s_->version, s_->pack_digest};
  nlohmann::ordered_json data = {{"key", s_->key},
                                 {"original_run_id", h.run_id},
                                 {"provable", h.provable},
                                 {"stored_at", h.stored_at},
                                 {"exit_code", h.exit_code}};
  if (h.has_out_dir) data["outputs"] = {{"files", files}, {"bytes", bytes}, {"dir", s_->out_dir.string()}};
  auto event = scope::make_event(ctx, "cache_hit", std::move(data));
  // E4: the replay reports its status only once its event is durable.
  Status st = sink.emit(event);
  if (st) st = sink.flush();
  if (st) st = s_->moon->append_events(std::span<const nlohmann::ordered_json>(&event, 1));
  if (!st) {
    print_error("", "events: " + st.error().describe());
    return supervisor::kExitSetup;
  }
  trace_phase("cache_hit_durable");
  (void)s_->cache->touch(s_->key);  // LRU bookkeeping only
  return h.exit_code;
}

void RunCache::arm(supervisor::RunRequest& request) const {
  if (!s_->active) return;
  if (s_->rejected) {
    // In the run's own record, right after run_started: the entry it did not replay, and why.
    request.hooks.before_launch = [rejected = *s_->rejected, next = std::move(request.hooks.before_launch)](
                                      const scope::RunContext& ctx, const supervisor::EmitFn& emit) -> Status {
      emit("cache_rejected", rejected);
      return next ? next(ctx, emit) : Status{};
    };
  }
  request.capture_output = true;
  request.tee_output = true;
  // run_finished names the key its result is stored under (E5), so that the entry can be
  // checked against the run that produced it (E6).
  request.result_cache_key = [key = s_->key](const supervisor::RunReport& r) {
    return result_qualifies(r) ? key : std::string();
  };
}

void RunCache::store(const supervisor::RunReport& r) {
  if (!s_->active || !result_qualifies(r)) return;
  moon::CacheStoreRequest req;
  req.key = s_->key;
  req.pack = s_->pack;
  req.version = s_->version;
  req.pack_digest = s_->pack_digest;
  req.run_id = r.run_id;
  req.provable = s_->provable;
  req.exit_code = r.exit_code;
  req.out = r.captured.out;
  req.err = r.captured.err;
  if (s_->out_writable) req.out_dir = fs::path(r.out_dir);
  if (auto stored = s_->cache->store(req); !stored) warn("result not stored: " + stored.error().describe());
}

}  // namespace soyaos::cli
