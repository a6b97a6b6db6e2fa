// `soyaos scope query|tail` (SPEC.md E3): the Scope events stored by the Moon
// ($SOYAOS_HOME/moon.db, or the daemon's: docs/moon.md).
// Text: one line per event, `TIME  TYPE  SUBJECT  summary`; json: JSON Lines, each event
// exactly as stored. Exit 0, 1 when the store cannot be read, 2 usage error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/text.h"
#include "moon/backend.h"

namespace soyaos::cli {
namespace {

using json = nlohmann::json;

struct QueryArgs {
  std::string run, type, pack, since;
  std::string format = "text";
  int64_t limit = 1000;
};

// The summary column: run id, then the fields that say what happened.
std::string summary(const moon::StoredEvent& e) {
  const json ev = json::parse(e.json, nullptr, false);
  std::string out = e.run_id.empty() ? "" : "run=" + e.run_id;
  if (ev.is_discarded() || !ev.contains("data") || !ev["data"].is_object()) return out;
  for (const auto& [k, v] : ev["data"].items()) {
    if (k == "run_id" || k == "pack" || k == "version" || k == "digest") continue;
    if (v.is_object() || v.is_array()) continue;  // keep the line short: json has it all
    out += (out.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

std::string subject(const moon::StoredEvent& e) {
  const json ev = json::parse(e.json, nullptr, false);
  if (!ev.is_discarded() && ev.contains("subject") && ev["subject"].is_string()) return ev["subject"];
  return e.pack.empty() ? "-" : e.pack + "@" + e.version;
}

bool print_events(const std::vector<moon::StoredEvent>& events, const std::string& format) {
  for (const auto& e : events) {
    if (format == "json") {
      if (std::fwrite(e.json.data(), 1, e.json.size(), stdout) != e.json.size()) return false;
      std::fputc('\n', stdout);
    } else {
      // Every field but the time may hold agent-chosen text: escaped (E7).
      std::printf("%s  %s  %s  %s\n", escape_for_terminal(e.time).c_str(), escape_for_terminal(e.type).c_str(),
                  escape_for_terminal(subject(e)).c_str(), escape_for_terminal(summary(e)).c_str());
    }
  }
  return std::fflush(stdout) == 0;
}

// --since: RFC 3339 (or a prefix: 2026-11-29, 2026-11-29T12:00) or a duration ago
// (30s, 10m, 2h, 7d). nullopt when neither.
std::optional<std::string> parse_since(const std::string& s) {
  if (s.size() >= 2 && s.size() <= 10 && s.find_first_not_of("0123456789") == s.size() - 1) {
    const char unit = s.back();
    long long n = 0;
    for (char c : s.substr(0, s.size() - 1)) n = n * 10 + (c - '0');  // at most 9 digits
    long long secs = unit == 's' ? n : unit == 'm' ? n * 60 : unit == 'h' ? n * 3600 : unit == 'd' ? n * 86400 : -1;
    if (secs < 0) return std::nullopt;
    std::time_t t = std::time(nullptr) - static_cast<std::time_t>(secs);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[64];
    if (std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm) == 0) return std::nullopt;
    return std::string(buf);
  }
  // YYYY-MM-DD[Thh:mm[:ss[.ffffff]]][Z]: compared as text with the stored UTC times.
  static const char* kShape = "dddd-dd-ddTdd:dd:dd";
  std::string t = s;
  if (!t.empty() && t.back() == 'Z') t.pop_back();
  if (t.size() < 10) return std::nullopt;
  for (size_t i = 0; i < t.size(); ++i) {
    const char want = i < 19 ? kShape[i] : (i == 19 ? '.' : 'd');
    const bool ok = want == 'd' ? (t[i] >= '0' && t[i] <= '9') : t[i] == want;
    if (!ok) return std::nullopt;
  }
  if (t.size() > 10 && t.size() != 16 && t.size() < 19) return std::nullopt;
  return t;
}

// The Moon's store: through the daemon when one answers, else embedded (moon/backend.h).
Result<std::unique_ptr<moon::MoonBackend>> open_events() {
  auto home = moon::default_home();
  if (!home) return home.error();
  return moon::open_moon(*home);
}

int run_query(const QueryArgs& a) {
  moon::EventQuery q;
  if (!a.run.empty()) q.run_id = a.run;
  if (!a.type.empty()) q.type = a.type;
  if (!a.pack.empty()) q.pack = a.pack;
  if (!a.since.empty()) {
    q.since = parse_since(a.since);
    if (!q.since) {
      std::fprintf(stderr, "soyaos scope query: --since: expected an RFC 3339 UTC time (2026-11-29T12:00:00Z) "
                           "or a duration (30s, 10m, 2h, 7d), got '%s'\n", a.since.c_str());
      return kExitUsage;
    }
  }
  if (a.limit < 0) {
    std::fprintf(stderr, "soyaos scope query: --limit must be >= 0\n");
    return kExitUsage;
  }
  q.limit = a.limit;
  auto store = open_events();
  if (!store) {
    std::fprintf(stderr, "soyaos scope query: %s\n", store.error().describe().c_str());
    return 1;
  }
  auto events = (*store)->query_events(q);
  if (!events) {
    std::fprintf(stderr, "soyaos scope query: %s\n", events.error().describe().c_str());
    return 1;
  }
  return print_events(*events, a.format) ? 0 : 1;
}

int run_tail(bool follow, int64_t lines, const std::string& format) {
  auto store = open_events();
  if (!store) {
    std::fprintf(stderr, "soyaos scope tail: %s\n", store.error().describe().c_str());
    return 1;
  }
  moon::EventQuery q;
  q.limit = lines;
  int64_t last = 0;
  if (lines == 0) {  // -n 0: only what comes next
    moon::EventQuery one;
    one.limit = 1;
    auto latest = (*store)->query_events(one);
    if (!latest) return std::fprintf(stderr, "soyaos scope tail: %s\n", latest.error().describe().c_str()), 1;
    if (!latest->empty()) last = latest->back().seq;
  } else {
    auto events = (*store)->query_events(q);
    if (!events) return std::fprintf(stderr, "soyaos scope tail: %s\n", events.error().describe().c_str()), 1;
    if (!print_events(*events, format)) return 1;
    if (!events->empty()) last = events->back().seq;
  }
  while (follow) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    moon::EventQuery next;
    next.after_seq = last;
    auto events = (*store)->query_events(next);
    if (!events) return std::fprintf(stderr, "soyaos scope tail: %s\n", events.error().describe().c_str()), 1;
    if (!print_events(*events, format)) return 1;  // the reader went away
    if (!events->empty()) last = events->back().seq;
  }
  return 0;
}

}  // namespace

void register_scope_commands(CLI::App& app, CliContext& ctx) {
  auto* scope = app.add_subcommand("scope", "Query the Scope events stored by the Moon");
  scope->require_subcommand(1);
  {
    auto a = std::make_shared<QueryArgs>();
    auto* cmd = scope->add_subcommand("query", "Print stored events, oldest first, filtered");
    cmd->add_option("--run", a->run, "Only events of this run id");
    cmd->add_option("--type", a->type, "Only events of this type (capability_violation, run_finished...)");
    cmd->add_option("--pack", a->pack, "Only events of this pack name");
    cmd->add_option("--since", a->since, "Only events at or after this time: RFC 3339 UTC, or 30s/10m/2h/7d ago");
    cmd->add_option("--format", a->format, "Output format: text (default) or json (JSON Lines)")
        ->check(CLI::IsMember({"text", "json"}));
    cmd->add_option("--limit", a->limit, "At most the N most recent matches (default 1000; 0: all)");
    cmd->callback([a, &ctx] { ctx.exit_code = run_query(*a); });
  }
  {
    auto follow = std::make_shared<bool>(false);
    auto lines = std::make_shared<int64_t>(20);
    auto format = std::make_shared<std::string>("text");
    auto* cmd = scope->add_subcommand("tail", "Print the last events; -f keeps printing new ones");
    cmd->add_flag("-f,--follow", *follow, "Keep polling for new events (Ctrl-C to stop)");
    cmd->add_option("-n,--lines", *lines, "How many of the last events (default 20)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--format", *format, "Output format: text (default) or json (JSON Lines)")
        ->check(CLI::IsMember({"text", "json"}));
    cmd->callback([follow, lines, format, &ctx] { ctx.exit_code = run_tail(*follow, *lines, *format); });
  }
  register_scope_verify(*scope, ctx);
}

}  // namespace soyaos::cli
