#include "supervisor/network_log.h"

#include "common/text.h"
#include "supervisor/violation_log.h"

namespace soyaos::supervisor {
namespace {

using Json = nlohmann::ordered_json;

std::string str(const Json& d, const char* key) {
  auto it = d.find(key);
  return it != d.end() && it->is_string() ? it->get<std::string>() : "";
}

uint64_t num(const Json& d, const char* key) {
  auto it = d.find(key);
  return it != d.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

}  // namespace

bool NetworkEventLog::bounds(const std::string& type) {
  return type == "dns_query" || type == "egress_opened" || type == "egress_closed" || type == "http_request";
}

std::string NetworkEventLog::resource_of(const std::string& type, const Json& data) {
  std::string r;
  if (type == "dns_query") {
    r = "dns:" + str(data, "name");
  } else if (type == "http_request") {
    r = "http:" + str(data, "method") + " " + str(data, "host");
  } else {
    auto port = data.find("port");
    r = str(data, "host") + ":" + (port != data.end() && port->is_number() ? port->dump() : std::string("?")) + "/" +
        str(data, "protocol");
  }
  // Agent-chosen names: bounded like a violation's resource.
  return truncate_utf8(valid_utf8(r), kMaxResourceBytes);
}

bool NetworkEventLog::record(const std::string& type, const Json& data, const std::string& time) {
  ++total_;
  ++totals_[type];
  Class& c = classes_[type];
  const auto conn = data.find("connection");
  const bool has_conn = conn != data.end() && conn->is_number_unsigned();
  const uint64_t conn_id = has_conn ? conn->get<uint64_t>() : 0;
  // The end of a recorded connection is always recorded: its bytes each way are the point.
  if (type == "egress_closed" && has_conn && open_.erase(conn_id) > 0) {
    ++c.emitted;
    return true;
  }
  const std::string resource = resource_of(type, data);
  auto emit = [&] {
    ++c.emitted;
    if (type == "egress_opened" && has_conn) open_.insert(conn_id);
    return true;
  };
  auto it = c.index.find(resource);
  if (it == c.index.end() && c.aggregates.size() < kMaxNetworkDistinct) {
    it = c.index.emplace(resource, c.aggregates.size()).first;
    c.aggregates.push_back(Aggregate{resource, 0, {}, {}, 0, 0});
    return emit();  // a resource not seen before, within the distinct bound
  }
  if (c.emitted < kMaxNetworkEventsPerClass) return emit();
  if (it == c.index.end()) {
    // Past both bounds a new area is still named: decoys in a few places hide nothing elsewhere.
    if (c.areas.size() < kMaxNetworkAreas && c.areas.insert(ViolationLog::area_of("network", resource)).second) {
      return emit();
    }
    ++c.dropped;
    return false;
  }
  Aggregate& a = c.aggregates[it->second];
  if (a.count++ == 0) a.first_time = time;
  a.last_time = time;
  a.bytes_out += type == "http_request" ? num(data, "bytes_up") : num(data, "bytes_out");
  a.bytes_in += type == "http_request" ? num(data, "bytes_down") : num(data, "bytes_in");
  return false;
}

uint64_t NetworkEventLog::dropped() const {
  uint64_t n = 0;
  for (const auto& [type, c] : classes_) n += c.dropped;
  return n;
}

std::map<std::string, uint64_t> NetworkEventLog::dropped_by_class() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [type, c] : classes_) {
    if (c.dropped > 0) out[type] = c.dropped;
  }
  return out;
}

Json NetworkEventLog::aggregated_json() const {
  Json list = Json::array();
  for (const auto& [type, c] : classes_) {
    for (const auto& a : c.aggregates) {
      if (a.count == 0) continue;
      Json j = {{"type", type}, {"resource", a.resource}, {"count", a.count}, {"first", a.first_time},
                {"last", a.last_time}};
      if (type == "egress_closed" || type == "http_request") {
        j["bytes_out"] = a.bytes_out;
        j["bytes_in"] = a.bytes_in;
      }
      list.push_back(std::move(j));
    }
  }
  return list;
}

}  // namespace soyaos::supervisor
