// The Moon's configuration (SPEC.md C6a): $SOYAOS_HOME/moon.yaml, or the file named by
// SOYAOS_MOON_CONFIG. Optional; it holds the operator's network policy for every run on
// this machine and the Moon proxy's allowlist. docs/moon.md "Configuration (moon.yaml)"
// is the reference.
//
//   dns:
//     hosts:                         # name -> address, or a list of addresses
//       echo.test: 127.0.0.1
//     upstream: system               # or "192.0.2.53", "192.0.2.53:5353", "[2001:db8::53]:53"
//   egress:
//     deny: [evil.example.com, "*.bad.example", 203.0.113.7]
//     allow_private: [10.0.0.0/8, "fd00::/8"]
//     connect_to:                    # "HOST:PORT": "ADDR:PORT", as curl --connect-to
//       "api.example.com:443": "127.0.0.1:8443"
//   proxy:
//     allow:
//       - {host: api.example.com, port: 443, protocol: https}
//   tls:
//     ca_files: [/etc/soyaos/test-ca.pem]   # relative paths: from moon.yaml's directory
//   registries:
//     insecure: ["127.0.0.1:5000"]          # HOST:PORT spoken to over plain http (C12)
//   trust:                           # C12: who must have signed the packs of a registry scope
//     - scope: "registry.example.com/team/*"
//       keys: [keys/team.pub]        # minisign public keys; relative: from moon.yaml's directory
//
// Parsed with the manifest stage's bounded YAML tree (same limits: no anchors, aliases or
// tags, bounded depth and node count, 4 MiB) and the same strictness: unknown and
// duplicate keys are errors, and every error is reported in one pass as
// `FILE:LINE:COL: error: KEYPATH: message` (manifest::Diagnostic::format()).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/minisign.h"
#include "manifest/manifest.h"
#include "policy/operator_network.h"

namespace soyaos::moon {

// Upper bound on moon.yaml's size; larger files are refused before parsing.
inline constexpr std::size_t kMaxMoonConfigBytes = std::size_t{4} << 20;  // 4 MiB
// Upper bound on one tls.ca_files file (a bundle of every public root is ~220 KiB).
inline constexpr std::size_t kMaxCaFileBytes = std::size_t{4} << 20;  // 4 MiB

struct MoonConfig {
  std::filesystem::path path;  // the file read; empty when none exists (defaults)
  // "sha256:…" of the bytes read (run_started's moon_config_digest, E5); "none" without a file.
  std::string digest = "none";
  policy::OperatorNetwork network;
  // proxy.allow: key_path "proxy.allow[i]", the same triple rules as a manifest egress
  // entry (M2), protocol https | http | tcp only.
  std::vector<manifest::EgressEntry> proxy_allow;
  // tls.ca_files as written, with where (network.tls_ca_files holds them resolved and
  // checked once load_moon_config has read them).
  struct CaFile {
    std::string path;
    manifest::Mark mark;
    std::string key_path;  // "tls.ca_files[i]"
  };
  std::vector<CaFile> ca_files;
  // registries.insecure: HOST:PORT (as references name the registry), plain http (C12).
  std::vector<std::string> insecure_registries;
  // trust (C12): a pack whose repository ("REGISTRY/REPO") a scope matches must carry a
  // signature by one of that scope's keys; when several scopes match, every one of them
  // must be satisfied. `keys` is filled by load_moon_config (parse_moon_config leaves it
  // empty and keeps the paths as written).
  struct TrustRule {
    std::string scope;                       // "REGISTRY/REPO" or "REGISTRY/REPO-PREFIX*"
    std::vector<std::string> key_files;      // as written
    std::vector<minisign::PublicKey> keys;   // read and parsed
    manifest::Mark mark;
    std::string key_path;                    // "trust[i]"
  };
  std::vector<TrustRule> trust;
  // The rules whose scope matches `repository` ("REGISTRY/REPO", no tag or digest).
  [[nodiscard]] std::vector<const TrustRule*> trust_for(std::string_view repository) const;
};

// A trust scope matches a repository: exactly, or by prefix when it ends in '*'.
bool trust_scope_matches(std::string_view scope, std::string_view repository);

struct MoonConfigLoad {
  std::optional<MoonConfig> config;  // set only when there are no errors
  std::vector<manifest::Diagnostic> errors;
};

// SOYAOS_MOON_CONFIG if set and non-empty (the file must exist: an error if not), else
// HOME/moon.yaml if it exists, else the defaults (config set, path empty).
//
// Symlinks are followed: the file is the operator's own (in their home, or a path they
// named), so a link there gives nobody a power they did not have — whoever can plant a
// link in $SOYAOS_HOME can write moon.yaml itself — and a config symlinked from a
// dotfiles checkout is common. What the path leads to must be a regular file: it is
// opened O_NONBLOCK (a FIFO cannot hang the run) and fstat()ed before anything is read.
// Each tls.ca_files entry is resolved (relative: from moon.yaml's directory) and read the
// same way; it must hold at least one PEM certificate, and every certificate block in it
// must parse — otherwise an error naming the entry's line:column.
MoonConfigLoad load_moon_config(const std::filesystem::path& home);

// Parses moon.yaml text; `file` names it in diagnostics. No I/O (tls.ca_files are copied
// as written into network.tls_ca_files, not read); never throws; an empty document (or one
// holding only comments) is the defaults.
MoonConfigLoad parse_moon_config(std::string_view text, const std::string& file);

}  // namespace soyaos::moon
