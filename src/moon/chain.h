// The Scope record's tamper evidence (SPEC.md E6, docs/events.md "Tamper evidence"):
// every stored event is a link of a SHA-256 hash chain, and the Moon signs checkpoints of
// the chain with its own Ed25519 key, kept at $SOYAOS_HOME/moon.key (public half in
// moon.pub). The latest checkpoint is also kept outside the database, in
// $SOYAOS_HOME/scope.head, so that cutting the tail off the database (events and their
// checkpoints together) still shows.
//
// The byte strings hashed and signed are defined here and in docs/events.md, so that a
// third party can verify a store with sqlite3, sha256sum and openssl alone.
// Library code: errors are values, nothing is printed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace soyaos::moon::chain {

// prev_hash of the first event of a store: 64 zeros.
inline constexpr std::string_view kGenesisHash = "0000000000000000000000000000000000000000000000000000000000000000";

// Lower-case hex SHA-256 of  DECIMAL(seq) "\n" prev_hash "\n" json  — json being the
// exact bytes stored in events.json (no trailing newline).
std::string event_hash(int64_t seq, std::string_view prev_hash, std::string_view json);

// What a checkpoint signs:  "soyaos-scope-checkpoint-v1\n" DECIMAL(seq) "\n" hash "\n" time "\n".
std::string checkpoint_message(int64_t seq, std::string_view hash, std::string_view time);

// One signed checkpoint: the chain up to and including `seq` ends in `hash`.
struct Checkpoint {
  int64_t seq = 0;
  std::string hash;
  std::string time;       // RFC 3339 UTC, when it was signed
  std::string key_id;     // MoonKey::id() of the signer
  std::string signature;  // base64 of the Ed25519 signature over checkpoint_message()
};

// The Moon's Ed25519 key pair (OpenSSL EVP_PKEY_ED25519), or only its public half.
class MoonKey {
 public:
  // HOME/moon.key (PKCS#8 PEM, mode 0600, owned by us), created with HOME/moon.pub
  // (SubjectPublicKeyInfo PEM) when missing. A key file that others can read or write,
  // or a moon.pub that is not moon.key's public half, is refused.
  static Result<MoonKey> load_or_create(const std::filesystem::path& home);
  // The public key to verify with: HOME/moon.pub. nullopt when there is none.
  static Result<std::optional<MoonKey>> load_public(const std::filesystem::path& home);
  // From a public key PEM file (`--key FILE`: a key pinned elsewhere).
  static Result<MoonKey> public_from_file(const std::filesystem::path& pem);

  MoonKey(MoonKey&&) noexcept;
  MoonKey& operator=(MoonKey&&) noexcept;
  ~MoonKey();
  MoonKey(const MoonKey&) = delete;
  MoonKey& operator=(const MoonKey&) = delete;

  // "ed25519:" + the first 16 hex digits of SHA-256 over the 32 raw public key bytes.
  [[nodiscard]] const std::string& id() const { return id_; }
  // Signs checkpoint_message(seq, hash, time) now. Needs the private half.
  Result<Checkpoint> sign(int64_t seq, const std::string& hash, const std::string& time) const;
  // True when `cp.signature` is this key's signature of cp's message.
  [[nodiscard]] bool verify(const Checkpoint& cp) const;

 private:
  struct Impl;
  explicit MoonKey(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string id_;
};

// HOME/scope.head: one line of JSON, {"format":"soyaos-scope-head-v1","seq":…,"hash":…,
// "time":…,"key_id":…,"signature":…}.
std::filesystem::path head_path(const std::filesystem::path& home);
// nullopt when there is no head file; an error when it is unreadable or malformed.
Result<std::optional<Checkpoint>> read_head(const std::filesystem::path& home);
// Replaces the head file atomically (temp, fsync, rename; no directory fsync: after a crash
// the head is the new or the previous one, both complete) under an flock,
// unless it already records a later seq (two writers finishing out of order).
Status write_head(const std::filesystem::path& home, const Checkpoint& cp);

}  // namespace soyaos::moon::chain
