#include "scope/ocsf.h"

#include <cctype>
#include <cstdio>
#include <ctime>
#include <utility>

namespace soyaos::scope {
namespace {

using json = nlohmann::ordered_json;

struct Class {
  int uid;
  const char* name;
  int category_uid;
  const char* category_name;
};

constexpr Class kBase{0, "Base Event", 0, "Uncategorized"};
constexpr Class kFileSystem{1001, "File System Activity", 1, "System Activity"};
constexpr Class kProcess{1007, "Process Activity", 1, "System Activity"};
constexpr Class kNetwork{4001, "Network Activity", 4, "Network Activity"};
constexpr Class kHttp{4002, "HTTP Activity", 4, "Network Activity"};
constexpr Class kDns{4003, "DNS Activity", 4, "Network Activity"};

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// "HOST:PORT/PROTOCOL" or "[V6]:PORT/PROTOCOL" -> endpoint {hostname|ip, port}, protocol.
json endpoint_of(const std::string& resource, std::string* protocol) {
  json ep = json::object();
  std::string rest = resource;
  const size_t slash = rest.rfind('/');
  if (slash != std::string::npos) {
    if (protocol != nullptr) *protocol = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  std::string host = rest;
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && colon + 1 < rest.size() &&
      rest.find_first_not_of("0123456789", colon + 1) == std::string::npos && colon + 6 >= rest.size()) {
    host = rest.substr(0, colon);
    ep["port"] = std::stoi(rest.substr(colon + 1));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  ep["hostname"] = host;
  return ep;
}

void set_class(json& o, const Class& c, int activity_id, const std::string& activity_name) {
  o["class_uid"] = c.uid;
  o["class_name"] = c.name;
  o["category_uid"] = c.category_uid;
  o["category_name"] = c.category_name;
  o["activity_id"] = activity_id;
  o["activity_name"] = activity_name;
  o["type_uid"] = static_cast<int64_t>(c.uid) * 100 + activity_id;
  o["type_name"] = std::string(c.name) + ": " + activity_name;
}

void set_severity(json& o, int id) {
  static const char* const kNames[] = {"Unknown", "Informational", "Low", "Medium", "High", "Critical", "Fatal"};
  o["severity_id"] = id;
  o["severity"] = kNames[id >= 0 && id <= 6 ? id : 0];
}

void set_status(json& o, bool success, const std::string& detail = "") {
  o["status_id"] = success ? 1 : 2;
  o["status"] = success ? "Success" : "Failure";
  if (!detail.empty()) o["status_detail"] = detail;
}

// A refusal by the sandbox: the Security Control profile's action/disposition.
void set_denied(json& o) {
  o["action_id"] = 2;
  o["action"] = "Denied";
  o["disposition_id"] = 2;
  o["disposition"] = "Blocked";
}

}  // namespace

int64_t rfc3339_to_unix_ms(const std::string& t) {
  // The value of t[pos, pos+n) as decimal digits, -1 when one is not a digit.
  auto digits = [&](size_t pos, size_t n) {
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (i >= t.size() || t[i] < '0' || t[i] > '9') return -1;
      v = v * 10 + (t[i] - '0');
    }
    return v;
  };
  std::tm tm{};
  int frac_digits = 0;
  long frac = 0;
  tm.tm_year = digits(0, 4);
  tm.tm_mon = digits(5, 2);
  tm.tm_mday = digits(8, 2);
  tm.tm_hour = digits(11, 2);
  tm.tm_min = digits(14, 2);
  tm.tm_sec = digits(17, 2);
  if (t.size() < 20 || t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':' ||
      tm.tm_year < 0 || tm.tm_mon < 0 || tm.tm_mday < 0 || tm.tm_hour < 0 || tm.tm_min < 0 || tm.tm_sec < 0) {
    return -1;
  }
  size_t i = 19;
  if (i < t.size() && t[i] == '.') {
    for (++i; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
      if (frac_digits < 3) {
        frac = frac * 10 + (t[i] - '0');
        ++frac_digits;
      }
    }
  }
  while (frac_digits < 3) {
    frac *= 10;
    ++frac_digits;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = ::timegm(&tm);
  if (secs == static_cast<std::time_t>(-1)) return -1;
  return static_cast<int64_t>(secs) * 1000 + frac;
}

json to_ocsf(const json& event, int64_t seq, const json& user) {
  const json empty = json::object();
  const json& data = event.is_object() && event.contains("data") && event["data"].is_object() ? event["data"] : empty;
  const std::string type = str(event, "type");
  const std::string run_id = str(data, "run_id");
  const std::string subject = str(event, "subject");
  std::string host;
  if (const std::string source = str(event, "source"); source.rfind("soyaos://", 0) == 0) {
    host = source.substr(9, source.find('/', 9) == std::string::npos ? std::string::npos : source.find('/', 9) - 9);
  }

  json o = json::object();
  set_class(o, kBase, 99, type.empty() ? "Other" : type);
  set_severity(o, 1);
  const int64_t ms = rfc3339_to_unix_ms(str(event, "time"));
  o["time"] = ms >= 0 ? ms : 0;
  o["message"] = type + (subject.empty() ? "" : " " + subject);
  json metadata = {{"version", kOcsfVersion},
                   {"product", {{"name", "SoyaOS Comet"}, {"vendor_name", "SoyaOS"}}},
                   {"uid", str(event, "id")},
                   {"sequence", seq},
                   {"log_name", "scope"},
                   {"event_code", type},
                   {"original_time", str(event, "time")}};
  if (!run_id.empty()) metadata["correlation_uid"] = run_id;
  o["metadata"] = std::move(metadata);
  o["device"] = {{"hostname", host}, {"type_id", 0}};

  // The agent of a run is the actor (its pid inside the sandbox when known), running as
  // the user who started the run.
  json actor = json::object();
  if (!run_id.empty()) {
    json process = {{"uid", run_id}, {"name", subject}};
    if (data.contains("pid") && data["pid"].is_number_integer()) process["pid"] = data["pid"];
    actor["process"] = std::move(process);
  }
  // The daemon's attribution (SO_PEERCRED) first: the client's own claim cannot override it.
  json attributed = nullptr;
  if (event.is_object() && event.contains("soyaosuid") && event["soyaosuid"].is_number_integer()) {
    attributed = {{"uid", event["soyaosuid"]}, {"name", str(event, "soyaosuser")}};
  }
  const json& who = attributed.is_object()                                ? attributed
                    : data.contains("user") && data["user"].is_object()   ? data["user"]
                    : data.contains("actor") && data["actor"].is_object() ? data["actor"]
                                                                          : user;
  if (who.is_object()) {
    json u = json::object();
    if (who.contains("uid") && !who["uid"].is_null()) u["uid"] = who["uid"].is_string() ? who["uid"].get<std::string>() : who["uid"].dump();
    const std::string name = who.contains("name") ? str(who, "name") : str(who, "user");
    if (!name.empty()) u["name"] = name;
    actor["user"] = std::move(u);
  }
  o["actor"] = actor;

  const std::string surface = str(data, "surface");
  const std::string resource = str(data, "resource");
  if (type == "run_started" || type == "run_finished") {
    const bool started = type == "run_started";
    set_class(o, kProcess, started ? 1 : 2, started ? "Launch" : "Terminate");
    json process = {{"uid", run_id}, {"name", subject}};
    if (started) {
      std::string cmd;
      if (data.contains("argv") && data["argv"].is_array()) {
        for (const auto& a : data["argv"]) {
          if (a.is_string()) cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
        }
        if (!data["argv"].empty() && data["argv"][0].is_string()) process["file"] = {{"path", data["argv"][0]}};
      }
      process["cmd_line"] = cmd;
      set_status(o, true);
    } else {
      const int64_t exit_code = data.value("exit_code", int64_t{-1});
      process["exit_code"] = exit_code;
      set_status(o, exit_code == 0, exit_code == 0 ? "" : "exit code " + std::to_string(exit_code));
      if (data.value("violations", int64_t{0}) > 0) set_severity(o, 3);
    }
    o["process"] = std::move(process);
  } else if (type == "capability_violation") {
    set_denied(o);
    set_status(o, false, str(data, "errno"));
    set_severity(o, 3);
    if (surface == "fs") {
      const bool write = str(data, "access") == "write";
      set_class(o, kFileSystem, write ? 3 : 2, write ? "Update" : "Read");
      const size_t slash = resource.rfind('/');
      o["file"] = {{"path", resource}, {"name", slash == std::string::npos ? resource : resource.substr(slash + 1)},
                   {"type_id", 0}};
    } else if (surface == "network") {
      set_class(o, kNetwork, 5, "Refuse");
      std::string protocol;
      o["dst_endpoint"] = endpoint_of(resource, &protocol);
      o["src_endpoint"] = {{"hostname", "comet"}, {"uid", run_id}};
      if (!protocol.empty()) o["connection_info"] = {{"protocol_name", protocol}, {"direction_id", 2}};
    } else if (surface == "exec") {
      set_class(o, kProcess, 1, "Launch");
      o["process"] = {{"file", {{"path", resource}}}, {"name", resource}};
    } else {
      set_class(o, kProcess, 99, surface.empty() ? "Other" : surface);
      o["process"] = {{"uid", run_id}, {"name", subject}};
    }
    o["message"] = "capability_violation " + surface + " " + resource + " (" + str(data, "syscall") + ": " +
                   str(data, "errno") + ")";
  } else if (type == "egress_opened" || type == "egress_closed") {
    const bool opened = type == "egress_opened";
    set_class(o, kNetwork, opened ? 1 : 2, opened ? "Open" : "Close");
    json dst = {{"hostname", str(data, "host")}};
    if (data.contains("port")) dst["port"] = data["port"];
    if (!str(data, "address").empty()) dst["ip"] = str(data, "address");
    o["dst_endpoint"] = std::move(dst);
    o["src_endpoint"] = {{"hostname", "comet"}, {"uid", run_id}};
    o["connection_info"] = {{"protocol_name", str(data, "protocol")}, {"direction_id", 2}};
    if (!opened) {
      o["traffic"] = {{"bytes_out", data.value("bytes_out", int64_t{0})},
                      {"bytes_in", data.value("bytes_in", int64_t{0})},
                      {"bytes", data.value("bytes_out", int64_t{0}) + data.value("bytes_in", int64_t{0})}};
    }
    set_status(o, str(data, "reason") != "upstream unreachable", str(data, "reason"));
  } else if (type == "dns_query") {
    set_class(o, kDns, 1, "Query");
    o["query"] = {{"hostname", str(data, "name")}, {"type", str(data, "query_type")}};
    json answers = json::array();
    if (data.contains("answer") && data["answer"].is_array()) {
      for (const auto& a : data["answer"]) answers.push_back({{"rdata", a.is_string() ? a.get<std::string>() : a.dump()}});
    }
    o["answers"] = std::move(answers);
    o["rcode"] = str(data, "rcode");
    o["src_endpoint"] = {{"hostname", "comet"}, {"uid", run_id}};
    const bool denied = data.value("denied", false);
    set_status(o, !denied);
    if (denied) set_denied(o);
  } else if (type == "http_request") {
    static const std::pair<const char*, int> kMethods[] = {{"CONNECT", 1}, {"DELETE", 2}, {"GET", 3},  {"HEAD", 4},
                                                           {"OPTIONS", 5}, {"POST", 6},   {"PUT", 7}, {"TRACE", 8}};
    const std::string method = str(data, "method");
    int activity = 99;
    for (const auto& [m, id] : kMethods) {
      if (method == m) activity = id;
    }
    std::string name = "Other";
    if (activity != 99) {  // "GET" -> "Get", as OCSF names the activity
      name = method;
      for (size_t i = 1; i < name.size(); ++i) name[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
    }
    set_class(o, kHttp, activity, name);
    o["http_request"] = {{"http_method", method}, {"url", {{"path", str(data, "path")}, {"hostname", str(data, "host")}}}};
    if (data.contains("status")) o["http_response"] = {{"code", data["status"]}};
    o["dst_endpoint"] = {{"hostname", str(data, "host")}};
    o["src_endpoint"] = {{"hostname", "comet"}, {"uid", run_id}};
    o["traffic"] = {{"bytes_out", data.value("bytes_up", int64_t{0})}, {"bytes_in", data.value("bytes_down", int64_t{0})}};
  } else if (type == "pack_flagged" && data.value("raised", false)) {
    set_severity(o, 4);
  }
  o["unmapped"] = {{"soyaos", {{"type", type}, {"subject", subject}, {"data", data}}}};
  return o;
}

}  // namespace soyaos::scope
