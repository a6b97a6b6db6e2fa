// libFuzzer target for the manifest parser (STYLE.md: fuzz every parser).
// parse_manifest promises: never throws, never crashes, bounded time and memory, and a
// manifest exactly when there are no errors. Invariant violations trap.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "manifest/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soyaos::manifest;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const LoadResult r = parse_manifest(text, "fuzz/soyapack.yaml");
  if (r.manifest.has_value() == !r.errors.empty()) __builtin_trap();
  for (const Diagnostic& d : r.errors) {
    if (d.format().empty() || d.message.empty()) __builtin_trap();
    if (d.mark.line < 0 || d.mark.column < 0) __builtin_trap();
  }
  if (r.manifest) {
    const Manifest& m = *r.manifest;
    // Whatever was accepted must satisfy the rules the rest of the system relies on.
    for (const FsPath& p : m.capabilities.fs_read) {
      if (!is_normalised_absolute(p.path)) __builtin_trap();
    }
    for (const FsPath& p : m.capabilities.fs_write) {
      if (!is_normalised_absolute(p.path) || path_covers(p.path, "/workdir")) __builtin_trap();
    }
    for (const EgressEntry& e : m.capabilities.egress) {
      if (e.port == 0 || e.host.empty()) __builtin_trap();
      (void)host_matches(e.host, "a.example.com");
      // M8: rules only on https/http entries, each a method and a path starting with '/'.
      if (!e.http.empty() && e.protocol != Protocol::https && e.protocol != Protocol::http) __builtin_trap();
      for (const HttpRule& r : e.http) {
        if (r.method.empty() || r.path.empty() || r.path[0] != '/') __builtin_trap();
        if (r.path.find('?') != std::string::npos) __builtin_trap();
      }
    }
    // M7: names valid, never a reserved variable or one agent.env sets; concrete hosts.
    for (const SecretDecl& d : m.secrets) {
      if (d.name.empty() || is_reserved_env_name(d.name) || m.agent.env.count(d.name) != 0) __builtin_trap();
      if (d.hosts.empty() || d.hosts.size() != d.host_marks.size()) __builtin_trap();
      for (const std::string& h : d.hosts) {
        if (h.empty() || h[0] == '*') __builtin_trap();
      }
    }
    if (m.capabilities.egress_any && m.capabilities.tier != Tier::unrestricted) __builtin_trap();
    for (const Tool& t : m.tools) {
      const bool http = t.kind != ToolKind::fs_read && t.kind != ToolKind::fs_write && t.kind != ToolKind::custom;
      if (http && (!t.target || t.target->port == 0 || t.target->host.empty())) __builtin_trap();
      if (t.kind == ToolKind::custom && !t.side_effect) __builtin_trap();
    }
  }
  return 0;
}
