// The run's record of violations, bounded whatever the agent does (SPEC.md E4, issue #15).
//
// A hostile agent can refuse itself millions of times a second, each time with a new
// resource of up to 4 KiB. The supervisor must still report every one without keeping
// them all: the first kMaxRepeatEvents violations are each an event; after that a
// violation of a (surface, access, resource) not seen before is still an event (a flood
// of repeats never hides a new resource), and repeats are aggregated per key (count,
// first and last time); past kMaxDistinct keys, the first new resource of each *area*
// (surface, access and the resource's area: for a path its directory, at most two levels
// deep; for a network name its last two labels) is still an event, for up to kMaxAreas
// areas, so a flood of distinct decoys in a few places never hides a resource elsewhere
// (issue #17); past both bounds a violation is only counted (dropped).
// Resources and details are cut to kMaxResourceBytes. docs/events.md documents the bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/observer.h"

namespace soyaos::supervisor {

inline constexpr size_t kMaxRepeatEvents = 1000;
inline constexpr size_t kMaxDistinct = 1000;
inline constexpr size_t kMaxAreas = 1000;
inline constexpr size_t kMaxResourceBytes = 1024;

class ViolationLog {
 public:
  struct Key {
    std::string surface, access, resource;
  };
  // Repeats of one key that were not emitted as their own events.
  struct Aggregate {
    Violation first;  // the key's first violation (as emitted)
    uint64_t count = 0;
    std::string first_time, last_time;  // of the aggregated (not emitted) repeats
  };

  // Cuts the agent-chosen strings of `v` to the bounds and makes them valid UTF-8.
  static Violation bounded(const Violation& v);
  // The area of a resource: "/root/.ssh/id" -> "/root/.ssh", "/tmp/x" -> "/tmp";
  // "dns:a.b.evil.com" -> "dns:evil.com", "x.evil.com:443/https" -> "evil.com:443/https".
  static std::string area_of(const std::string& surface, const std::string& resource);

  // Records one (already bounded) violation seen at `time`; true when it is to be emitted
  // as its own capability_violation event.
  bool record(const Violation& v, const std::string& time);

  [[nodiscard]] uint64_t total() const { return total_; }
  [[nodiscard]] uint64_t dropped() const { return dropped_; }
  // The violations emitted as events, in order (at most kMaxRepeatEvents + kMaxDistinct).
  [[nodiscard]] const std::vector<Violation>& emitted() const { return emitted_; }
  // Keys with repeats that were aggregated, in order of first appearance.
  [[nodiscard]] std::vector<Aggregate> aggregated() const;
  // Every violation counted by surface (dropped ones included).
  [[nodiscard]] const std::map<std::string, uint64_t>& by_surface() const { return by_surface_; }
  // run_finished's view: {"violations_aggregated": [...], ...} fields.
  [[nodiscard]] nlohmann::ordered_json aggregated_json() const;

 private:
  uint64_t total_ = 0;
  uint64_t dropped_ = 0;
  std::vector<Violation> emitted_;
  std::unordered_map<std::string, size_t> index_;  // key text -> aggregates_ slot
  std::vector<Aggregate> aggregates_;              // one per distinct key (count may be 0)
  std::unordered_set<std::string> areas_;          // areas seen past kMaxDistinct
  std::map<std::string, uint64_t> by_surface_;
};

}  // namespace soyaos::supervisor
