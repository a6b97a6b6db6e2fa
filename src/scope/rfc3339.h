// The text of an instant as every event and record writes it (RFC 3339, UTC, microseconds):
// "2026-11-29T12:00:00.123456Z". Formatted by hand from the civil date (issue #16: strftime
// was a measurable part of each event's cost in the gateway); the unit tests compare it with
// gmtime_r + strftime.
#pragma once

#include <cstdint>
#include <string>

namespace soyaos::scope {

// `unix_us`: microseconds since 1970-01-01T00:00:00Z (negative before). Years 1000..9999
// are formatted by hand; any other year by strftime, exactly as before.
std::string format_rfc3339(int64_t unix_us);

}  // namespace soyaos::scope
