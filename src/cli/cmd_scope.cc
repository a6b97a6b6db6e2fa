// `soyaos scope query|tail` (SPEC.md E3, E7): the Scope events stored by the Moon
// ($SOYAOS_HOME/moon.db, or the daemon's: docs/moon.md).
// Text: one line per event, `SEQ  TIME  TYPE  SUBJECT  summary`, every field escaped;
// json: JSON Lines, each event as stored plus its store sequence number as the CloudEvents
// extension attribute `soyaosseq`; ocsf: OCSF 1.1 (docs/ocsf.md). After the events, a
// `cursor: SEQ` line on stderr: `--after SEQ` resumes exactly there. Exit 0, 1 when the
// store cannot be read, 2 usage error.
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "common/digest.h"
#include "common/text.h"
#include "moon/backend.h"
#include "scope/ocsf.h"

namespace soyaos::cli {
namespace {

using json = nlohmann::ordered_json;

// The filters `scope query` and `scope tail` share (E7).
struct Filters {
  std::string run, pack, since, until, user;
  std::vector<std::string> types;
  int64_t after = -1;  // -1: not given
  std::string format = "text";
};

struct QueryArgs {
  Filters f;
  int64_t limit = 1000;
  bool manifest = false;
};

// The summary column: run id, then the fields that say what happened.
std::string summary(const moon::StoredEvent& e, const json& ev) {
  std::string out = e.run_id.empty() ? "" : "run=" + e.run_id;
  if (ev.is_discarded() || !ev.contains("data") || !ev["data"].is_object()) return out;
  for (const auto& [k, v] : ev["data"].items()) {
    if (k == "run_id" || k == "pack" || k == "version" || k == "digest") continue;
    if (v.is_object() || v.is_array()) continue;  // keep the line short: json has it all
    out += (out.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

std::string subject(const moon::StoredEvent& e, const json& ev) {
  if (!ev.is_discarded() && ev.contains("subject") && ev["subject"].is_string()) return ev["subject"];
  return e.pack.empty() ? "-" : e.pack + "@" + e.version;
}

// Prints events in one of the three formats; remembers the run users OCSF needs.
class Printer {
 public:
  Printer(std::string format, moon::MoonBackend& moon) : format_(std::move(format)), moon_(moon) {}

  // False when stdout is gone (the reader went away).
  bool print(const std::vector<moon::StoredEvent>& events) {
    std::string out;
    for (const auto& e : events) {
      json ev = json::parse(e.json, nullptr, false);
      if (format_ == "json") {
        if (ev.is_object()) {
          ev["soyaosseq"] = e.seq;  // CloudEvents extension: lower-case alphanumerics only
          out += ev.dump(-1, ' ', false, json::error_handler_t::replace);
        } else {
          out += e.json;  // not an object (a damaged row): as stored, `scope verify` names it
        }
      } else if (format_ == "ocsf") {
        out += scope::to_ocsf(ev.is_object() ? ev : json::object(), e.seq, run_user(e.run_id))
                   .dump(-1, ' ', false, json::error_handler_t::replace);
      } else {
        // Every field but seq may hold agent-chosen text: escaped (E7).
        out += std::to_string(e.seq) + "  " + escape_for_terminal(e.time) + "  " + escape_for_terminal(e.type) +
               "  " + escape_for_terminal(subject(e, ev)) + "  " + escape_for_terminal(summary(e, ev));
      }
      out += '\n';
      cursor_ = e.seq;
    }
    if (!out.empty() && std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) return false;
    return std::fflush(stdout) == 0;
  }
  [[nodiscard]] int64_t cursor() const { return cursor_; }
  void set_cursor(int64_t c) { cursor_ = c; }

 private:
  // The {uid, name} run_started recorded for `run_id` (null when unknown), looked up once.
  json run_user(const std::string& run_id) {
    if (run_id.empty()) return nullptr;
    auto it = users_.find(run_id);
    if (it != users_.end()) return it->second;
    json user = nullptr;
    moon::EventQuery q;
    q.run_id = run_id;
    q.type = "run_started";
    q.limit = 1;
    q.first = true;
    if (auto started = moon_.query_events(q); started && !started->empty()) {
      json ev = json::parse(started->front().json, nullptr, false);
      if (ev.is_object() && ev.contains("soyaosuid")) {  // the daemon's attribution (SO_PEERCRED)
        user = {{"uid", ev["soyaosuid"]}, {"name", ev.value("soyaosuser", "")}};
      } else if (ev.is_object() && ev.contains("data") && ev["data"].is_object() && ev["data"].contains("user")) {
        user = ev["data"]["user"];
      }
    }
    if (users_.size() > 10000) users_.clear();  // bounded memory on an endless tail
    users_[run_id] = user;
    return user;
  }

  std::string format_;
  moon::MoonBackend& moon_;
  std::map<std::string, json> users_;
  int64_t cursor_ = 0;
};

// --since/--until: RFC 3339 (a date, or a time to the minute, second or fraction; `Z` or
// a `±hh:mm` offset; no offset is UTC) or a duration ago (30s, 10m, 2h, 7d). Returns the
// UTC text "YYYY-MM-DDThh:mm:ss.ffffff" that compares with the stored times as text;
// nullopt when neither form.
std::optional<std::string> parse_time(const std::string& s) {
  std::time_t t = 0;
  std::string frac = "000000";
  if (s.size() >= 2 && s.size() <= 10 && s.find_first_not_of("0123456789") == s.size() - 1) {
    const char unit = s.back();
    long long n = 0;
    for (char c : s.substr(0, s.size() - 1)) n = n * 10 + (c - '0');  // at most 9 digits
    long long secs = unit == 's' ? n : unit == 'm' ? n * 60 : unit == 'h' ? n * 3600 : unit == 'd' ? n * 86400 : -1;
    if (secs < 0) return std::nullopt;
    t = std::time(nullptr) - static_cast<std::time_t>(secs);
  } else {
    // YYYY-MM-DD[Thh:mm[:ss[.f+]]][Z|±hh:mm]
    auto digits = [&](size_t pos, size_t n) {
      if (pos + n > s.size()) return false;
      for (size_t i = pos; i < pos + n; ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
      }
      return true;
    };
    auto num = [&](size_t pos, size_t n) { return std::stoi(s.substr(pos, n)); };
    if (!digits(0, 4) || s.size() < 10 || s[4] != '-' || !digits(5, 2) || s[7] != '-' || !digits(8, 2))
      return std::nullopt;
    std::tm tm{};
    tm.tm_year = num(0, 4) - 1900;
    tm.tm_mon = num(5, 2) - 1;
    tm.tm_mday = num(8, 2);
    size_t i = 10;
    if (i < s.size() && (s[i] == 'T' || s[i] == 't' || s[i] == ' ')) {
      if (!digits(i + 1, 2) || i + 3 >= s.size() + 0 || s[i + 3] != ':' || !digits(i + 4, 2)) return std::nullopt;
      tm.tm_hour = num(i + 1, 2);
      tm.tm_min = num(i + 4, 2);
      i += 6;
      if (i < s.size() && s[i] == ':') {
        if (!digits(i + 1, 2)) return std::nullopt;
        tm.tm_sec = num(i + 1, 2);
        i += 3;
        if (i < s.size() && s[i] == '.') {
          size_t j = i + 1;
          while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
          if (j == i + 1) return std::nullopt;
          frac = s.substr(i + 1, std::min<size_t>(6, j - i - 1));
          frac.append(6 - frac.size(), '0');
          i = j;
        }
      }
    }
    long offset = 0;
    if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
      ++i;
    } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      if (!digits(i + 1, 2) || i + 3 >= s.size() || s[i + 3] != ':' || !digits(i + 4, 2)) return std::nullopt;
      offset = (num(i + 1, 2) * 3600L + num(i + 4, 2) * 60L) * (s[i] == '-' ? -1 : 1);
      i += 6;
    }
    if (i != s.size()) return std::nullopt;
    if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
      return std::nullopt;
    t = ::timegm(&tm) - static_cast<std::time_t>(offset);
  }
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  if (std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm) == 0) return std::nullopt;
  return std::string(buf) + "." + frac;
}

// The Moon's store: through the daemon when one answers, else embedded (moon/backend.h).
Result<std::unique_ptr<moon::MoonBackend>> open_events() {
  auto home = moon::default_home();
  if (!home) return home.error();
  return moon::open_moon(*home);
}

bool is_hex_digest(const std::string& d) {
  return d.size() == 71 && d.rfind("sha256:", 0) == 0 && d.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

// Filters -> EventQuery. A usage problem: the message (exit 2).
Result<moon::EventQuery> build_query(const Filters& f, moon::MoonBackend& moon) {
  moon::EventQuery q;
  if (!f.run.empty()) q.run_id = f.run;
  for (const auto& arg : f.types) {
    size_t start = 0;
    while (start <= arg.size()) {
      size_t end = arg.find(',', start);
      if (end == std::string::npos) end = arg.size();
      std::string t = arg.substr(start, end - start);
      while (!t.empty() && t.front() == ' ') t.erase(t.begin());
      while (!t.empty() && t.back() == ' ') t.pop_back();
      if (!t.empty()) q.types.push_back(t);
      start = end + 1;
    }
  }
  if (!f.types.empty() && q.types.empty()) return make_error("--type: no event type given");
  if (!f.pack.empty()) {
    if (f.pack.rfind("sha256:", 0) == 0) {
      if (!is_hex_digest(f.pack)) return make_error("--pack " + f.pack + ": a digest is sha256: and 64 lower-case hex digits");
      // Events carry the tree digest; a pushed pack's archive digest names the same tree.
      q.digest = f.pack;
      auto pushed = moon.find_by_digest(f.pack);
      if (pushed && *pushed && (*pushed)->digest == f.pack) q.digest = (*pushed)->tree_digest;
    } else if (auto at = f.pack.find('@'); at != std::string::npos) {
      if (at == 0 || at + 1 == f.pack.size()) return make_error("--pack " + f.pack + ": expected NAME, NAME@VERSION or sha256:HEX");
      q.pack = f.pack.substr(0, at);
      q.version = f.pack.substr(at + 1);
    } else {
      q.pack = f.pack;
    }
  }
  if (!f.user.empty()) {
    if (f.user.find_first_not_of("0123456789") == std::string::npos && f.user.size() <= 10) {
      q.uid = std::stoll(f.user);
    } else {
      struct passwd pw {};
      struct passwd* found = nullptr;
      std::vector<char> buf(16384);
      if (::getpwnam_r(f.user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
        return make_error("--user " + f.user + ": no such user (give a user name or a numeric uid)");
      q.uid = static_cast<int64_t>(found->pw_uid);
    }
  }
  for (auto [text, dest, name] : {std::tuple{&f.since, &q.since, "--since"}, std::tuple{&f.until, &q.until, "--until"}}) {
    if (text->empty()) continue;
    *dest = parse_time(*text);
    if (!*dest) {
      return make_error(std::string(name) + ": expected an RFC 3339 time (2026-11-29T12:00:00Z, 2026-11-29T13:00:00+01:00, "
                        "2026-11-29) or a duration ago (30s, 10m, 2h, 7d), got '" + *text + "'");
    }
  }
  if (f.after < -1) return make_error("--after must be a sequence number >= 0");
  if (f.after >= 0) {
    q.after_seq = f.after;
    q.first = true;  // paging forward from the cursor
  }
  return q;
}

void print_cursor(int64_t cursor) { std::fprintf(stderr, "cursor: %lld\n", static_cast<long long>(cursor)); }

// `--manifest`: the soyapack.yaml the run used, as the Moon keeps it (checked against the
// digest run_started recorded).
int print_manifest(const QueryArgs& a, moon::MoonBackend& moon) {
  if (a.f.run.empty()) {
    std::fprintf(stderr, "soyaos scope query: --manifest needs --run RUN_ID\n");
    return kExitUsage;
  }
  moon::EventQuery q;
  q.run_id = a.f.run;
  q.type = "run_started";
  q.limit = 1;
  q.first = true;
  auto started = moon.query_events(q);
  if (!started) {
    print_error("scope query", started.error());
    return 1;
  }
  if (started->empty()) {
    std::fprintf(stderr, "soyaos scope query: no run_started event of run %s\n", escape_for_terminal(a.f.run).c_str());
    return 1;
  }
  const json ev = json::parse(started->front().json, nullptr, false);
  std::string digest;
  if (ev.is_object() && ev.contains("data") && ev["data"].is_object()) digest = ev["data"].value("manifest_digest", "");
  if (digest.empty()) {
    std::fprintf(stderr, "soyaos scope query: run %s recorded no manifest_digest (run by an older soyaos)\n",
                 escape_for_terminal(a.f.run).c_str());
    return 1;
  }
  auto text = moon.manifest(digest);
  if (!text) {
    print_error("scope query", text.error());
    return 1;
  }
  if (!*text) {
    std::fprintf(stderr, "soyaos scope query: the Moon holds no manifest %s (run %s)\n", digest.c_str(),
                 escape_for_terminal(a.f.run).c_str());
    return 1;
  }
  if ("sha256:" + sha256_hex(**text) != digest) {
    std::fprintf(stderr, "soyaos scope query: the stored manifest %s does not match its digest (tampered with?)\n",
                 digest.c_str());
    return 1;
  }
  std::string out;
  if (a.f.format == "json" || a.f.format == "ocsf") {
    out = json{{"run_id", a.f.run}, {"manifest_digest", digest}, {"manifest", **text}}.dump(-1, ' ', false,
                                                                                          json::error_handler_t::replace) + "\n";
  } else if (::isatty(STDOUT_FILENO) == 1) {
    // On a terminal, escaped line by line (a pack author chose these bytes); redirected,
    // the exact bytes, so that `> soyapack.yaml` recovers the file and its digest.
    size_t start = 0;
    while (start < (*text)->size()) {
      size_t end = (*text)->find('\n', start);
      if (end == std::string::npos) end = (*text)->size();
      out += escape_for_terminal(std::string_view(**text).substr(start, end - start)) + "\n";
      start = end + 1;
    }
  } else {
    out = **text;
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) return 1;
  return 0;
}

int run_query(const QueryArgs& a) {
  if (a.limit < 0) {
    std::fprintf(stderr, "soyaos scope query: --limit must be >= 0\n");
    return kExitUsage;
  }
  auto store = open_events();
  if (!store) {
    print_error("scope query", store.error());
    return 1;
  }
  if (a.manifest) return print_manifest(a, **store);
  auto q = build_query(a.f, **store);
  if (!q) {
    print_error("scope query", q.error());
    return kExitUsage;
  }
  q->limit = a.limit;
  auto events = (*store)->query_events(*q);
  if (!events) {
    print_error("scope query", events.error());
    return 1;
  }
  Printer printer(a.f.format, **store);
  printer.set_cursor(q->after_seq);
  if (!printer.print(*events)) return 1;
  print_cursor(printer.cursor());
  return 0;
}

int run_tail(bool follow, int64_t lines, const Filters& f) {
  auto store = open_events();
  if (!store) {
    print_error("scope tail", store.error());
    return 1;
  }
  auto base = build_query(f, **store);
  if (!base) {
    print_error("scope tail", base.error());
    return kExitUsage;
  }
  Printer printer(f.format, **store);
  auto fail = [](const Error& e) {
    print_error("scope tail", e);
    return 1;
  };
  int64_t last = base->after_seq;
  bool more = f.after >= 0;  // --after: everything after the cursor first
  if (f.after < 0) {
    // The last N matches; -n 0: only what comes next (from the newest stored event on).
    moon::EventQuery q = *base;
    if (lines == 0) q = moon::EventQuery{};
    q.limit = lines == 0 ? 1 : lines;
    auto events = (*store)->query_events(q);
    if (!events) return fail(events.error());
    if (lines > 0 && !printer.print(*events)) return 1;
    if (!events->empty()) last = events->back().seq;
  }
  constexpr int64_t kPage = 5000;
  for (;;) {
    if (!more) {
      if (!follow) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // Pages by seq: a store that grows faster than one page is followed page by page.
    moon::EventQuery next = *base;
    next.after_seq = last;
    next.limit = kPage;
    next.first = true;
    auto events = (*store)->query_events(next);
    if (!events) return fail(events.error());
    if (!printer.print(*events)) return 1;  // the reader went away
    if (!events->empty()) last = events->back().seq;
    more = static_cast<int64_t>(events->size()) == kPage;
  }
  print_cursor(last);
  return 0;
}

void add_filters(Command cmd, Filters& f) {
  cmd.add_option("--run", f.run, "Only events of this run id");
  cmd.add_option("--type", f.types,
                 "Only events of these types: repeat it or give a comma list (capability_violation,run_finished)");
  cmd.add_option("--pack", f.pack, "Only events of this pack: NAME, NAME@VERSION or its digest sha256:HEX");
  cmd.add_option("--user", f.user, "Only runs started by, and Moon changes made by, this user (name or uid)");
  cmd.add_option("--since", f.since, "Only events at or after this time: RFC 3339, or 30s/10m/2h/7d ago");
  cmd.add_option("--until", f.until, "Only events before this time: RFC 3339, or 30s/10m/2h/7d ago");
  cmd.add_option("--after", f.after, "Only events after this sequence number (the cursor a previous query printed)");
  cmd.add_option("--format", f.format, "Output format: text (default), json (CloudEvents lines) or ocsf (OCSF 1.1)")
      .check_member({"text", "json", "ocsf"});
}

}  // namespace

void register_scope_commands(Command app, CliContext& ctx) {
  auto scope = app.add_subcommand("scope", "Query the Scope events stored by the Moon");
  scope.require_subcommand(1);
  {
    auto a = std::make_shared<QueryArgs>();
    auto cmd = scope.add_subcommand("query", "Print stored events, oldest first, filtered; then `cursor: SEQ` on stderr");
    add_filters(cmd, a->f);
    cmd.add_option("--limit", a->limit,
                   "At most N matches (default 1000; 0: all): the most recent, or with --after the first after it");
    cmd.add_flag("--manifest", a->manifest, "With --run: print the soyapack.yaml that run used, as the Moon keeps it");
    cmd.callback([a, &ctx] { ctx.exit_code = run_query(*a); });
  }
  {
    auto follow = std::make_shared<bool>(false);
    auto lines = std::make_shared<int64_t>(20);
    auto f = std::make_shared<Filters>();
    auto cmd = scope.add_subcommand("tail", "Print the last events; -f keeps printing new ones as they are stored");
    cmd.add_flag("-f,--follow", *follow, "Keep polling for new events (Ctrl-C to stop)");
    cmd.add_option("-n,--lines", *lines, "How many of the last matching events (default 20)").check_non_negative();
    add_filters(cmd, *f);
    cmd.callback([follow, lines, f, &ctx] { ctx.exit_code = run_tail(*follow, *lines, *f); });
  }
  register_scope_verify(scope, ctx);
}

}  // namespace soyaos::cli
