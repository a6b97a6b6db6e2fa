// Who ran what under which policy, and the export side (SPEC.md E5, E7): run_started and
// run_finished record it, the Moon keeps every run's manifest, registry changes name
// their actor, and `scope query|tail` filter, page by cursor, map to OCSF and escape.
// Named RunMoonAudit so that the rootless and daemon copies of RunMoon* run it too.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/content_digest.h"
#include "common/digest.h"
#include "harness.h"

namespace soyaos::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class RunMoonAudit : public ::testing::Test {
 protected:
  void SetUp() override {
    if (rootless_mode() && ::geteuid() != 0) GTEST_SKIP() << "rootless variant needs root to drop to nobody";
    pack_ = dir_.copy_from_source("tests/fixtures/probe", "pack");
    home_ = (dir_.path() / "home").string();
  }
  std::map<std::string, std::string> env() const { return {{"SOYAOS_HOME", home_}}; }
  RunOutput soyaos(const std::vector<std::string>& args) { return run_soyaos(args, env(), dir_.path()); }
  RunOutput run(const std::vector<std::string>& action, const std::vector<std::string>& options = {},
                const fs::path& pack = {}) {
    std::vector<std::string> args = {"run", (pack.empty() ? pack_ : pack).string(), "--out",
                                     (dir_.path() / ("out" + std::to_string(++runs_))).string()};
    args.insert(args.end(), options.begin(), options.end());
    args.push_back("--");
    args.insert(args.end(), action.begin(), action.end());
    return soyaos(args);
  }
  static std::vector<json> parse_lines(const std::string& text) {
    std::vector<json> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
  }
  std::vector<json> query(std::vector<std::string> filter) {
    std::vector<std::string> args = {"scope", "query", "--format", "json", "--limit", "0"};
    args.insert(args.end(), filter.begin(), filter.end());
    auto r = soyaos(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return parse_lines(r.out);
  }
  static std::string run_id_of(const RunOutput& r) {
    auto pos = r.err.find("soyaos: run ");
    return pos == std::string::npos ? "" : r.err.substr(pos + 12, 26);
  }
  // The run id of the newest run_started.
  std::string last_run_id() {
    auto started = query({"--type", "run_started"});
    return started.empty() ? "" : started.back()["data"]["run_id"].get<std::string>();
  }
  static int64_t cursor_of(const std::string& err) {
    auto pos = err.rfind("cursor: ");
    return pos == std::string::npos ? -1 : std::stoll(err.substr(pos + 8));
  }
  TempDir dir_;
  fs::path pack_;
  std::string home_;
  int runs_ = 0;
};

TEST_F(RunMoonAudit, RunStartedRecordsWhoRanWhatOnWhichInputsUnderWhichPolicy) {
  const std::string moon_yaml = "egress:\n  deny: [evil.example.com]\n  allow_private: [10.0.0.0/8]\n";
  dir_.write("home/moon.yaml", moon_yaml);
  // The home a rootless soyaos (nobody) writes its moon.db into.
  fs::permissions(dir_.path() / "home", fs::perms::all);
  dir_.write("data/a.txt", "alpha\n");
  dir_.write("notes.txt", "beta\n");
  auto r = run({"argv", "x", "y"},
               {"--input", "data=" + (dir_.path() / "data").string(), "--input", "notes=" + (dir_.path() / "notes.txt").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run_id = last_run_id();
  auto started = query({"--run", run_id, "--type", "run_started"});
  ASSERT_EQ(started.size(), 1u);
  const json& d = started[0]["data"];
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(d["host"], host);
  EXPECT_EQ(d["rootless"], rootless_mode());
  ASSERT_TRUE(d["user"]["uid"].is_number_integer());
  if (rootless_mode()) {
    EXPECT_EQ(d["user"]["name"], "nobody");
  } else {
    EXPECT_EQ(d["user"]["uid"], static_cast<int64_t>(::getuid()));
    EXPECT_EQ(d["user"]["name"], "root");
  }
  EXPECT_EQ(d["manifest_digest"], "sha256:" + sha256_hex(read_file(pack_ / "soyapack.yaml")));
  EXPECT_EQ(d["moon_config_digest"], "sha256:" + sha256_hex(moon_yaml));
  EXPECT_EQ(d["digest"], tree_digest(pack_).value());
  // The capabilities in force, the manifest's and the operator's.
  EXPECT_EQ(d["capabilities"]["egress"], json::array());
  EXPECT_EQ(d["capabilities"]["determinism_tier"], "read-only");
  EXPECT_EQ(d["capabilities"]["resources"]["timeout_ms"], 20000);
  EXPECT_EQ(d["capabilities"]["resources"]["write_quota_bytes"], 1 << 20);
  EXPECT_EQ(d["capabilities"]["fs"]["write"], json::array({"/workdir/out"}));
  const auto& read = d["capabilities"]["fs"]["read"];
  EXPECT_NE(std::find(read.begin(), read.end(), "/workdir"), read.end()) << read;
  EXPECT_EQ(d["operator_policy"]["egress_deny"], json::array({"evil.example.com"}));
  EXPECT_EQ(d["operator_policy"]["allow_private"], json::array({"10.0.0.0/8"}));
  EXPECT_EQ(d["operator_policy"]["dns_upstream"], "system");
  // Each input by name, where the agent saw it, and its content digest.
  ASSERT_EQ(d["inputs"].size(), 2u) << d["inputs"];
  EXPECT_EQ(d["inputs"][0]["name"], "data");
  EXPECT_EQ(d["inputs"][0]["path"], "/workdir/inputs/data");
  EXPECT_EQ(d["inputs"][0]["digest"], tree_digest(dir_.path() / "data").value());
  EXPECT_EQ(d["inputs"][1]["name"], "notes");
  EXPECT_EQ(d["inputs"][1]["digest"], "file:sha256:" + sha256_hex("beta\n"));
  ASSERT_GE(d["argv"].size(), 3u);
  EXPECT_EQ(d["argv"][d["argv"].size() - 2], "x");
  EXPECT_EQ(d["argv"].back(), "y");

  // run_finished: what it produced, by digest.
  auto finished = query({"--run", run_id, "--type", "run_finished"});
  ASSERT_EQ(finished.size(), 1u);
  const json& o = finished[0]["data"]["outputs"];
  EXPECT_EQ(o["stdout"]["digest"], "sha256:" + sha256_hex(r.out)) << r.out;
  EXPECT_EQ(o["stdout"]["bytes"], r.out.size());
  EXPECT_EQ(o["stderr"]["bytes"], 0);
  EXPECT_EQ(o["stderr"]["digest"], "sha256:" + sha256_hex(""));
  EXPECT_EQ(o["tree_digest"], out_tree_digest(fs::path(o["dir"].get<std::string>())).value());
  // A read-only run that exited 0 goes to the result cache: its key is recorded.
  ASSERT_TRUE(finished[0]["data"].contains("cache_key")) << finished[0]["data"];
  EXPECT_EQ(finished[0]["data"]["cache_key"].get<std::string>().size(), 64u);

  // Without a Moon configuration the digest says so.
  fs::remove(dir_.path() / "home/moon.yaml");
  ASSERT_EQ(run({"exit", "0"}, {"--no-cache"}).exit_code, 0);
  auto second = query({"--run", last_run_id(), "--type", "run_started,run_finished"});
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0]["data"]["moon_config_digest"], "none");
  EXPECT_EQ(second[0]["data"]["inputs"], json::array());
  EXPECT_FALSE(second[1]["data"].contains("cache_key")) << "--no-cache stores nothing";
}

TEST_F(RunMoonAudit, TheManifestOfADirectoryRunIsRecoverable) {
  const std::string original = read_file(pack_ / "soyapack.yaml");
  ASSERT_EQ(run({"exit", "0"}).exit_code, 0);
  const std::string first = last_run_id();
  // The directory changes afterwards (as in the incident: an entry the registry's copy
  // of NAME@VERSION does not have): the first run's manifest is still the one it used.
  std::string changed = original;
  changed.replace(changed.find("read: [/workdir, /workdir/inputs]"), 33, "read: [/workdir, /workdir/inputs, /etc]");
  dir_.write("pack/soyapack.yaml", changed);
  ASSERT_EQ(run({"exit", "0"}).exit_code, 0);
  const std::string second = last_run_id();
  ASSERT_NE(first, second);

  auto m1 = soyaos({"scope", "query", "--run", first, "--manifest"});
  ASSERT_EQ(m1.exit_code, 0) << m1.err;
  EXPECT_EQ(m1.out, original);  // byte for byte when not on a terminal
  auto m2 = soyaos({"scope", "query", "--run", second, "--manifest", "--format", "json"});
  ASSERT_EQ(m2.exit_code, 0) << m2.err;
  const json j = json::parse(m2.out);
  EXPECT_EQ(j["manifest"], changed);
  EXPECT_EQ(j["manifest_digest"], "sha256:" + sha256_hex(changed));
  EXPECT_EQ(j["run_id"], second);

  EXPECT_EQ(soyaos({"scope", "query", "--manifest"}).exit_code, 2);
  auto none = soyaos({"scope", "query", "--run", "01NOSUCHRUN0000000000000000", "--manifest"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no run_started"), std::string::npos) << none.err;
}

TEST_F(RunMoonAudit, PushFlagAndUnflagRecordTheirActor) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  ASSERT_EQ(run({"read", "/etc/shadow"}).exit_code, 3);
  ASSERT_EQ(soyaos({"pack", "unflag", "comet-probe@0.1.0", "--reason", "fixture"}).exit_code, 0);
  const int64_t uid = rootless_mode() ? 65534 : static_cast<int64_t>(::getuid());
  for (const std::string type : {"pack_pushed", "pack_flagged", "pack_unflagged"}) {
    auto events = query({"--type", type});
    ASSERT_EQ(events.size(), 1u) << type;
    EXPECT_EQ(events[0]["data"]["actor"]["uid"], uid) << type;
    EXPECT_TRUE(events[0]["data"]["actor"]["user"].is_string()) << type;
  }
  // --user finds the runs that user started and the changes they made.
  auto mine = query({"--user", std::to_string(uid)});
  std::set<std::string> types;
  for (const auto& e : mine) types.insert(e["type"].get<std::string>());
  for (const char* t : {"pack_pushed", "run_started", "capability_violation", "run_finished", "pack_flagged",
                        "pack_unflagged"}) {
    EXPECT_EQ(types.count(t), 1u) << t;
  }
  EXPECT_TRUE(query({"--user", "4242"}).empty());
  auto by_name = query({"--user", rootless_mode() ? "nobody" : "root"});
  EXPECT_EQ(by_name.size(), mine.size());
  EXPECT_EQ(soyaos({"scope", "query", "--user", "no-such-user-here"}).exit_code, 2);
}

TEST_F(RunMoonAudit, QueryFiltersTypesPackVersionDigestRunAndTime) {
  ASSERT_EQ(soyaos({"pack", "push", pack_.string()}).exit_code, 0);
  ASSERT_EQ(run({"read", "/etc/shadow"}).exit_code, 3);
  const std::string run1 = last_run_id();
  // Another version of the pack (a directory run).
  TempDir other;
  auto v2 = other.copy_from_source("tests/fixtures/probe", "pack");
  auto text = read_file(v2 / "soyapack.yaml");
  text.replace(text.find("version: 0.1.0"), 14, "version: 0.2.0");
  other.write("pack/soyapack.yaml", text);
  ASSERT_EQ(run({"exit", "0"}, {"--no-cache"}, v2).exit_code, 0);
  const std::string run2 = last_run_id();

  // Several types: a comma list and repeated options are the same filter.
  auto a = query({"--type", "run_started,run_finished"});
  auto b = query({"--type", "run_started", "--type", "run_finished"});
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  // NAME@VERSION and NAME.
  auto v1 = query({"--pack", "comet-probe@0.1.0"});
  auto v2e = query({"--pack", "comet-probe@0.2.0"});
  EXPECT_EQ(v1.size() + v2e.size(), query({"--pack", "comet-probe"}).size());
  for (const auto& e : v2e) EXPECT_EQ(e["data"]["run_id"], run2);
  ASSERT_FALSE(v2e.empty());
  // By digest: the tree digest every event carries, or the pushed archive's digest.
  const std::string tree1 = tree_digest(pack_).value();
  auto by_tree = query({"--pack", tree1});
  EXPECT_EQ(by_tree, v1);
  auto pushed = query({"--type", "pack_pushed"});
  ASSERT_EQ(pushed.size(), 1u);
  auto by_archive = query({"--pack", pushed[0]["data"]["archive_digest"].get<std::string>()});
  EXPECT_EQ(by_archive, v1);
  EXPECT_EQ(soyaos({"scope", "query", "--pack", "sha256:1234"}).exit_code, 2);
  // --run.
  for (const auto& e : query({"--run", run1})) EXPECT_EQ(e["data"]["run_id"], run1);
  // --since / --until: [since, until), RFC 3339 with an offset too.
  auto all = query({});
  const std::string t2 = query({"--run", run2, "--type", "run_started"})[0]["time"];
  auto before = query({"--until", t2});
  auto after = query({"--since", t2});
  EXPECT_EQ(before.size() + after.size(), all.size());
  for (const auto& e : before) EXPECT_LT(e["time"].get<std::string>(), t2);
  for (const auto& e : after) EXPECT_GE(e["time"].get<std::string>(), t2);
  // The same instant written with an offset: 2h ahead of UTC.
  {
    std::tm tm{};
    ASSERT_NE(::strptime(t2.c_str(), "%Y-%m-%dT%H:%M:%S", &tm), nullptr);
    std::time_t t = ::timegm(&tm) + 2 * 3600;
    std::tm local{};
    ::gmtime_r(&t, &local);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &local);
    const std::string with_offset = std::string(buf) + t2.substr(19, 7) + "+02:00";
    EXPECT_EQ(query({"--until", with_offset}), before) << with_offset;
  }
  EXPECT_TRUE(query({"--until", "1h", "--since", "2h"}).empty());
  EXPECT_EQ(query({"--since", "1h", "--until", "2999-01-01"}).size(), all.size());
  EXPECT_EQ(soyaos({"scope", "query", "--until", "tomorrow"}).exit_code, 2);
  EXPECT_EQ(soyaos({"scope", "query", "--until", "2026-13-01"}).exit_code, 2);

  // Every event carries its seq (json: the soyaosseq extension; text: the first column),
  // in increasing order, and the cursor line names the last.
  int64_t prev = 0;
  for (const auto& e : all) {
    ASSERT_TRUE(e.contains("soyaosseq"));
    EXPECT_GT(e["soyaosseq"].get<int64_t>(), prev);
    prev = e["soyaosseq"];
  }
  auto plain = soyaos({"scope", "query", "--limit", "0"});
  ASSERT_EQ(plain.exit_code, 0);
  EXPECT_EQ(cursor_of(plain.err), prev) << plain.err;
  std::istringstream lines(plain.out);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line.substr(0, line.find(' ')), std::to_string(all[0]["soyaosseq"].get<int64_t>())) << line;
}

TEST_F(RunMoonAudit, CursorResumesExactlyWhileRunsAreAppended) {
  // Runs that emit events keep appending while a reader pages through with --after.
  std::vector<std::string> steps = {"run", pack_.string(), "--no-cache", "--out", (dir_.path() / "bg").string(), "--",
                                    "steps"};
  for (int i = 0; i < 6; ++i) {
    steps.push_back("read:/etc/secret" + std::to_string(i));
    steps.push_back("sleep:0.15");
  }
  std::vector<int64_t> seen;
  int64_t cursor = 0;
  auto page = [&] {
    auto r = soyaos({"scope", "query", "--format", "json", "--after", std::to_string(cursor), "--limit", "3"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto events = parse_lines(r.out);
    for (const auto& e : events) seen.push_back(e["soyaosseq"]);
    const int64_t next = cursor_of(r.err);
    EXPECT_GE(next, cursor);
    if (!events.empty()) {
      EXPECT_EQ(next, events.back()["soyaosseq"].get<int64_t>());
    }
    cursor = next;
    return events.size();
  };
  for (int round = 0; round < 2; ++round) {
    Background bg(steps, env(), dir_.path());
    (void)soyaos({"pack", "push", pack_.string()});  // another writer, at the same time
    for (int i = 0; i < 15; ++i) {
      page();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    auto done = bg.finish();
    EXPECT_EQ(done.exit_code, 3) << done.err;
    fs::remove_all(dir_.path() / "bg");
  }
  while (page() > 0) {
  }
  auto all = query({});
  std::vector<int64_t> want;
  for (const auto& e : all) want.push_back(e["soyaosseq"]);
  EXPECT_EQ(seen, want) << "pages concatenated are the full set, in order, without duplicates";
  EXPECT_GE(want.size(), 2u * 8u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());
}

// OCSF 1.1: the base attributes every event must have, and each class's own.
void expect_ocsf(const json& o) {
  for (const char* k : {"class_uid", "category_uid", "activity_id", "type_uid", "severity_id", "time"}) {
    ASSERT_TRUE(o.contains(k) && o[k].is_number_integer()) << k << " in " << o;
  }
  EXPECT_EQ(o["type_uid"].get<int64_t>(), o["class_uid"].get<int64_t>() * 100 + o["activity_id"].get<int64_t>());
  EXPECT_GT(o["time"].get<int64_t>(), 1'700'000'000'000) << "Unix milliseconds";
  EXPECT_EQ(o["metadata"]["version"], "1.1.0");
  EXPECT_TRUE(o["metadata"]["product"]["name"].is_string());
  EXPECT_TRUE(o["metadata"]["product"]["vendor_name"].is_string());
  EXPECT_TRUE(o["metadata"]["sequence"].is_number_integer());
  EXPECT_TRUE(o["category_name"].is_string() && o["class_name"].is_string() && o["activity_name"].is_string());
  const int cls = o["class_uid"];
  if (cls == 1001) {
    EXPECT_TRUE(o["file"]["path"].is_string()) << o;
    EXPECT_TRUE(o["actor"].is_object()) << o;
  } else if (cls == 1007) {
    EXPECT_TRUE(o["process"].is_object()) << o;
    EXPECT_TRUE(o["actor"].is_object()) << o;
  } else if (cls == 4001) {
    EXPECT_TRUE(o["dst_endpoint"].is_object()) << o;
    EXPECT_TRUE(o["src_endpoint"].is_object()) << o;
  }
}

TEST_F(RunMoonAudit, OcsfExportMapsEachEventToItsClass) {
  ASSERT_EQ(run({"steps", "read:/etc/shadow", "write:/workdir/x", "tcp_echo:127.0.0.1:9:hi"}).exit_code, 3);
  const std::string run_id = last_run_id();
  auto r = soyaos({"scope", "query", "--run", run_id, "--format", "ocsf", "--limit", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = parse_lines(r.out);
  ASSERT_GE(events.size(), 5u);
  std::map<int64_t, int> by_type_uid;
  for (const auto& o : events) {
    expect_ocsf(o);
    ++by_type_uid[o["type_uid"].get<int64_t>()];
    EXPECT_EQ(o["metadata"]["correlation_uid"], run_id);
  }
  EXPECT_EQ(by_type_uid[100701], 1) << "run_started: Process Activity Launch";
  EXPECT_EQ(by_type_uid[100702], 1) << "run_finished: Process Activity Terminate";
  EXPECT_EQ(by_type_uid[100102], 1) << "fs read violation: File System Activity Read";
  EXPECT_EQ(by_type_uid[100103], 1) << "fs write violation: File System Activity Update";
  EXPECT_GE(by_type_uid[400105], 1) << "network violation: Network Activity Refuse";
  for (const auto& o : events) {
    if (o["type_uid"] == 100102) {
      EXPECT_EQ(o["file"]["path"], "/etc/shadow");
      EXPECT_EQ(o["action_id"], 2);
      EXPECT_EQ(o["status_id"], 2);
      EXPECT_EQ(o["actor"]["user"]["uid"], std::to_string(rootless_mode() ? 65534 : ::getuid()));
    }
    if (o["type_uid"] == 400105) {
      EXPECT_EQ(o["dst_endpoint"]["port"], 9) << o;
    }
    if (o["type_uid"] == 100702) {
      EXPECT_EQ(o["status_id"], 2) << "exit 3 is a failure";
    }
    EXPECT_TRUE(o["unmapped"]["soyaos"]["data"].is_object());
  }
}

TEST_F(RunMoonAudit, TailFollowsARunAsItsEventsAreStored) {
  Background tail({"scope", "tail", "-f", "-n", "0", "--type", "capability_violation,run_finished"}, env(),
                  dir_.path());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    // A live run: its violation shows while the agent still sleeps (events are stored as
    // they happen, E4), long before its run_finished.
    const auto start = std::chrono::steady_clock::now();
    Background live({"run", pack_.string(), "--out", (dir_.path() / "live").string(), "--", "steps",
                     "read:/etc/tail-me", "sleep:30"},
                    env(), dir_.path());
    EXPECT_TRUE(tail.wait_for("/etc/tail-me", 20000)) << tail.so_far().out;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25)) << "seen while the run was live";
    EXPECT_EQ(tail.so_far().out.find("run_finished"), std::string::npos) << tail.so_far().out;
    live.signal(SIGTERM);
    auto ended = live.finish(30000);
    EXPECT_EQ(ended.exit_code, 3) << "a violation decides the exit status: " << ended.err;
  }
  EXPECT_TRUE(tail.wait_for("run_finished", 10000)) << tail.so_far().out;
  tail.signal(SIGTERM);
  auto out = tail.finish(5000);
  EXPECT_EQ(out.out.find("run_started"), std::string::npos) << "--type filters the tail";
  // --run: only that run; --after resumes.
  ASSERT_EQ(run({"read", "/etc/other"}).exit_code, 3);
  const std::string run_id = last_run_id();
  auto t = soyaos({"scope", "tail", "--run", run_id, "-n", "100"});
  EXPECT_NE(t.out.find("/etc/other"), std::string::npos);
  EXPECT_EQ(t.out.find("/etc/tail-me"), std::string::npos);
  auto resumed = soyaos({"scope", "tail", "--after", "0", "--type", "run_started"});
  EXPECT_EQ(parse_lines(soyaos({"scope", "query", "--type", "run_started", "--format", "json"}).out).size(),
            static_cast<size_t>(std::count(resumed.out.begin(), resumed.out.end(), '\n')));
}

TEST_F(RunMoonAudit, HumanOutputEscapesAnAgentChosenName) {
  ASSERT_EQ(run({"read", "/etc/\x1b]0;pwned\x07\x1b[2Jx"}).exit_code, 3);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"scope", "query"}, std::vector<std::string>{"scope", "tail", "-n", "50"}}) {
    auto r = soyaos(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "no raw escape reaches the terminal";
    EXPECT_EQ(r.out.find('\x07'), std::string::npos);
    EXPECT_NE(r.out.find("/etc/\\x1B]0;pwned\\x07\\x1B[2Jx"), std::string::npos) << r.out;
  }
  // Machine output keeps the text, JSON-escaped.
  auto j = soyaos({"scope", "query", "--format", "json", "--type", "capability_violation"});
  EXPECT_EQ(j.out.find('\x1b'), std::string::npos);
  EXPECT_NE(j.out.find("\\u001b]0;pwned"), std::string::npos) << j.out;
}

}  // namespace
}  // namespace soyaos::testing
