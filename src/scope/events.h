// Scope events (SPEC.md §4): CloudEvents 1.0 structured JSON, one object per line.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"

namespace soyaos::scope {

// The fields every event of one run shares.
struct RunContext {
  std::string host;     // gethostname(), in `source`
  std::string run_id;
  std::string pack;
  std::string version;
  std::string digest;   // "sha256:..."
};

// Builds one event: envelope (specversion, id, source, type, time, subject,
// datacontenttype) plus `data`, which gets run_id, pack, version and digest added.
nlohmann::ordered_json make_event(const RunContext& ctx, const std::string& type, nlohmann::ordered_json data);

// RFC 3339 UTC time with microseconds: "2026-11-29T12:00:00.123456Z".
std::string now_rfc3339();
// A new random identifier (UUID v4 text form) for event ids.
std::string new_event_id();
// A new run id: time-ordered, 26 characters of Crockford base32 (ULID layout).
std::string new_run_id();

// Where events go: any number of append-only files and/or stdout. Each emit writes one
// complete line with a single write(2) (O_APPEND), so concurrent runs never interleave
// within a line. flush() fsyncs files: the run reports success only after it (E4).
class EventSink {
 public:
  Status add_file(const std::string& path);
  void add_stdout();
  Status emit(const nlohmann::ordered_json& event);
  Status flush();
  // stdout's reader went away (EPIPE): later events were not written there (only there).
  [[nodiscard]] bool stdout_closed() const { return stdout_closed_; }

 private:
  std::vector<UniqueFd> files_;
  bool to_stdout_ = false;
  bool stdout_closed_ = false;
};

}  // namespace soyaos::scope
