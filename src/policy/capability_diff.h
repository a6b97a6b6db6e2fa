// What pack B may do that pack A may not, and the reverse (SPEC.md C12: `soyaos pack diff`,
// and the consent check that stops a pulled version wider than the last approved one).
//
// Compared: egress entries (host:port/protocol, "*" for any), the http rules of each entry
// both have, fs read and write paths, secrets (name and each host its value may go to),
// the determinism tier, and the resource limits (C9 defaults for absent ones).
// "Wider" is deliberately simple and conservative: anything B adds (an entry, a rule, a
// path, a secret or a host of one), a higher tier, a raised limit, or an entry of A whose
// http rules B drops (no rules = any request) widens; a removal or a lowered limit
// narrows. Nothing is judged by meaning (a new path under an old one is still "added"):
// the operator reads the list, the tool never decides that an addition is harmless.
// Pure data in, data out: no I/O.
#pragma once

#include <string>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::policy {

enum class ChangeKind { added, removed, changed };
const char* to_string(ChangeKind);  // "added", "removed", "changed"

struct CapabilityChange {
  std::string area;      // "egress", "http", "fs.read", "fs.write", "secrets", "tier", "limits.memory", ...
  ChangeKind kind = ChangeKind::added;
  std::string item;      // what was added or removed ("api.example.com:443/https", "POST /v1/**" ...)
  std::string entry;     // http: the egress entry the rule belongs to; secrets: the secret's name
  std::string from, to;  // changed: the old and new values (tier, limits)
  bool wider = false;    // this change lets B do something A could not
};

struct CapabilityDiff {
  std::vector<CapabilityChange> changes;  // in a fixed order: egress, http, fs, secrets, tier, limits
  [[nodiscard]] bool empty() const { return changes.empty(); }
  // Some change widens (see the header comment).
  [[nodiscard]] bool wider() const;
};

// What B (`to`) adds and removes relative to A (`from`).
CapabilityDiff diff_capabilities(const manifest::Manifest& from, const manifest::Manifest& to);

// One entry per change ("+ egress    api.example.com:443/https"; "~ tier    read-only ->
// side-effect  (wider)"), then a summary entry, without a trailing newline; values escaped for
// a terminal, or kept raw with escape = false, for a caller that escapes each entry where it
// prints it (E7: once, not twice). One entry per change because a raw value may hold a
// newline (a manifest path may): split on '\n', it would print as a line of its own.
std::vector<std::string> format_diff_lines(const CapabilityDiff& diff, bool escape = true);

// format_diff_lines escaped, each entry ending in '\n'. Always escaped: raw text must
// not be split on newlines (see above).
std::string format_diff_text(const CapabilityDiff& diff);

// The egress entry as the diff names it: "host:port/protocol", "*" for egress: "*".
std::string egress_key(const manifest::EgressEntry& e);

}  // namespace soyaos::policy
