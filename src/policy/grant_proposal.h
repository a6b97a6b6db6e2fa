// From denied attempts to the manifest lines that would allow them (issue #13, SPEC C13).
//
// The violation summary of `soyaos run` ends with "to allow: add ... under ..." hints, and
// `soyaos pack learn` builds its proposed `capabilities` block (learn_proposal.h), from the
// same answers: this module, the one rule set for both. It is pure (no I/O, no clock): the attempts in, the proposals out, in a stable order.
//
// What it proposes, and what it never does (docs/cli.md "to allow" hints):
// - fs read: the path itself; two or more denied paths in one directory → that directory
//   (`/data/*: 3 reads`). fs write: the directory the file would be created in, since a
//   writable path is a directory the Comet creates (`/tmp/*: 12 writes`), or the directory
//   itself when the agent made it (mkdir /var/cache/app → /var/cache/app); under
//   /workdir/out → /workdir/out. A proposal covered by another is folded into it.
// - never `/`, never a path the Comet owns (the runtime layer: /usr, /bin, /lib*, /sbin,
//   /etc, /proc, /dev, the runtime layer's probe table, /sys), never /workdir or a part of
//   the pack: those attempts are "not grantable", with why and what to do instead.
// - network: a refused connection → `{host, port, protocol}` as seen (the gateway's
//   protocol when it read the first bytes, else the packet's tcp/udp); a refused DNS name
//   alone → the host with its port and protocol unknown (the name was refused before any
//   connection), unless a refused connection to the same host says them; an http rule
//   refusal → `{method, path}` under that entry's `http`. Operator policy (egress.deny,
//   private addresses, the Moon proxy's allowlist) and malformed traffic (SNI or Host not
//   matching, DNS query types other than A/AAAA) are not grantable by the manifest.
// - exec, fork and setting clocks: never grantable (the seed forbids them, C3/C4).
// - bounded whatever the agent tried: at most kMaxFsProposals per access and
//   kMaxEgressProposals hosts; the rest is counted in `omitted`, never silently lost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace soyaos::policy {

inline constexpr size_t kMaxFsProposals = 24;      // per access (read, write)
inline constexpr size_t kMaxEgressProposals = 32;  // distinct hosts
inline constexpr size_t kMaxNotGrantable = 16;     // distinct not-grantable lines
inline constexpr size_t kMaxProposalExamples = 3;  // resources kept per proposal

// One denied attempt, as a capability_violation event names it (E1). `count` lets callers
// pass aggregated repeats (run_finished's violations_aggregated) without expanding them.
struct DeniedAttempt {
  std::string surface;     // fs | network | exec | time
  std::string access;      // fs: read | write
  std::string resource;    // "/tmp/x", "dns:api.example.com", "api.example.com:443/https",
                           // "POST https://api.example.com/v1/x", "process", "clock:..."
  std::string errno_name;  // "ENOENT", "NXDOMAIN", "REFUSED", ...
  std::string detail;      // the event's detail (network refusals say why)
  uint64_t count = 1;
  std::string syscall;     // fs: a mkdir of P makes P itself the writable directory
};

struct GrantProposal {
  bool grantable = false;
  // Grantable: the manifest section ("capabilities.egress", "capabilities.fs.read",
  // "capabilities.fs.write", "capabilities.egress[2].http") and the YAML list item to add
  // there ("- {host: api.example.com, port: 443, protocol: https}", "- /tmp"). Agent-chosen
  // text in `entry` is YAML-quoted, control characters escaped: it has none of its own.
  std::string section;
  std::string entry;
  // False when the entry holds placeholders (PORT, PROTOCOL) for what could not be known.
  bool complete = true;
  // What it covers, as seen: "/tmp/*: 12 writes", "/data/config.json: 1 read",
  // "api.example.com:443/https: 2 attempts", "exec /usr/bin/sh: 1 attempt". Agent-chosen
  // text is kept raw here: escape it for a terminal (escape_for_terminal) before printing.
  std::string covers;
  // Not grantable: why, and what to do instead. Incomplete: what is missing.
  std::string note;
  std::string surface;  // fs | network | exec | time
  std::string access;   // fs: read | write
  uint64_t count = 0;   // attempts covered
  std::vector<std::string> examples;  // up to kMaxProposalExamples denied resources it covers
  // Structured, for tools (pack learn): fs path; egress host, port (0 = unknown), protocol
  // ("" = unknown); http rule method and path.
  std::string path;
  std::string host;
  uint16_t port = 0;
  std::string protocol;
  std::string method;
};

struct GrantProposals {
  // Grantable proposals first (fs.read, fs.write, egress, http rules; each sorted), then
  // the not-grantable ones.
  std::vector<GrantProposal> items;
  uint64_t omitted = 0;  // distinct denied resources left out by the bounds above
  // The same, per list (they sum to `omitted`).
  uint64_t omitted_read = 0, omitted_write = 0, omitted_egress = 0, omitted_not_grantable = 0;
};

GrantProposals propose_grants(std::span<const DeniedAttempt> attempts);

// The summary's hint line (without indentation), e.g.
//   to allow: add  - {host: api.example.com, port: 443, protocol: https}  under capabilities.egress
//   not grantable: exec /usr/bin/sh (1 attempt): a Comet executes ...
// Agent-chosen text is escaped for a terminal.
std::string hint_line(const GrantProposal& p);

// A YAML scalar for `text`: plain when that is unambiguous (paths and host names usually
// are), else double-quoted with YAML escapes (\", \\, \xNN, \uXXXX), so it parses back to
// `text` exactly and holds no control character.
std::string yaml_scalar(const std::string& text);

}  // namespace soyaos::policy
