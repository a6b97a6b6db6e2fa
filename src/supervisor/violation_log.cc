#include "supervisor/violation_log.h"

#include "common/text.h"

#include <algorithm>

namespace soyaos::supervisor {

Violation ViolationLog::bounded(const Violation& v) {
  Violation out = v;
  out.resource = truncate_utf8(valid_utf8(v.resource), kMaxResourceBytes);
  out.detail = truncate_utf8(valid_utf8(v.detail), kMaxResourceBytes);
  out.syscall = truncate_utf8(valid_utf8(v.syscall), 64);
  return out;
}

std::string ViolationLog::area_of(const std::string& surface, const std::string& resource) {
  if (!resource.empty() && resource.front() == '/') {
    // The directory, at most two levels deep: "/a/b/c/d" -> "/a/b", "/a/b" -> "/a".
    const size_t last = resource.find_last_of('/');
    std::string dir = last == 0 ? std::string("/") : resource.substr(0, last);
    int seen = 0;
    for (size_t i = 0; i < dir.size(); ++i) {
      if (dir[i] == '/' && ++seen == 3) {
        dir.resize(i);
        break;
      }
    }
    return dir;
  }
  if (surface != "network") return resource;
  // A name's last two labels: a flood of subdomains of one name is one area.
  std::string prefix;
  std::string rest = resource;
  if (rest.rfind("dns:", 0) == 0) {
    prefix = "dns:";
    rest = rest.substr(4);
  }
  const size_t host_end = std::min(rest.find(':'), rest.find('/'));
  std::string host = rest.substr(0, host_end);
  const std::string tail = host_end == std::string::npos ? std::string() : rest.substr(host_end);
  const size_t dot = host.rfind('.');
  if (dot != std::string::npos && dot > 0) {
    const size_t dot2 = host.rfind('.', dot - 1);
    if (dot2 != std::string::npos) host = host.substr(dot2 + 1);
  }
  return prefix + host + tail;
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
      // A new area is still named: decoys flooding one place do not hide another.
      if (areas_.size() < kMaxAreas &&
          areas_.insert(v.surface + '\0' + v.access + '\0' + area_of(v.surface, v.resource)).second) {
        emitted_.push_back(v);
        return true;
      }
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
