// Enum spellings exactly as they appear in soyapack.yaml.
#include "manifest/manifest.h"

namespace soyaos::manifest {
namespace {

template <typename E, std::size_t N>
std::optional<E> lookup(const std::pair<E, const char*> (&table)[N], const std::string& s) {
  for (const auto& [value, name] : table) {
    if (s == name) return value;
  }
  return std::nullopt;
}

template <typename E, std::size_t N>
const char* name_of(const std::pair<E, const char*> (&table)[N], E e) {
  for (const auto& [value, name] : table) {
    if (value == e) return name;
  }
  return "?";
}

constexpr std::pair<Runtime, const char*> kRuntimes[] = {
    {Runtime::python3, "python3"}, {Runtime::node, "node"}, {Runtime::native, "native"}};
constexpr std::pair<Protocol, const char*> kProtocols[] = {{Protocol::https, "https"},
                                                           {Protocol::http, "http"},
                                                           {Protocol::tcp, "tcp"},
                                                           {Protocol::udp, "udp"},
                                                           {Protocol::moon_proxy, "moon-proxy"}};
constexpr std::pair<Tier, const char*> kTiers[] = {{Tier::read_only, "read-only"},
                                                   {Tier::side_effect, "side-effect"},
                                                   {Tier::unrestricted, "unrestricted"}};
constexpr std::pair<ToolKind, const char*> kToolKinds[] = {
    {ToolKind::http_get, "builtin.http_get"},   {ToolKind::http_post, "builtin.http_post"},
    {ToolKind::http_put, "builtin.http_put"},   {ToolKind::http_patch, "builtin.http_patch"},
    {ToolKind::http_delete, "builtin.http_delete"}, {ToolKind::llm, "builtin.llm"},
    {ToolKind::fs_read, "builtin.fs_read"},     {ToolKind::fs_write, "builtin.fs_write"},
    {ToolKind::custom, "custom"}};

}  // namespace

const char* to_string(Runtime v) { return name_of(kRuntimes, v); }
const char* to_string(Protocol v) { return name_of(kProtocols, v); }
const char* to_string(Tier v) { return name_of(kTiers, v); }
const char* to_string(ToolKind v) { return name_of(kToolKinds, v); }
std::optional<Runtime> runtime_from_string(const std::string& s) { return lookup(kRuntimes, s); }
std::optional<Protocol> protocol_from_string(const std::string& s) { return lookup(kProtocols, s); }
std::optional<Tier> tier_from_string(const std::string& s) { return lookup(kTiers, s); }
std::optional<ToolKind> tool_kind_from_string(const std::string& s) { return lookup(kToolKinds, s); }

}  // namespace soyaos::manifest
