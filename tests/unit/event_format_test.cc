// Events serialized once (scope::EventFormat, issue #16): the line a run writes and the Moon
// stores is byte for byte what make_event + dump wrote before, and the Moon stores and
// hashes it exactly as it stored the object.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moon/backend.h"
#include "moon/recorder.h"
#include "moon/store.h"
#include "moon_test_util.h"
#include "scope/events.h"

namespace soyaos::scope {
namespace {

using json = nlohmann::ordered_json;

const RunContext kCtx{"host-1", "01JDXYZ0000000000000000000", "egress-bench", "0.1.0",
                      "sha256:" + std::string(64, 'a')};

// What the format makes of (type, data) against what make_event + dump made, with the same
// id and time.
void expect_same_bytes(const EventFormat& fmt, const RunContext& ctx, const std::string& type, const json& data) {
  const json old = make_event(ctx, type, data);
  const std::string id = old["id"].get<std::string>();
  const std::string time = old["time"].get<std::string>();
  const Event ev = fmt.make(type, data, id, time);
  EXPECT_EQ(ev.line, dump_event(old) + "\n") << "type " << type << ", data " << data.dump();
  EXPECT_EQ(ev.json(), dump_event(old));
  EXPECT_EQ(ev.type, type);
  EXPECT_EQ(ev.time, time);
  // The store's columns: the string, or nothing (NULL) for anything else.
  auto column = [&](const char* key) {
    const json& d = old["data"];
    return d.contains(key) && d[key].is_string() ? d[key].get<std::string>() : std::string();
  };
  EXPECT_EQ(ev.run_id, column("run_id"));
  EXPECT_EQ(ev.pack, column("pack"));
  EXPECT_EQ(ev.version, column("version"));
}

std::vector<json> sample_data() {
  return {
      json::object(),
      json(nullptr),
      {{"connection", 7}, {"entry", "capabilities.egress[0]"}, {"host", "ping.test"}, {"port", 443},
       {"protocol", "tcp"}, {"address", "127.0.0.1"}},
      {{"bytes_out", uint64_t{18446744073709551615ULL}}, {"bytes_in", int64_t{-3}}, {"duration_ms", 0.125},
       {"ratio", 1e-300}, {"big", 1.7976931348623157e308}, {"ok", true}, {"none", nullptr}},
      {{"nested", {{"a", json::array({1, "two", json::object(), json::array()})}, {"b", {{"c", false}}}}}},
      {{"text", "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f"}, {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"}},
      // Invalid UTF-8 from an agent (a DNS name, a path): replaced by U+FFFD, as before.
      {{"name", std::string("bad \xff\xfe utf8 \xc3")}, {"\xff key", 1}},
      {{"exit_code", 125}, {"error", "moon: keep the run's manifest: disk full"}, {"violations", 0}},
  };
}

TEST(EventFormat, LinesAreMakeEventsBytes) {
  const EventFormat fmt(kCtx);
  for (const auto& type : {"egress_opened", "egress_closed", "capability_violation", "run_finished", "x\"y\\z\n\xff"}) {
    for (const auto& data : sample_data()) expect_same_bytes(fmt, kCtx, type, data);
  }
}

TEST(EventFormat, ARunContextThatNeedsEscapingIsEscapedAsBefore) {
  const RunContext ctx{"h\"o\\st\n", "RUN\x01", "pa\xc3\xa9" "ck", "1.0.0-\xff", "sha256:\"x\""};
  const EventFormat fmt(ctx);
  for (const auto& data : sample_data()) expect_same_bytes(fmt, ctx, "dns_query", data);
}

TEST(EventFormat, DataNamingTheRunsIdentityGoesThroughMakeEvent) {
  // make_event replaces such a field in place (its position stays the identity's); the
  // format takes make_event's own path for it, and the store's columns follow the text.
  const EventFormat fmt(kCtx);
  expect_same_bytes(fmt, kCtx, "odd", {{"pack", "other"}, {"n", 1}});
  expect_same_bytes(fmt, kCtx, "odd", {{"n", 1}, {"run_id", 5}});
  expect_same_bytes(fmt, kCtx, "odd", {{"digest", "sha256:00"}});
  expect_same_bytes(fmt, kCtx, "odd", {{"version", nullptr}});
  expect_same_bytes(fmt, kCtx, "odd", json::array({1, 2}));
  const Event ev = fmt.make("odd", {{"pack", "other"}});
  EXPECT_EQ(ev.pack, "other");
  EXPECT_EQ(ev.run_id, kCtx.run_id);
}

TEST(EventFormat, NewEventsHaveTheirOwnIdAndTime) {
  const EventFormat fmt(kCtx);
  const Event a = fmt.make("egress_opened", {{"n", 1}});
  const Event b = fmt.make("egress_opened", {{"n", 1}});
  const json ja = json::parse(a.json());
  const json jb = json::parse(b.json());
  EXPECT_NE(ja["id"], jb["id"]);
  EXPECT_EQ(ja["time"].get<std::string>(), a.time);
  EXPECT_EQ(ja["data"]["run_id"], kCtx.run_id);
  EXPECT_EQ(ja["data"]["n"], 1);
  EXPECT_EQ(a.line.back(), '\n');
  EXPECT_EQ(a.line.find('\n'), a.line.size() - 1);  // one line
}

// The Moon stores a serialized event exactly as it stored the same event as an object:
// the same text, columns, chain hashes.
TEST(EventFormat, TheStoreKeepsSerializedEventsAsItKeptObjects) {
  moon::testing::TmpDir a;
  moon::testing::TmpDir b;
  auto by_object = moon::Store::open(a.path());
  auto by_text = moon::Store::open(b.path());
  ASSERT_TRUE(by_object) << by_object.error().describe();
  ASSERT_TRUE(by_text) << by_text.error().describe();
  const EventFormat fmt(kCtx);
  std::vector<json> objects;
  std::vector<Event> events;
  int i = 0;
  for (const auto& data : sample_data()) {
    const std::string type = i++ == 0 ? "run_started" : "egress_closed";
    const json old = make_event(kCtx, type, data);
    objects.push_back(old);
    events.push_back(fmt.make(type, data, old["id"].get<std::string>(), old["time"].get<std::string>()));
  }
  objects.push_back(make_event({"h", "", "", "", ""}, "moon_event", {{"n", 2}}));  // no run: NULL columns
  events.push_back(EventFormat({"h", "", "", "", ""})
                       .make("moon_event", {{"n", 2}}, objects.back()["id"].get<std::string>(),
                             objects.back()["time"].get<std::string>()));
  ASSERT_TRUE(by_object->append_events(objects));
  std::vector<moon::EventRow> rows;
  for (const auto& e : events) rows.push_back({e.json(), e.time, e.type, e.run_id, e.pack, e.version});
  ASSERT_TRUE(by_text->append_rows(rows));

  auto x = by_object->query_events({});
  auto y = by_text->query_events({});
  ASSERT_TRUE(x);
  ASSERT_TRUE(y);
  ASSERT_EQ(x->size(), objects.size());
  ASSERT_EQ(y->size(), x->size());
  for (size_t k = 0; k < x->size(); ++k) {
    const auto& o = (*x)[k];
    const auto& t = (*y)[k];
    EXPECT_EQ(t.json, o.json);
    EXPECT_EQ(t.json, std::string(events[k].json()));
    EXPECT_EQ(t.seq, o.seq);
    EXPECT_EQ(t.time, o.time);
    EXPECT_EQ(t.type, o.type);
    EXPECT_EQ(t.run_id, o.run_id);
    EXPECT_EQ(t.pack, o.pack);
    EXPECT_EQ(t.version, o.version);
    EXPECT_EQ(t.prev_hash, o.prev_hash);
    EXPECT_EQ(t.hash, o.hash);
  }
  // The run filter finds the same rows (the columns were bound, not left NULL).
  moon::EventQuery q;
  q.run_id = kCtx.run_id;
  EXPECT_EQ(by_text->query_events(q)->size(), objects.size() - 1);
  // A row without its time is refused, not stored with an empty one.
  const moon::EventRow no_time{"{}", "", "t", "", "", ""};
  EXPECT_FALSE(by_text->append_rows(std::vector<moon::EventRow>{no_time}));
}

// The recorder stores what the files got, and the run's first violation still flags.
TEST(EventFormat, TheRecorderStoresTheLinesAndFlagsOnAViolation) {
  moon::testing::TmpDir home;
  auto backend = moon::open_embedded(home.path());
  ASSERT_TRUE(backend) << backend.error().describe();
  const EventFormat fmt(kCtx);
  std::vector<Event> sent = {fmt.make("run_started", {{"host", "h"}}),
                             fmt.make("egress_opened", {{"connection", 1}, {"host", "ping.test"}}),
                             fmt.make("capability_violation", {{"surface", "network"}, {"resource", "x:1/tcp"}}),
                             fmt.make("run_finished", {{"exit_code", 3}})};
  {
    moon::RunRecorder rec(std::move(backend.value()), kCtx);
    json data = {{"not", "kept"}};
    for (auto& e : sent) {
      e.data = &data;  // as run_pack hands them out: the recorder must not keep the pointer
      rec.push(e);
    }
    ASSERT_TRUE(rec.finish());
  }
  auto store = moon::Store::open(home.path());
  ASSERT_TRUE(store);
  moon::EventQuery q;
  q.run_id = kCtx.run_id;
  auto got = store->query_events(q);
  ASSERT_TRUE(got);
  // The run's events, in order, and the Moon's pack_flagged (the flag, raised first).
  std::vector<std::string> stored;
  int flagged = 0;
  for (const auto& e : *got) {
    if (e.type == "pack_flagged") {
      ++flagged;
    } else {
      stored.push_back(e.json);
    }
  }
  EXPECT_EQ(flagged, 1);
  ASSERT_EQ(stored.size(), sent.size());
  for (size_t k = 0; k < sent.size(); ++k) EXPECT_EQ(stored[k], std::string(sent[k].json()));
  auto flags = store->flags(kCtx.pack, kCtx.version, kCtx.digest);
  ASSERT_TRUE(flags) << flags.error().describe();
  ASSERT_EQ(flags->size(), 1U);
  EXPECT_EQ((*flags)[0].run_id, kCtx.run_id);
}

}  // namespace
}  // namespace soyaos::scope
