// Registry credentials from the Docker-style config.json users already have (SPEC.md C12):
// $DOCKER_CONFIG/config.json, else ~/.docker/config.json.
//
//   {"auths": {"REGISTRY": {"auth": base64("user:password")}   (or "username"/"password",
//                          or "identitytoken": an OAuth2 refresh token)},
//    "credHelpers": {"REGISTRY": "NAME"},   # docker-credential-NAME for that registry
//    "credsStore": "NAME"}                  # docker-credential-NAME for every other one
//
// Lookup order, as docker's: credHelpers[REGISTRY], then auths[REGISTRY], then credsStore.
// Keys of `auths` are matched after dropping a scheme and a path ("https://r.example/v1/"
// matches r.example). A helper runs as `docker-credential-NAME get|store|erase` from PATH
// (NAME is [A-Za-z0-9._-]+), the registry on its stdin, its JSON answer on stdout (at
// most 1 MiB); "credentials not found" is no credentials, any other failure an error.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "common/result.h"

namespace soyaos::oci {

struct Credentials {
  std::string username;
  std::string password;
  std::string identity_token;  // an OAuth2 refresh token (a helper's Username "<token>")
};

// The config.json in use (it may not exist).
std::filesystem::path docker_config_path();

// The credentials for `registry` (HOST[:PORT]); nullopt when there are none. A config that
// cannot be read or parsed, or a helper that fails, is an error.
Result<std::optional<Credentials>> find_credentials(const std::string& registry);

// `soyaos login`: stores them with the registry's helper (credHelpers, else credsStore), or
// in auths (base64, the file written 0600 atomically, other keys kept). Returns where
// ("docker-credential-NAME" or the file's path).
Result<std::string> store_credentials(const std::string& registry, const Credentials& creds);

// `soyaos logout`: removes them; false when there were none.
Result<bool> erase_credentials(const std::string& registry);

}  // namespace soyaos::oci
