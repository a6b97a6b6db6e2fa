// Value-level rules of the manifest (internal to the manifest stage; the public helpers
// are in manifest.h). Pure functions: no I/O, no exceptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "manifest/manifest.h"

namespace soyaos::manifest::detail {

// ^[a-z][a-z0-9-]{0,62}$
bool is_pack_name(std::string_view s);
// Tool and example names: ^[a-z][a-z0-9_-]{0,62}$
bool is_item_name(std::string_view s);
// ^[A-Z_][A-Z0-9_]*$
bool is_env_name(std::string_view s);
// Semantic Versioning 2.0.0, full grammar (pre-release and build metadata included).
bool is_semver(std::string_view s);
// A relative, normalised path inside the pack: no leading "/", no "." / ".." / empty
// components, no trailing "/".
bool is_normalised_relative(std::string_view s);

// Egress host (M2): lower-cases and canonicalises; nullopt when not a DNS name, a
// leading "*." wildcard over a DNS name with at least two labels, or an IP literal
// (IPv6 with or without brackets; stored without).
std::optional<std::string> normalise_host(std::string_view s, bool allow_wildcard);
bool is_ip_literal(std::string_view host);

// Tool URL (M3): scheme https/http/wss/ws, host (DNS name, IPv4, [IPv6]), optional port.
// On failure returns nullopt and sets `why`.
std::optional<ToolTarget> parse_tool_url(std::string_view url, std::string& why);

// "512Mi", "1Gi", "100M", "1048576" -> bytes.
std::optional<uint64_t> parse_size(std::string_view s);
// "60s", "5m", "1500ms", "1h" -> milliseconds.
std::optional<uint64_t> parse_duration_ms(std::string_view s);

}  // namespace soyaos::manifest::detail
