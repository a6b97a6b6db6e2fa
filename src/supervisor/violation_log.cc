#include "supervisor/violation_log.h"

#include "common/text.h"

namespace soyaos::supervisor {

Violation ViolationLog::bounded(const Violation& v) {
  Violation out = v;
  out.resource = truncate_utf8(valid_utf8(v.resource), kMaxResourceBytes);
  out.detail = truncate_utf8(valid_utf8(v.detail), kMaxResourceBytes);
  out.syscall = truncate_utf8(valid_utf8(v.syscall), 64);
  return out;
}

bool ViolationLog::record(const Violation& v, const std::string& time) {
  ++total_;
  ++by_surface_[v.surface];
  // NUL cannot occur in the three parts (valid_utf8 keeps it, but paths and names never
  // hold one), so it separates them unambiguously.
  std::string key = v.surface + '\0' + v.access + '\0' + v.resource;
  auto it = index_.find(key);
  if (it == index_.end()) {
    if (aggregates_.size() >= kMaxDistinct) {
      ++dropped_;
      return false;
    }
    index_.emplace(std::move(key), aggregates_.size());
    aggregates_.push_back(Aggregate{v, 0, {}, {}});
    emitted_.push_back(v);
    return true;
  }
  if (emitted_.size() < kMaxRepeatEvents) {
    emitted_.push_back(v);
    return true;
  }
  Aggregate& a = aggregates_[it->second];
  if (a.count++ == 0) a.first_time = time;
  a.last_time = time;
  return false;
}

std::vector<ViolationLog::Aggregate> ViolationLog::aggregated() const {
  std::vector<Aggregate> out;
  for (const auto& a : aggregates_) {
    if (a.count > 0) out.push_back(a);
  }
  return out;
}

nlohmann::ordered_json ViolationLog::aggregated_json() const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& a : aggregates_) {
    if (a.count == 0) continue;
    nlohmann::ordered_json j = {{"surface", a.first.surface}, {"resource", a.first.resource}};
    if (!a.first.access.empty()) j["access"] = a.first.access;
    j["syscall"] = a.first.syscall;
    j["errno"] = a.first.errno_name;
    j["count"] = a.count;
    j["first"] = a.first_time;
    j["last"] = a.last_time;
    list.push_back(std::move(j));
  }
  return list;
}

}  // namespace soyaos::supervisor
