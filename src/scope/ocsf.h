// Scope events as OCSF 1.1 events (SPEC.md E7, `soyaos scope query --format ocsf`): one
// SIEM-ready object per stored event. The mapping (which class for which event type and
// surface, and where each field goes) is documented in docs/ocsf.md; the whole original
// event data is kept under `unmapped.soyaos` so that nothing is lost in translation.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace soyaos::scope {

inline constexpr const char* kOcsfVersion = "1.1.0";

// `event` is a stored CloudEvent (json), `seq` its store sequence number. `user`, when
// not null, is the {uid, name} of the user who started the event's run (run_started's
// `user`), mapped to actor.user. Never throws: a malformed event maps to a Base Event.
nlohmann::ordered_json to_ocsf(const nlohmann::ordered_json& event, int64_t seq,
                               const nlohmann::ordered_json& user = nullptr);

// RFC 3339 UTC text ("2026-11-29T12:00:00.123456Z") as Unix milliseconds; -1 when it does
// not parse.
int64_t rfc3339_to_unix_ms(const std::string& text);

}  // namespace soyaos::scope
