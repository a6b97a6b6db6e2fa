// The Moon's SQLite store (moon/store.h): events in, filtered events out, many writer
// processes at once without a loss, corrupt files named in the error.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include "moon/store.h"
#include "moon_test_util.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using testing::TmpDir;
using testing::write_file;

json event(const std::string& type, const std::string& run, const std::string& pack, const std::string& time = "") {
  scope::RunContext ctx{"host", run, pack, "1.0.0", "sha256:00"};
  json e = scope::make_event(ctx, type, {{"n", 1}});
  if (!time.empty()) e["time"] = time;
  return e;
}

TEST(MoonStore, AppendThenQueryByEachFilter) {
  TmpDir t;
  auto store = EventStore::open(t.path());
  ASSERT_TRUE(store) << store.error().describe();
  std::vector<json> batch = {
      event("run_started", "R1", "alpha", "2026-11-29T10:00:00.000000Z"),
      event("capability_violation", "R1", "alpha", "2026-11-29T10:00:01.000000Z"),
      event("run_finished", "R1", "alpha", "2026-11-29T10:00:02.000000Z"),
      event("run_started", "R2", "beta", "2026-11-29T11:00:00.000000Z"),
      event("run_finished", "R2", "beta", "2026-11-29T11:00:05.000000Z"),
  };
  ASSERT_TRUE(store->append(batch));

  auto all = store->query({});
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 5U);
  for (size_t i = 1; i < all->size(); ++i) EXPECT_GT((*all)[i].seq, (*all)[i - 1].seq);
  EXPECT_EQ(json::parse((*all)[1].json), batch[1]);  // stored exactly

  EventQuery q;
  q.run_id = "R1";
  EXPECT_EQ(store->query(q)->size(), 3U);
  q = {};
  q.type = "run_finished";
  EXPECT_EQ(store->query(q)->size(), 2U);
  q = {};
  q.pack = "beta";
  EXPECT_EQ(store->query(q)->size(), 2U);
  q = {};
  q.since = "2026-11-29T10:30";
  EXPECT_EQ(store->query(q)->size(), 2U);
  q = {};
  q.type = "run_started";
  q.pack = "alpha";
  auto one = store->query(q);
  ASSERT_EQ(one->size(), 1U);
  EXPECT_EQ((*one)[0].run_id, "R1");
  EXPECT_EQ((*one)[0].version, "1.0.0");
  q = {};
  q.limit = 2;  // the two most recent, oldest first
  auto last = store->query(q);
  ASSERT_EQ(last->size(), 2U);
  EXPECT_EQ((*last)[0].type, "run_started");
  EXPECT_EQ((*last)[1].type, "run_finished");
  EXPECT_EQ((*last)[1].run_id, "R2");
  q = {};
  q.after_seq = (*all)[3].seq;
  EXPECT_EQ(store->query(q)->size(), 1U);
}

TEST(MoonStore, BatchIsAllOrNothing) {
  TmpDir t;
  auto store = EventStore::open(t.path());
  ASSERT_TRUE(store);
  std::vector<json> batch = {event("run_started", "R1", "a"), json::array({1, 2})};
  EXPECT_FALSE(store->append(batch));
  EXPECT_TRUE(store->query({})->empty());
}

TEST(MoonStore, TwentyWriterProcessesLoseNothing) {
  TmpDir t;
  ASSERT_TRUE(EventStore::open(t.path()));  // not required, but the usual case
  constexpr int kWriters = 20, kEach = 500, kBatch = 25;
  std::vector<pid_t> kids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto s = EventStore::open(t.path());
      if (!s) _exit(10);
      for (int i = 0; i < kEach; i += kBatch) {
        std::vector<json> batch;
        for (int j = 0; j < kBatch; ++j) {
          json e = event("dns_query", "W" + std::to_string(w), "p");
          e["data"]["i"] = i + j;
          batch.push_back(std::move(e));
        }
        if (!s->append(batch)) _exit(11);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  auto store = EventStore::open(t.path());
  ASSERT_TRUE(store);
  auto all = store->query({});
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), static_cast<size_t>(kWriters * kEach));
  std::set<std::pair<std::string, int>> seen;
  for (const auto& e : *all) seen.emplace(e.run_id, json::parse(e.json)["data"]["i"].get<int>());
  EXPECT_EQ(seen.size(), static_cast<size_t>(kWriters * kEach));
  EventQuery q;
  q.run_id = "W7";
  EXPECT_EQ(store->query(q)->size(), static_cast<size_t>(kEach));
}

TEST(MoonStore, CorruptDatabaseIsNamed) {
  TmpDir t;
  write_file(t.path() / "moon.db", std::string(8192, 'x'));
  auto s = Store::open(t.path());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find((t.path() / "moon.db").string()), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("corrupt"), std::string::npos) << s.error().message;
}

// The WAL is kept between processes and never checkpointed on close (issue #16): the
// commit that takes it past its bound checkpoints and truncates it, so it stays bounded
// however many processes append (each Store here is one process's connection), and every
// event stays readable.
TEST(MoonStore, KeptWalStaysBoundedAcrossConnections) {
  TmpDir t;
  constexpr int kConnections = 60;
  constexpr int kPerBatch = 20;
  uintmax_t largest = 0;
  for (int i = 0; i < kConnections; ++i) {
    auto s = EventStore::open(t.path());
    ASSERT_TRUE(s) << s.error().describe();
    std::vector<json> batch;
    for (int j = 0; j < kPerBatch; ++j) batch.push_back(event("dns_query", "R" + std::to_string(i), "p"));
    ASSERT_TRUE(s->append(batch));
    std::error_code ec;
    largest = std::max<uintmax_t>(largest, fs::file_size(t.path() / "moon.db-wal", ec));
  }
  // 128 frames of 4 KiB (+ 24-byte frame headers) and one commit's frames past them; a WAL
  // that is never checkpointed passes 3 MiB here.
  EXPECT_LT(largest, uintmax_t{1} << 20) << "the WAL is not checkpointed";
  EXPECT_GT(fs::file_size(t.path() / "moon.db"), uintmax_t{64} * 1024) << "nothing was checkpointed into moon.db";
  auto s = EventStore::open(t.path());
  ASSERT_TRUE(s);
  auto all = s->query({});
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), size_t{kConnections} * kPerBatch);
}

TEST(MoonStore, CorruptPagesAreReportedByQuickCheck) {
  TmpDir t;
  {
    auto s = EventStore::open(t.path());
    ASSERT_TRUE(s);
    std::vector<json> batch;
    for (int i = 0; i < 2000; ++i) batch.push_back(event("dns_query", "R", "p"));
    ASSERT_TRUE(s->append(batch));
  }
  // The WAL is kept between processes (issue #16): checkpoint it into moon.db, then
  // scribble over its middle pages.
  ASSERT_EQ(std::system(("python3 -c \"import sqlite3; c=sqlite3.connect('" + (t.path() / "moon.db").string() +
                         "'); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()\"").c_str()),
            0);
  std::string bytes = testing::read_file(t.path() / "moon.db");
  ASSERT_GT(bytes.size(), 64U * 1024);
  for (size_t i = 16 * 1024; i < bytes.size() - 4096; ++i) bytes[i] = static_cast<char>(i * 7);
  write_file(t.path() / "moon.db", bytes);
  std::error_code ec;
  fs::remove(t.path() / "moon.db-wal", ec);
  fs::remove(t.path() / "moon.db-shm", ec);
  auto s = EventStore::open(t.path());
  Result<std::vector<StoredEvent>> q = s ? s->query({}) : Result<std::vector<StoredEvent>>(s.error());
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("moon.db"), std::string::npos) << q.error().message;
}

TEST(MoonStore, NewerSchemaIsRefused) {
  TmpDir t;
  ASSERT_TRUE(Store::open(t.path()));
  // Bump user_version behind the store's back with a second connection.
  {
    auto s = Store::open(t.path());
    ASSERT_TRUE(s);
  }
  ASSERT_EQ(std::system(("python3 -c \"import sqlite3; c=sqlite3.connect('" + (t.path() / "moon.db").string() +
                         "'); c.execute('PRAGMA user_version=99'); c.commit()\"")
                            .c_str()),
            0);
  auto s = Store::open(t.path());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("newer"), std::string::npos) << s.error().message;
}

// E7: `scope query --pack sha256:` and `--user` read their values out of the JSON; schema 5's
// expression indexes serve them, so neither scans every event (docs/events.md, Queries).
TEST(MoonStore, DigestAndUserQueriesUseTheirIndexes) {
  TmpDir t;
  auto store = Store::open(t.path());
  ASSERT_TRUE(store) << store.error().describe();
  json started = event("run_started", "R1", "alpha");
  started["data"]["user"] = {{"uid", 1000}, {"name", "alice"}};
  json unflagged = event("pack_unflagged", "", "alpha");
  unflagged["data"]["actor"] = {{"uid", 1000}, {"user", "alice"}};
  const std::vector<json> batch = {started, event("dns_query", "R1", "alpha"), unflagged, event("run_started", "R2", "beta")};
  ASSERT_TRUE(store->append_events(batch));
  auto plan_of = [&](const EventQuery& q) {
    auto plan = store->explain_query(q);
    EXPECT_TRUE(plan) << plan.error().describe();
    std::string text;
    for (const auto& line : plan ? *plan : std::vector<std::string>{}) text += line + "\n";
    return text;
  };
  EventQuery q;
  q.digest = "sha256:00";
  const std::string by_digest = plan_of(q);
  EXPECT_NE(by_digest.find("USING INDEX events_digest"), std::string::npos) << by_digest;
  EXPECT_EQ(by_digest.find("SCAN events"), std::string::npos) << by_digest;
  EXPECT_EQ(store->query_events(q)->size(), 4U);
  q = {};
  q.uid = 1000;
  const std::string by_user = plan_of(q);
  EXPECT_NE(by_user.find("USING INDEX events_run_uid"), std::string::npos) << by_user;
  EXPECT_NE(by_user.find("USING INDEX events_actor_uid"), std::string::npos) << by_user;
  EXPECT_EQ(by_user.find("SCAN events"), std::string::npos) << by_user;
  auto mine = store->query_events(q);
  ASSERT_TRUE(mine);
  ASSERT_EQ(mine->size(), 3U) << "R1's two events and the unflag alice did";
  EXPECT_EQ((*mine)[2].type, "pack_unflagged");
}

// Schema 9 (issue #16): events_actor_uid holds only events that have an actor. A home made
// by schema 8 (the full index) is upgraded in place when this soyaos opens it; `--user`
// still finds the same events, through the same indexes.
TEST(MoonStore, SchemaEightUpgradesToAPartialActorIndex) {
  TmpDir t;
  json started = event("run_started", "R1", "alpha");
  started["data"]["user"] = {{"uid", 1000}, {"name", "alice"}};
  json unflagged = event("pack_unflagged", "", "alpha");
  unflagged["data"]["actor"] = {{"uid", 1000}, {"user", "alice"}};
  {
    auto store = Store::open(t.path());
    ASSERT_TRUE(store) << store.error().describe();
    ASSERT_TRUE(store->append_events(std::vector<json>{started, event("dns_query", "R1", "alpha"), unflagged}));
  }
  const std::string db_path = (t.path() / "moon.db").string();
  auto index_sql = [&]() {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_master WHERE name='events_actor_uid'", -1, &st, nullptr),
              SQLITE_OK);
    std::string sql;
    if (sqlite3_step(st) == SQLITE_ROW) sql = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return sql;
  };
  EXPECT_NE(index_sql().find("IS NOT NULL"), std::string::npos) << index_sql();
  {
    // Back to what schema 8 had: the full index, user_version 8.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
    const char* sql =
        "DROP INDEX events_actor_uid;"
        "CREATE INDEX events_actor_uid ON events (CAST(json_extract(json, '$.data.actor.uid') AS TEXT));"
        "PRAGMA user_version=8;";
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  EXPECT_EQ(index_sql().find("IS NOT NULL"), std::string::npos) << index_sql();
  auto store = Store::open(t.path());
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_NE(index_sql().find("IS NOT NULL"), std::string::npos) << index_sql();
  ASSERT_TRUE(store->append_events(std::vector<json>{event("run_finished", "R1", "alpha")}));
  EventQuery q;
  q.uid = 1000;
  auto plan = store->explain_query(q);
  ASSERT_TRUE(plan) << plan.error().describe();
  std::string text;
  for (const auto& line : *plan) text += line + "\n";
  EXPECT_NE(text.find("USING INDEX events_actor_uid"), std::string::npos) << text;
  EXPECT_EQ(text.find("SCAN events"), std::string::npos) << text;
  auto mine = store->query_events(q);
  ASSERT_TRUE(mine);
  ASSERT_EQ(mine->size(), 4U) << "R1's three events and the unflag alice did";
  EXPECT_EQ((*mine)[2].type, "pack_unflagged");
  q.uid = 1001;
  EXPECT_TRUE(store->query_events(q)->empty());
}

// C12: a queued flag is claimed by one publisher at a time (schema 8): one UPDATE decides,
// the outcome releases it, an abandoned claim expires; of two processes claiming the same
// flags at once, exactly one gets each. The flags of one uid's runs come in one query.
TEST(MoonStore, QueuedFlagsAreClaimedByOnePublisherAndFilteredByUid) {
  TmpDir t;
  auto store = Store::open(t.path());
  ASSERT_TRUE(store) << store.error().describe();
  json mine = event("run_started", "R1", "alpha");
  mine["soyaosuid"] = 1000;
  json theirs = event("run_started", "R2", "alpha");
  theirs["soyaosuid"] = 1001;
  const std::vector<json> started = {mine, theirs, event("run_started", "R3", "alpha")};
  ASSERT_TRUE(store->append_events(started));
  constexpr int kFlags = 24;
  for (int i = 1; i <= kFlags; ++i) {
    QueuedFlag q;
    q.registry = "127.0.0.1:5000";
    q.repository = "team/p";
    q.manifest_digest = "sha256:" + std::string(64, 'a');
    q.manifest_size = 10;
    q.run_id = i <= 3 ? "R" + std::to_string(i) : "X" + std::to_string(i);
    q.body = "{}";
    auto queued = store->queue_flag(q);
    ASSERT_TRUE(queued && *queued == Store::Queued::queued);
  }
  auto all = store->queued_flags("", 0, 100);
  ASSERT_TRUE(all) << all.error().describe();
  ASSERT_EQ(all->size(), static_cast<size_t>(kFlags));
  auto of_1000 = store->queued_flags("", 0, 100, 1000);
  ASSERT_TRUE(of_1000);
  ASSERT_EQ(of_1000->size(), 1U);
  EXPECT_EQ(of_1000->front().run_id, "R1");
  EXPECT_TRUE(store->queued_flags("", 0, 100, 7)->empty());

  const int64_t id = all->front().id;
  const int64_t now = 1'000'000;
  auto claim = [&](int64_t at, const std::string& by) {
    auto c = store->claim_flag(id, at, at + 300, by);
    EXPECT_TRUE(c) << c.error().describe();
    return c.ok() && *c;
  };
  EXPECT_TRUE(claim(now, "a"));
  EXPECT_FALSE(claim(now + 1, "b"));  // held by a
  // Held: a publisher on a backoff (now > 0) does not list it; a plain listing does.
  EXPECT_EQ(store->queued_flags("", now + 1, 100)->size(), static_cast<size_t>(kFlags - 1));
  EXPECT_EQ(store->queued_flags("", 0, 100)->size(), static_cast<size_t>(kFlags));
  ASSERT_TRUE(store->flag_publish_failed(id, "down", now));  // the outcome releases it
  EXPECT_TRUE(claim(now + 2, "b"));
  EXPECT_TRUE(claim(now + 302, "c"));  // b's claim expired
  ASSERT_TRUE(store->flag_published(id, "sha256:" + std::string(64, 'b')));
  EXPECT_FALSE(claim(now + 303, "d"));  // published

  // Another flag of the same subject is not claimed while one is held (one push at a time
  // per referrers index); a flag of another subject is.
  QueuedFlag other;
  other.registry = "127.0.0.1:5000";
  other.repository = "team/q";
  other.manifest_digest = "sha256:" + std::string(64, 'c');
  other.manifest_size = 10;
  other.run_id = "R1";
  other.body = "{}";
  ASSERT_TRUE(store->queue_flag(other));
  const int64_t sibling = (*all)[1].id;
  auto held = store->claim_flag(sibling, now, now + 300, "a");
  ASSERT_TRUE(held && *held);
  auto rest = store->queued_flags("", 0, 100);
  ASSERT_TRUE(rest);
  const int64_t other_id = rest->back().id;
  auto blocked = store->claim_flag((*all)[2].id, now, now + 300, "b");
  ASSERT_TRUE(blocked);
  EXPECT_FALSE(*blocked) << "a sibling of a held flag";
  auto free_one = store->claim_flag(other_id, now, now + 300, "b");
  ASSERT_TRUE(free_one);
  EXPECT_TRUE(*free_one) << "another subject's flag";
  ASSERT_TRUE(store->flag_publish_failed(sibling, "down", 0));
  ASSERT_TRUE(store->flag_publish_failed(other_id, "down", 0));

  // Two processes claim all the other flags at once (each publishes what it claimed): no
  // flag goes to both.
  int pipes[2][2];
  pid_t pids[2];
  for (int p = 0; p < 2; ++p) {
    ASSERT_EQ(::pipe(pipes[p]), 0);
    pids[p] = ::fork();
    ASSERT_GE(pids[p], 0);
    if (pids[p] == 0) {
      auto own = Store::open(t.path());
      std::string won;
      for (const auto& q : *all) {
        if (q.id == id) continue;
        auto c = own ? own->claim_flag(q.id, now, now + 300, "p" + std::to_string(p)) : Result<bool>(false);
        if (!c) ::_exit(2);
        if (*c) {
          won += std::to_string(q.id) + " ";
          if (!own->flag_published(q.id, "sha256:" + std::string(64, 'd'))) ::_exit(3);
        }
      }
      (void)!::write(pipes[p][1], won.data(), won.size());
      ::_exit(0);
    }
    ::close(pipes[p][1]);
  }
  std::multiset<int64_t> claimed;
  for (int p = 0; p < 2; ++p) {
    std::string text;
    char buf[512];
    ssize_t n;
    while ((n = ::read(pipes[p][0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    ::close(pipes[p][0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pids[p], &status, 0), pids[p]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    std::istringstream in(text);
    for (int64_t v; in >> v;) claimed.insert(v);
  }
  // (One may skip a flag the other took a sibling of meanwhile: it stays queued for the next.)
  EXPECT_FALSE(claimed.empty());
  for (const auto& q : *all) EXPECT_LE(claimed.count(q.id), 1U) << q.id;
  EXPECT_EQ(claimed.count(id), 0U);
}

TEST(MoonStore, DefaultHome) {
  const char* keep = std::getenv("SOYAOS_HOME");
  std::string saved = keep != nullptr ? keep : "";
  ::setenv("SOYAOS_HOME", "/x/home", 1);
  EXPECT_EQ(default_home().value(), fs::path("/x/home"));
  ::unsetenv("SOYAOS_HOME");
  ::setenv("XDG_DATA_HOME", "/x/data", 1);
  EXPECT_EQ(default_home().value(), fs::path("/x/data/soyaos"));
  ::unsetenv("XDG_DATA_HOME");
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/') {
    EXPECT_EQ(default_home().value(), fs::path(h) / ".local/share/soyaos");
  }
  if (keep != nullptr) ::setenv("SOYAOS_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace soyaos::moon
