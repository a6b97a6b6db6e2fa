// The runtime layer's answers to what a supported runtime (python3, node) or its standard
// library probes on its own (issue #11, docs/sandbox.md "Runtime layer"). A conventional
// file such a runtime opens by itself is answered here, as a file of the runtime layer, and
// is not a violation; anything else the agent tries beyond its manifest still is.
//
// kRuntimeProbes (runtime_layer.cc) is THE list: every served, generated or tolerated probe
// is one row there, and docs/sandbox.md mirrors it. The one probe that is not a file, the
// NETLINK_ROUTE socket behind getifaddrs(3), is a row of the seccomp table
// (src/comet/seccomp_filter.cc) and is described in the same docs section.
#pragma once

#include <sys/sysinfo.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "manifest/manifest.h"

namespace soyaos::policy {

enum class ProbeKind {
  host,       // the host's file (or symlink) bound read-only at the same path
  generated,  // a file the Comet writes (content from generated_probe_content)
  link,       // a symlink the Comet creates; `answer` is its target
  served,     // /proc: rendered on every open by the supervisor for the agent's own view
  absent,     // left absent (ENOENT, as on a host without it); reading it is not a violation
};

// Which runtimes a row applies to (bit mask).
enum : unsigned { kForPython = 1U, kForNode = 2U, kForNative = 4U, kForAll = 7U };

struct RuntimeProbe {
  const char* path;    // sandbox path; for `absent`, a prefix (whole components)
  ProbeKind kind;
  unsigned runtimes;   // kForPython | kForNode | kForNative
  const char* prober;  // who opens it on their own
  const char* answer;  // what the Comet answers (link target for `link`; documentation otherwise)
  // `absent` rows only: the runtime also tries to create it (libuuid's clock file). That open
  // is answered ENOENT, as on a host without the directory, and is not a violation either.
  bool create_probe = false;
};

const std::vector<RuntimeProbe>& runtime_probes();

bool probe_applies(const RuntimeProbe& probe, manifest::Runtime runtime);

// The content of a `generated` row.
std::string generated_probe_content(const RuntimeProbe& probe);

// True when `path` is under an `absent` row with create_probe that applies to `runtime`.
bool is_create_probe(const std::string& path, manifest::Runtime runtime);

// The /proc files a Comet serves (`served` rows): true when `path` is one of them.
bool is_served_proc_file(const std::string& path);

// Renders a served /proc file from the host's own text of that file, restricted to what the
// agent may use: the CPUs in `cpus` (its affinity) and `memory_limit` bytes (0 = none).
// Pure functions of their inputs; the supervisor reads the host's files and the affinity.
std::string render_proc_file(const std::string& path, std::string_view host_text, const std::vector<int>& cpus,
                             uint64_t memory_limit);

// sysinfo(2) as the agent sees it, from the host's answer: what the served /proc files say.
// Uptime and load averages are the host's (as /proc/uptime and /proc/loadavg); RAM is bounded
// by `memory_limit` (0 = none) like /proc/meminfo; no swap, shared or buffer memory; one
// process (the agent, as /proc/loadavg's "1/1"); byte units.
struct sysinfo agent_sysinfo(const struct sysinfo& host, uint64_t memory_limit);

}  // namespace soyaos::policy
