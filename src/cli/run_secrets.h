// The operator side of a run's secrets (SPEC.md C11): `--secret` arguments and the Moon's
// secret store turned into the RunSecrets of a run (`run`, `pack test`, later `pack learn`).
// A value is read straight into SecretBytes and never printed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "manifest/manifest.h"
#include "policy/secrets.h"

namespace soyaos::cli {

// Where a secret's value comes from.
struct SecretSource {
  enum class Kind { operator_env, env, file };  // NAME, NAME=env:VAR, NAME=file:PATH
  std::string name;
  Kind kind = Kind::operator_env;
  std::string ref;  // the variable or the path
};

struct SecretResolution {
  int exit_code = 0;        // 0, kExitUsage (2) or 125; `error` says why (never a value)
  std::string error;
  std::vector<policy::RunSecret> secrets;  // one per declared secret, manifest order
};

// Parses one --secret argument; an error text (usage) when malformed.
Result<SecretSource> parse_secret_arg(const std::string& arg);

// For every secret `m` declares: the --secret source naming it, else the store of `home`.
// A --secret for a name the manifest does not declare, a repeated one or a malformed one is
// a usage error (2); a missing, empty or unreadable value is 125 naming the secret and the
// three ways to supply it. Each secret gets a fresh placeholder.
SecretResolution resolve_secrets(const manifest::Manifest& m, const std::vector<std::string>& args,
                                 const std::filesystem::path& home);

// The same secrets for another run (`pack test`: one per example): the values copied into
// fresh SecretBytes, each with a new placeholder.
Result<std::vector<policy::RunSecret>> secrets_for_another_run(const std::vector<policy::RunSecret>& secrets);

}  // namespace soyaos::cli
