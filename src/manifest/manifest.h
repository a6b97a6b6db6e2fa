// The typed SoyaPack v0 manifest (SPEC.md §1). Every node keeps the line and column it
// came from so that validation, lint and run-time errors can point at it.
// This header is the contract between the parser (parser.cc), validation (validate.cc),
// lint (src/lint) and policy compilation (src/policy).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace soyaos::manifest {

// 1-based line and column; {0,0} means "no position" (e.g. a missing key: then the
// mark of the enclosing mapping is used).
struct Mark {
  int line = 0;
  int column = 0;
  friend bool operator==(const Mark&, const Mark&) = default;
};

enum class Runtime { python3, node, native };
enum class Protocol { https, http, tcp, udp, moon_proxy };
enum class Tier { read_only, side_effect, unrestricted };
enum class ToolKind { http_get, http_post, http_put, http_patch, http_delete, llm, fs_read, fs_write, custom };

// Spelling as in the manifest ("python3", "moon-proxy", "read-only", "builtin.http_get").
const char* to_string(Runtime);
const char* to_string(Protocol);
const char* to_string(Tier);
const char* to_string(ToolKind);
std::optional<Runtime> runtime_from_string(const std::string&);
std::optional<Protocol> protocol_from_string(const std::string&);
std::optional<Tier> tier_from_string(const std::string&);
std::optional<ToolKind> tool_kind_from_string(const std::string&);

struct Agent {
  Runtime runtime = Runtime::python3;
  std::string entrypoint;                   // relative to the pack root, normalised
  std::vector<std::string> args;
  std::map<std::string, std::string> env;   // names ^[A-Z_][A-Z0-9_]*$
  Mark mark, entrypoint_mark;
  std::vector<Mark> arg_marks;              // one per args element (lint points at a value)
  std::map<std::string, Mark> env_marks;    // of each env value
};

// M8: one element of an https/http egress entry's `http:` list, checked by the gateway on
// every request of an intercepted connection (C11).
struct HttpRule {
  std::string method;    // upper-case token (GET, POST, ...) or "*" (any method)
  std::string path;      // the pattern as written, validated: starts with '/', whole segments,
                         // '*' = one whole segment, a trailing '/**' = the rest (any depth, also none)
  std::string key_path;  // "capabilities.egress[0].http[1]"
  Mark mark;             // of the rule's mapping
};

struct EgressEntry {
  std::string host;      // lower-cased DNS name, "*.suffix", or IP literal (v6 without brackets)
  uint16_t port = 0;
  Protocol protocol = Protocol::tcp;
  std::string key_path;  // "capabilities.egress[2]"
  Mark mark;             // of the entry's mapping
  std::vector<HttpRule> http;  // M8 (https/http entries only); empty = any request allowed
};

// M7: a secret the agent may use. The pack names it and the hosts its real value may be
// sent to; the value comes from the operator at run time (C11), never from the pack.
struct SecretDecl {
  std::string name;                  // ^[A-Z_][A-Z0-9_]*$: also the agent's variable name
  std::vector<std::string> hosts;    // lower-cased concrete DNS names or IP literals (no wildcards)
  std::vector<Mark> host_marks;      // one per host
  std::string key_path;              // "secrets.ANTHROPIC_API_KEY"
  Mark mark;                         // of the secret's name (its key)
};

struct FsPath {
  std::string path;      // absolute, normalised sandbox path
  std::string key_path;  // "capabilities.fs.write[0]"
  Mark mark;
};

struct Capabilities {
  bool egress_any = false;            // egress: "*" or ["*"]
  std::vector<EgressEntry> egress;    // empty when egress_any
  Mark egress_mark;
  std::vector<FsPath> fs_read;
  std::vector<FsPath> fs_write;
  Tier tier = Tier::read_only;
  Mark tier_mark;
};

// A parsed tool URL: scheme mapped to protocol (wss->https, ws->http), port defaulted.
struct ToolTarget {
  std::string host;   // lower-cased; IPv6 without brackets
  uint16_t port = 0;
  Protocol protocol = Protocol::https;
};

struct Tool {
  std::string name;
  ToolKind kind = ToolKind::custom;
  std::string url;                  // http kinds and llm
  std::optional<ToolTarget> target; // parsed from url when valid
  std::string path;                 // fs kinds (normalised)
  std::optional<bool> side_effect;  // custom only (required there)
  std::string key_path;             // "tools.fetch"
  Mark mark, url_mark, path_mark;
};

struct Expect {
  std::optional<int> exit_code;
  std::optional<std::string> stdout_contains;
  std::vector<std::string> outputs;  // relative to /workdir/out
};

struct Example {
  std::string name;
  std::string input;                 // relative path inside the pack (may be empty)
  std::vector<std::string> args;
  std::vector<std::string> tools;    // tool names this example exercises
  Expect expect;
  std::string key_path;              // "examples[0]"
  Mark mark;
  Mark input_mark;                   // of `input` when present
  std::vector<Mark> arg_marks;       // one per args element
};

// Limits; a value absent from the manifest takes the SPEC.md C9 default.
struct Resources {
  uint64_t memory_bytes = 1ULL << 30;       // 1Gi
  uint32_t pids = 128;
  uint64_t timeout_ms = 300'000;            // 300s
  uint64_t grace_ms = 5'000;                // 5s: SIGTERM -> SIGKILL on a stop (C9)
  uint64_t write_quota_bytes = 1ULL << 30;  // 1Gi
  uint32_t open_files = 1024;
};

struct Manifest {
  std::filesystem::path pack_dir;   // as given by the user
  std::string file;                 // display path of soyapack.yaml used in diagnostics
  std::string name;
  std::string version;
  std::string description;
  Agent agent;
  std::vector<Tool> tools;          // in file order
  Capabilities capabilities;
  Resources resources;
  std::vector<Example> examples;
  Mark name_mark, version_mark;
  std::vector<SecretDecl> secrets;  // M7, in file order
};

// Variables the Comet sets itself (C5, C7, C11): a secret may not take one of these names.
// Python's, curl's and Node's CA variables carry the per-run CA of an intercepted entry.
bool is_reserved_env_name(const std::string& name);

// One error (or, for lint, finding) about a manifest node.
struct Diagnostic {
  std::string file;
  Mark mark;
  std::string key_path;  // "capabilities.egress[1].port"; empty for file-level errors
  std::string message;
  // "FILE:LINE:COL: error: KEYPATH: message" (LINE:COL omitted when unknown, KEYPATH too).
  [[nodiscard]] std::string format() const;
};

struct LoadResult {
  std::optional<Manifest> manifest;   // set only when there are no errors
  std::vector<Diagnostic> errors;     // all errors found, in file order
  // load_pack(): the exact bytes that were parsed, which a run records and keeps (E5): read
  // once, so the manifest recorded is the manifest in force even if the file changes after.
  std::string text;
};

// Upper bound on soyapack.yaml's size; larger files are refused before parsing.
inline constexpr std::size_t kMaxManifestBytes = std::size_t{4} << 20;  // 4 MiB

// Reads DIR/soyapack.yaml, parses and validates it (M1-M6) including filesystem checks
// (entrypoint exists inside the pack, manifest not a symlink leading outside...).
LoadResult load_pack(const std::filesystem::path& pack_dir);

// Parses and validates text only (no filesystem checks); `file` names it in diagnostics.
// Never throws, never crashes, bounded time and memory: the fuzz target's entry point.
LoadResult parse_manifest(std::string_view text, const std::string& file);

// Path helpers shared with lint and policy (M4).
// True when `path` is absolute and normalised: no "..", ".", "//", trailing "/".
bool is_normalised_absolute(const std::string& path);
// Component-wise prefix: "/workdir/out" covers "/workdir/out" and "/workdir/out/a" but
// not "/workdir/outbox".
bool path_covers(const std::string& prefix, const std::string& path);
// Host matching (M2): exact (case-insensitive) or "*.suffix" matching names strictly below.
bool host_matches(const std::string& pattern, const std::string& host);

// Paths the Comet owns and never makes writable: "/", the runtime layer (/usr, /bin, /lib,
// /lib64, /sbin), the generated /etc, /proc and /dev, and everything below them.
bool is_comet_reserved(const std::string& path);
// M6: a private scratch path: a declared fs.write path that the Comet serves as its own empty,
// size-limited tmpfs, discarded at exit (e.g. /tmp, /home/agent): outside /workdir and not
// reserved. Not a side effect, so allowed in every tier (an operator `--mount ...:rw` there
// is what would make it outlive the run, and read-only packs refuse that at run time).
bool is_private_scratch(const std::string& path);

// M3: whether a tool has a side effect (http_post/put/patch/delete, fs_write outside
// /workdir/out, custom with side_effect: true). Read-only packs may not have one (M6).
bool tool_has_side_effect(const Tool& tool);

}  // namespace soyaos::manifest
