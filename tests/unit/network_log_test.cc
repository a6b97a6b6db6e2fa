// The run's bounded network events (supervisor/network_log.h; docs/events.md "Bounds"):
// each event class has its own bound, so a flood of one class hides nothing of another,
// and repeats past the bound are aggregated with their bytes (issue #17).
#include <gtest/gtest.h>

#include <string>

#include "supervisor/network_log.h"

namespace soyaos::supervisor {
namespace {

using Json = nlohmann::ordered_json;

Json dns(const std::string& name) { return {{"name", name}, {"query_type", "A"}, {"denied", false}}; }
Json conn(uint64_t id, const std::string& host, uint64_t port) {
  return {{"connection", id}, {"entry", "capabilities.egress[0]"}, {"host", host}, {"port", port}, {"protocol", "tcp"}};
}
Json closed(uint64_t id, const std::string& host, uint64_t port, uint64_t out, uint64_t in) {
  Json d = conn(id, host, port);
  d["bytes_out"] = out;
  d["bytes_in"] = in;
  return d;
}

TEST(NetworkEventLog, ADnsFloodDoesNotHideALaterConnection) {
  NetworkEventLog log;
  size_t emitted = 0;
  for (int i = 0; i < 20000; ++i) emitted += log.record("dns_query", dns("echo.test"), "t") ? 1 : 0;
  EXPECT_EQ(emitted, kMaxNetworkEventsPerClass);
  EXPECT_TRUE(log.record("dns_query", dns("collector.test"), "t")) << "a new name is still named";
  EXPECT_TRUE(log.record("egress_opened", conn(7, "collector.test", 9000), "t"));
  EXPECT_TRUE(log.record("egress_closed", closed(7, "collector.test", 9000, 51200, 2), "t"));
  EXPECT_EQ(log.total(), 20003u);
  EXPECT_EQ(log.dropped(), 0u) << "repeats of one name are aggregated, not dropped";
  const Json agg = log.aggregated_json();
  ASSERT_EQ(agg.size(), 1u) << agg.dump();
  EXPECT_EQ(agg[0]["type"], "dns_query");
  EXPECT_EQ(agg[0]["resource"], "dns:echo.test");
  EXPECT_EQ(agg[0]["count"], 20000u - kMaxNetworkEventsPerClass);
  EXPECT_EQ(log.totals().at("dns_query"), 20001u);
}

TEST(NetworkEventLog, TheEndOfARecordedConnectionIsAlwaysRecorded) {
  NetworkEventLog log;
  // The first connection opens; then a flood of closes of unrecorded connections fills the
  // egress_closed class; the recorded connection's close (with its bytes) still is an event.
  ASSERT_TRUE(log.record("egress_opened", conn(1, "collector.test", 9000), "t"));
  for (uint64_t i = 0; i < kMaxNetworkEventsPerClass + 10; ++i) {
    (void)log.record("egress_closed", closed(100 + i, "decoy.test", 80, 1, 1), "t");
  }
  EXPECT_TRUE(log.record("egress_closed", closed(1, "collector.test", 9000, 51200, 0), "t"));
  // The repeats past the bound are aggregated with their bytes.
  const Json agg = log.aggregated_json();
  ASSERT_EQ(agg.size(), 1u) << agg.dump();
  EXPECT_EQ(agg[0]["resource"], "decoy.test:80/tcp");
  EXPECT_EQ(agg[0]["count"], 10u);
  EXPECT_EQ(agg[0]["bytes_out"], 10u);
  EXPECT_EQ(agg[0]["bytes_in"], 10u);
}

TEST(NetworkEventLog, DistinctDecoysPastTheBoundsStillNameANewArea) {
  NetworkEventLog log;
  for (int i = 0; i < 30000; ++i) {
    (void)log.record("dns_query", dns("x" + std::to_string(i) + ".decoy.test"), "t");
  }
  // Every decoy name is distinct, all in one area: past both bounds they are dropped, counted.
  EXPECT_GT(log.dropped(), 0u);
  EXPECT_EQ(log.dropped_by_class().at("dns_query"), log.dropped());
  EXPECT_EQ(log.dropped(), 30000u - kMaxNetworkEventsPerClass - 1) << "the first decoy area past the bounds is named";
  EXPECT_TRUE(log.record("dns_query", dns("exfil.collector.example"), "t")) << "another area is still named";
  EXPECT_FALSE(log.record("dns_query", dns("y.decoy.test"), "t"));
}

TEST(NetworkEventLog, ResourcesAreBoundedAgentChosenText) {
  const std::string huge(10000, 'a');
  EXPECT_LE(NetworkEventLog::resource_of("dns_query", dns(huge)).size(), 1024u + 32u);  // and "…[+N bytes]"
  EXPECT_EQ(NetworkEventLog::resource_of("egress_opened", conn(1, "h.test", 443)), "h.test:443/tcp");
  EXPECT_EQ(NetworkEventLog::resource_of("http_request", {{"method", "POST"}, {"host", "api.test"}}),
            "http:POST api.test");
  EXPECT_FALSE(NetworkEventLog::bounds("capability_violation"));
  EXPECT_TRUE(NetworkEventLog::bounds("egress_closed"));
}

}  // namespace
}  // namespace soyaos::supervisor
