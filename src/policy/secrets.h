// The secrets of one run (SPEC C11): what the agent sees (a per-run placeholder in the
// variable named after the secret) and what only the supervisor holds (the value, in
// SecretBytes, sent by the gateway to the secret's hosts only).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "common/secret_bytes.h"

namespace soyaos::policy {

// Placeholders are "soyaos-placeholder-" + 32 lowercase hex characters (128 random bits).
inline constexpr const char* kPlaceholderPrefix = "soyaos-placeholder-";
inline constexpr std::size_t kPlaceholderHexChars = 32;

struct RunSecret {
  std::string name;                 // the manifest's name; the agent's env var of that name holds `placeholder`
  std::string placeholder;          // per-run random: "soyaos-placeholder-" + 32 lowercase hex chars
  std::vector<std::string> hosts;   // from the manifest (SecretDecl::hosts)
  SecretBytes value;                // from the operator (--secret / secret store)
};

// A fresh placeholder from getrandom(2).
Result<std::string> new_placeholder();

}  // namespace soyaos::policy
