// The export side of the Scope store (SPEC.md E5, E7): the query filters, paging by seq,
// their wire form, the manifests the Moon keeps, the OCSF mapping and the output digests.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "common/content_digest.h"
#include "common/digest.h"
#include "moon/backend.h"
#include "moon/store.h"
#include "moon_test_util.h"
#include "scope/events.h"
#include "scope/ocsf.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using testing::TmpDir;
using testing::write_file;

json event(const std::string& type, const std::string& run, const std::string& version, const std::string& digest,
           const std::string& time, json data = json::object()) {
  scope::RunContext ctx{"host", run, "alpha", version, digest};
  json e = scope::make_event(ctx, type, std::move(data));
  e["time"] = time;
  return e;
}

TEST(AuditQuery, FiltersByTypesVersionDigestUserAndTimeRange) {
  TmpDir t;
  auto store = EventStore::open(t.path());
  ASSERT_TRUE(store) << store.error().describe();
  std::vector<json> batch = {
      event("run_started", "R1", "1.0.0", "sha256:aa", "2026-11-29T10:00:00.000000Z", {{"user", {{"uid", 1000}}}}),
      event("capability_violation", "R1", "1.0.0", "sha256:aa", "2026-11-29T10:00:01.000000Z"),
      event("run_finished", "R1", "1.0.0", "sha256:aa", "2026-11-29T10:00:02.000000Z"),
      event("run_started", "R2", "2.0.0", "sha256:bb", "2026-11-29T11:00:00.000000Z", {{"user", {{"uid", 0}}}}),
      event("run_finished", "R2", "2.0.0", "sha256:bb", "2026-11-29T11:00:05.000000Z"),
      event("pack_pushed", "", "2.0.0", "sha256:bb", "2026-11-29T12:00:00.000000Z", {{"actor", {{"uid", 1000}}}}),
  };
  batch[5]["data"]["run_id"] = nullptr;
  ASSERT_TRUE(store->append(batch));
  auto count = [&](const EventQuery& q) { return store->query(q).value().size(); };
  EventQuery q;
  q.types = {"run_started", "run_finished"};
  EXPECT_EQ(count(q), 4U);
  q.type = "pack_pushed";
  EXPECT_EQ(count(q), 5U);
  q = {};
  q.pack = "alpha";
  q.version = "2.0.0";
  EXPECT_EQ(count(q), 3U);
  q = {};
  q.digest = "sha256:aa";
  EXPECT_EQ(count(q), 3U);
  q = {};
  q.uid = 1000;  // R1's events, and the push by uid 1000
  EXPECT_EQ(count(q), 4U);
  q.uid = 0;
  EXPECT_EQ(count(q), 2U);
  q.uid = 7;
  EXPECT_EQ(count(q), 0U);
  q = {};
  q.since = "2026-11-29T10:00:01.000000";
  q.until = "2026-11-29T11:00:05.000000";  // exclusive
  EXPECT_EQ(count(q), 3U);

  // Paging: the first N after the cursor, never the same event twice.
  auto all = store->query({}).value();
  std::vector<int64_t> seen;
  EventQuery page;
  page.limit = 4;
  page.first = true;
  for (;;) {
    auto got = store->query(page).value();
    if (got.empty()) break;
    for (const auto& e : got) seen.push_back(e.seq);
    page.after_seq = got.back().seq;
  }
  ASSERT_EQ(seen.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(seen[i], all[i].seq);
  // Without `first`, the last N, oldest first.
  EventQuery last;
  last.limit = 2;
  auto tail = store->query(last).value();
  ASSERT_EQ(tail.size(), 2U);
  EXPECT_EQ(tail[1].seq, all.back().seq);
}

TEST(AuditQuery, EveryFilterCrossesTheWire) {
  EventQuery q;
  q.run_id = "R";
  q.types = {"a", "b"};
  q.pack = "p";
  q.version = "1.0.0";
  q.digest = "sha256:aa";
  q.uid = 0;
  q.since = "2026-01-01T00:00:00.000000";
  q.until = "2026-01-02T00:00:00.000000";
  q.after_seq = 42;
  q.limit = 7;
  q.first = true;
  const EventQuery r = query_from_json(to_json(q));
  EXPECT_EQ(r.run_id, q.run_id);
  EXPECT_EQ(r.types, q.types);
  EXPECT_EQ(r.version, q.version);
  EXPECT_EQ(r.digest, q.digest);
  EXPECT_EQ(r.uid, q.uid);
  EXPECT_EQ(r.until, q.until);
  EXPECT_EQ(r.after_seq, 42);
  EXPECT_EQ(r.limit, 7);
  EXPECT_TRUE(r.first);
}

TEST(AuditQuery, TheMoonKeepsEachManifestOnceByDigest) {
  TmpDir t;
  auto store = Store::open(t.path());
  ASSERT_TRUE(store) << store.error().describe();
  const std::string text = "soyapack: v0\nname: a\n";
  auto d = store->put_manifest(text);
  ASSERT_TRUE(d) << d.error().describe();
  EXPECT_EQ(*d, "sha256:" + sha256_hex(text));
  EXPECT_EQ(store->put_manifest(text).value(), *d);  // once
  EXPECT_EQ(store->manifest(*d).value(), text);
  EXPECT_FALSE(store->manifest("sha256:00").value().has_value());
}

TEST(AuditQuery, OutTreeDigestIsOrderIndependentAndMatchesTheDirectory) {
  TmpDir t;
  write_file(t.path() / "out/a.txt", "alpha");
  fs::create_directories(t.path() / "out/sub");
  write_file(t.path() / "out/sub/b", "beta");
  ASSERT_EQ(::chmod((t.path() / "out/a.txt").c_str(), 0640), 0);
  ASSERT_EQ(::chmod((t.path() / "out/sub").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((t.path() / "out/sub/b").c_str(), 0600), 0);
  std::vector<OutTreeEntry> entries = {
      {"sub/b", false, 0600, "sha256:" + sha256_hex("beta")},
      {"a.txt", false, 0640, "sha256:" + sha256_hex("alpha")},
      {"sub", true, 0755, ""},
  };
  const std::string from_list = out_tree_digest(entries);
  EXPECT_EQ(out_tree_digest(t.path() / "out").value(), from_list);
  std::swap(entries[0], entries[2]);
  EXPECT_EQ(out_tree_digest(entries), from_list);
  entries[0].mode = 0700;  // a mode is part of the tree
  EXPECT_NE(out_tree_digest(entries), from_list);
}

TEST(AuditQuery, OcsfMapsByTypeAndSurface) {
  auto violation = [](json data) {
    return event("capability_violation", "R1", "1.0.0", "sha256:aa", "2026-11-29T10:00:01.250000Z", std::move(data));
  };
  json fs_read = scope::to_ocsf(violation({{"surface", "fs"}, {"resource", "/etc/shadow"}, {"access", "read"},
                                           {"errno", "ENOENT"}, {"pid", 1}}),
                                5, {{"uid", 1000}, {"name", "alice"}});
  EXPECT_EQ(fs_read["class_uid"], 1001);
  EXPECT_EQ(fs_read["type_uid"], 100102);
  EXPECT_EQ(fs_read["file"]["path"], "/etc/shadow");
  EXPECT_EQ(fs_read["time"], scope::rfc3339_to_unix_ms("2026-11-29T10:00:01.250000Z"));
  EXPECT_EQ(fs_read["time"].get<int64_t>() % 1000, 250);
  EXPECT_EQ(fs_read["actor"]["user"]["uid"], "1000");
  EXPECT_EQ(fs_read["actor"]["process"]["pid"], 1);
  EXPECT_EQ(fs_read["metadata"]["sequence"], 5);
  json net = scope::to_ocsf(violation({{"surface", "network"}, {"resource", "[2001:db8::1]:443/https"}}), 6);
  EXPECT_EQ(net["type_uid"], 400105);
  EXPECT_EQ(net["dst_endpoint"]["hostname"], "2001:db8::1");
  EXPECT_EQ(net["dst_endpoint"]["port"], 443);
  EXPECT_EQ(net["connection_info"]["protocol_name"], "https");
  json dns = scope::to_ocsf(violation({{"surface", "network"}, {"resource", "dns:evil.test"}}), 7);
  EXPECT_EQ(dns["dst_endpoint"]["hostname"], "dns:evil.test");
  EXPECT_FALSE(dns["dst_endpoint"].contains("port"));
  json other = scope::to_ocsf(event("pack_pushed", "", "1.0.0", "sha256:aa", "2026-11-29T10:00:00Z"), 8);
  EXPECT_EQ(other["class_uid"], 0);
  EXPECT_EQ(other["activity_name"], "pack_pushed");
  // A damaged event still maps (to a Base Event), never throws.
  json broken = scope::to_ocsf(json::object({{"type", 3}, {"data", "x"}}), 9);
  EXPECT_EQ(broken["class_uid"], 0);
  EXPECT_EQ(broken["time"], 0);
}

}  // namespace
}  // namespace soyaos::moon
