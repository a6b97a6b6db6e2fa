// The run's record of its network events (dns_query, egress_opened, egress_closed,
// http_request), bounded whatever the agent does (SPEC.md E4, issue #17).
//
// Each event class has its own bound, so a flood of one class never hides another (20,000
// DNS lookups cannot push a later egress_opened to a collector out of the record): the
// first kMaxNetworkEventsPerClass events of a class are each an event. Past that bound:
//   - an egress_closed of a connection whose egress_opened was an event is still an event
//     (what was sent and received on every recorded connection is kept);
//   - an event for a resource (a DNS name, host:port/protocol, an HTTP host and method)
//     not seen before is still an event, up to kMaxNetworkDistinct resources per class;
//     past those, the first event of each area (ViolationLog::area_of: a name's last two
//     labels) is, up to kMaxNetworkAreas areas per class;
//   - repeats of a resource already seen are aggregated (count, first and last time, and
//     for egress_closed/http_request the bytes each way) into run_finished;
//   - anything else is counted, per class, as dropped.
// Memory stays bounded: at most kMaxNetworkDistinct resources and kMaxNetworkAreas areas
// per class, and the ids of recorded connections still open. docs/events.md documents it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace soyaos::supervisor {

inline constexpr size_t kMaxNetworkEventsPerClass = 10000;
inline constexpr size_t kMaxNetworkDistinct = 1000;
inline constexpr size_t kMaxNetworkAreas = 1000;

class NetworkEventLog {
 public:
  // Whether `type` is one of the network event classes this log bounds.
  static bool bounds(const std::string& type);
  // The resource an event is about: "dns:NAME", "HOST:PORT/PROTOCOL", "http:METHOD HOST".
  static std::string resource_of(const std::string& type, const nlohmann::ordered_json& data);

  // Records one event of a bounded class seen at `time`; true when it is to be emitted.
  bool record(const std::string& type, const nlohmann::ordered_json& data, const std::string& time);

  [[nodiscard]] uint64_t total() const { return total_; }
  [[nodiscard]] uint64_t dropped() const;
  // Events seen per class (emitted, aggregated and dropped).
  [[nodiscard]] const std::map<std::string, uint64_t>& totals() const { return totals_; }
  // Events neither emitted nor aggregated, per class (only classes with some).
  [[nodiscard]] std::map<std::string, uint64_t> dropped_by_class() const;
  // run_finished's "network_events_aggregated": one object per resource with repeats.
  [[nodiscard]] nlohmann::ordered_json aggregated_json() const;

 private:
  struct Aggregate {
    std::string resource;
    uint64_t count = 0;
    std::string first_time, last_time;
    uint64_t bytes_out = 0, bytes_in = 0;
  };
  struct Class {
    uint64_t emitted = 0;
    uint64_t dropped = 0;
    std::unordered_map<std::string, size_t> index;  // resource -> aggregates slot
    std::vector<Aggregate> aggregates;               // one per remembered resource
    std::unordered_set<std::string> areas;           // areas named past the distinct bound
  };
  uint64_t total_ = 0;
  std::map<std::string, uint64_t> totals_;
  std::map<std::string, Class> classes_;
  std::unordered_set<uint64_t> open_;  // connections whose egress_opened was emitted
};

}  // namespace soyaos::supervisor
