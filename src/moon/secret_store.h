// The Moon's secret store (SPEC.md C11): `soyaos secret set|ls|rm` and the values `run`,
// `pack test` and `pack learn` use for a secret no --secret names. One file per secret,
// $SOYAOS_HOME/secrets/NAME, mode 0600 in a 0700 directory, written atomically (temporary
// file, fsync, rename). A file or directory that others could read, or that another user
// owns, is refused with the reason: a value someone else could have read or planted is not
// used. In daemon mode too the store is the client's own $SOYAOS_HOME: values never cross
// the daemon's socket (docs/secrets.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/secret_bytes.h"

namespace soyaos::moon {

struct SecretEntry {
  std::string name;
  int64_t set_time = 0;  // seconds since the epoch (the file's mtime)
};

class SecretStore {
 public:
  explicit SecretStore(std::filesystem::path home);

  // $SOYAOS_HOME/secrets
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }

  // Creates or replaces NAME. NAME must match ^[A-Z_][A-Z0-9_]*$ (at most 128 characters);
  // an empty value is refused.
  Status set(const std::string& name, const SecretBytes& value) const;
  // The value of NAME; nullopt when the store has none (no directory, no file).
  Result<std::optional<SecretBytes>> get(const std::string& name) const;
  // Every stored name with its set time, sorted by name. Never reads a value.
  Result<std::vector<SecretEntry>> list() const;
  // false when there was no such secret.
  Result<bool> remove(const std::string& name) const;

  static bool valid_name(const std::string& name);

 private:
  // The directory, checked (owned by us, no group/other access); created 0700 when `create`.
  // nullopt when it does not exist and !create.
  Result<bool> check_dir(bool create) const;

  std::filesystem::path dir_;
};

}  // namespace soyaos::moon
