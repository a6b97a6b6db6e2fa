// The Policy: everything the Comet enforces for one run, as plain data compiled once from
// the manifest and the run's options. The launcher, the kernel layers and the supervisor's
// observer read only this, so what is enforced and what is reported agree by construction.
// No system calls happen here except reading the host's layout (realpath, lstat).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "manifest/manifest.h"

namespace soyaos::policy {

// One entry of the sandbox's filesystem, applied in order on an empty tmpfs root.
struct MountSpec {
  enum class Kind {
    bind_ro,       // host `source` bound read-only at `target`
    bind_rw,       // host `source` bound read-write at `target` (operator --mount :rw only)
    tmpfs_rw,      // private, empty directory of the run's one write-quota tmpfs (fs.write
                   // paths, /workdir/out): every such path shares Limits::write_quota_bytes
    symlink,       // `target` is a symlink whose content is `source` (merged-/usr links)
    file,          // generated file with `content` (/etc/passwd ...), read-only
    pack_root,     // /workdir: each top-level pack entry bound read-only, symlinks copied
    dev,           // minimal /dev: null zero full random urandom, fd/std* links
    proc,          // procfs of the sandbox's PID namespace (subset=pid)
  };
  Kind kind = Kind::bind_ro;
  std::string source;   // host path (bind kinds, pack_root), or link content (symlink)
  std::string target;   // absolute sandbox path
  std::string content;  // file kind
  uint64_t size_bytes = 0;  // tmpfs kinds
  // bind_ro only: hide the host path of the source from /proc/*/mountinfo (a bind mount's
  // entry names its source's path in the host filesystem). Set for operator data
  // (--input, --mount); the runtime layer is bound at its own path and needs no masking.
  bool mask_source = false;
  // pack_root only: paths relative to the pack that are not part of it (.soyaignore and
  // the default exclusions, SPEC T6), hidden from /workdir by overlay whiteouts.
  std::vector<std::string> hide;
};

// Which sandbox paths the agent may read or write. The observer uses these to decide what
// is a violation; mounts and Landlock (built from the same lists) enforce it.
struct FsRules {
  std::vector<std::string> runtime;  // runtime layer: reads are never violations
  std::vector<std::string> read;     // /workdir, /workdir/inputs, fs.read, operator mounts
  std::vector<std::string> write;    // fs.write
  // The manifest entries behind read/write, for an event's manifest_entry.
  std::vector<manifest::FsPath> declared_read;
  std::vector<manifest::FsPath> declared_write;
};

struct Limits {
  uint64_t memory_bytes = 0;
  uint32_t pids = 0;
  uint64_t timeout_ms = 0;
  uint64_t write_quota_bytes = 0;
  uint32_t open_files = 0;
  uint64_t grace_ms = 0;  // SIGTERM -> SIGKILL when the run is stopped (C9)
};

// The inode half of write_quota (M1 "bytes and inodes"): files, directories, symlinks and
// sockets the agent may create across every writable path together. One per KiB of quota,
// at least 8 when the quota is not 0, at most 65536; 0 with a zero quota (no writable
// space at all). docs/sandbox.md "Write quota".
inline constexpr uint64_t kWriteQuotaBytesPerInode = 1024;
inline constexpr uint64_t kWriteQuotaMinInodes = 8;
inline constexpr uint64_t kWriteQuotaMaxInodes = 65536;
inline uint64_t write_quota_inodes(uint64_t quota_bytes) {
  if (quota_bytes == 0) return 0;
  uint64_t n = quota_bytes / kWriteQuotaBytesPerInode;
  if (n < kWriteQuotaMinInodes) n = kWriteQuotaMinInodes;
  return n > kWriteQuotaMaxInodes ? kWriteQuotaMaxInodes : n;
}

struct Identity {
  std::string run_id;
  std::string pack;      // manifest name
  std::string version;
  std::string digest;    // "sha256:..." of the pack tree
};

struct Policy {
  Identity identity;
  manifest::Runtime runtime = manifest::Runtime::python3;
  std::string executable;              // sandbox path executed once (interpreter or native entry)
  std::vector<std::string> argv;       // argv[0] first
  std::vector<std::string> env;        // "NAME=value", scrubbed (C5)
  std::string cwd = "/workdir";
  std::vector<MountSpec> mounts;       // in application order
  FsRules fs;
  Limits limits;
  std::string hostname = "comet";
  uid_t sandbox_uid = 1000;            // the agent's uid and gid inside the sandbox
  gid_t sandbox_gid = 1000;
  std::string out_sandbox_path = "/workdir/out";
  bool out_writable = false;           // /workdir/out declared in fs.write
  std::filesystem::path out_host_dir;  // where /workdir/out is collected after the run
  bool egress_any = false;             // egress: "*"
  std::vector<manifest::EgressEntry> egress;  // the manifest's entries, in order
  bool moon_proxy = false;             // an entry with protocol moon-proxy (C7)
};

// The Moon proxy as the sandbox sees it (SPEC M2, C7): `moon:3128`, which the sandbox's
// /etc/hosts maps to its own loopback, where the supervisor serves the proxy.
inline constexpr const char* kMoonProxyHost = "moon";
inline constexpr uint16_t kMoonProxyPort = 3128;

// One --input (SPEC T6, C2): NAME=PATH is mounted at /workdir/inputs/NAME; an unnamed
// directory is /workdir/inputs itself, an unnamed file /workdir/inputs/<its file name>.
struct InputSpec {
  std::string name;             // empty: unnamed
  std::filesystem::path path;   // host file or directory
};

// Parses one --input argument: `NAME=PATH` when the text before the first '=' is a valid
// name (^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$, not "." or ".."), else all of it is a PATH
// (write `./a=b` for a file really called "a=b").
InputSpec parse_input_arg(const std::string& arg);

// Checks a run's inputs as a whole, before anything starts: each exists and is a file or a
// directory, names are unique, an unnamed directory is the only input (it *is*
// /workdir/inputs), at most kMaxInputs. Returns each one's sandbox path, in order.
inline constexpr size_t kMaxInputs = 64;
Result<std::vector<std::string>> input_targets(const std::vector<InputSpec>& inputs);

// Operator choices for one run (`soyaos run` flags).
struct RunOptions {
  std::vector<InputSpec> inputs;               // --input, in order
  std::optional<std::filesystem::path> out;    // --out (default ./soyaos-out/RUN_ID)
  std::vector<std::string> mounts;             // --mount HOST:SANDBOX[:ro|:rw]
  std::vector<std::string> extra_args;         // after --
  std::string run_id;
  std::string digest;
  // The pack's excluded paths (common/pack_tree.h PackTree::excluded), from the same scan
  // as `digest`: the /workdir view shows exactly what the digest covers.
  std::vector<std::string> pack_excluded;
  // C11: NAME -> the run's placeholder for each secret the manifest declares (never a value).
  std::vector<std::pair<std::string, std::string>> secret_placeholders;
};

// Compiles a validated manifest into a Policy; fails (exit 125 at the CLI) when an option
// cannot be honoured, e.g. a --mount target that the manifest does not declare.
Result<Policy> compile_policy(const manifest::Manifest& m, const RunOptions& options);

// The runtime layer's paths for a runtime, as sandbox paths (also used by `doctor`).
std::vector<std::string> runtime_layer_paths(manifest::Runtime runtime);

// Generated /etc files.
std::string generated_passwd(uid_t uid, gid_t gid, const std::string& home = "/workdir");
std::string generated_group(gid_t gid);

}  // namespace soyaos::policy
