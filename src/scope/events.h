// Scope events (SPEC.md §4): CloudEvents 1.0 structured JSON, one object per line.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
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

// The text of an event object as it is written and stored (E3, E6: what the chain hashes):
// compact JSON, invalid UTF-8 replaced by U+FFFD. No newline.
std::string dump_event(const nlohmann::ordered_json& event);

// One event serialized once (E4): the same bytes go to every events file, stdout and the
// Moon, which stores and hashes them as they are (no second serialisation, no copy of a
// JSON tree per consumer).
struct Event {
  std::string type;
  std::string time;     // the envelope's `time`
  std::string line;     // dump_event() of the whole event, then '\n'
  std::string run_id;   // data.run_id, data.pack, data.version: the store's indexed columns
  std::string pack;
  std::string version;
  // The fields the emitter gave (without the run's identity); valid only while the event
  // is being handed out (RunHooks::on_event), null elsewhere.
  const nlohmann::ordered_json* data = nullptr;
  // The event's JSON text without the newline.
  [[nodiscard]] std::string_view json() const {
    return line.empty() ? std::string_view() : std::string_view(line.data(), line.size() - 1);
  }
};

// Serializes the events of one run without building a JSON object per event: the envelope's
// run-wide fields are escaped once, the event's own data is dumped once. Byte for byte the
// line of dump_event(make_event(ctx, type, data)) with the same id and time (unit test
// EventFormat.*); data that is not an object, or that names a field of the run's identity
// (run_id, pack, version, digest), goes through make_event itself.
class EventFormat {
 public:
  explicit EventFormat(RunContext ctx);
  // A new event: a new id, the time now.
  [[nodiscard]] Event make(const std::string& type, const nlohmann::ordered_json& data) const;
  [[nodiscard]] Event make(const std::string& type, const nlohmann::ordered_json& data, const std::string& id,
                           const std::string& time) const;

 private:
  RunContext ctx_;
  std::string source_;    // the escaped JSON strings of `source` and `subject`
  std::string subject_;
  std::string identity_;  // {"run_id":…,"pack":…,"version":…,"digest":… (no closing brace)
};

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
  // Writes the line as it is (one write(2) per file).
  Status emit(const Event& event);
  Status flush();
  // stdout's reader went away (EPIPE): later events were not written there (only there).
  [[nodiscard]] bool stdout_closed() const { return stdout_closed_; }

 private:
  Status write_line(const std::string& line);
  std::vector<UniqueFd> files_;
  bool to_stdout_ = false;
  bool stdout_closed_ = false;
};

}  // namespace soyaos::scope
