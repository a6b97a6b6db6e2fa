// The manifest's secrets (M7) and HTTP rules (M8): their schema, walked with the shared
// Walker (walker.h). Internal to the manifest stage; parser.cc calls these.
#pragma once

#include <string>
#include <vector>

#include "manifest/manifest.h"
#include "manifest/walker.h"

namespace soyaos::manifest::detail {

// `secrets:` — a mapping NAME -> {hosts: [HOST, ...]}. Appends each valid declaration.
void parse_secrets(Walker& w, const YNode& n, std::vector<SecretDecl>& out);

// An egress entry's `http:` list (`path` is "capabilities.egress[i].http"). Returns the
// valid rules; false (after reporting) when any rule is bad.
bool parse_http_rules(Walker& w, const YNode& n, const std::string& path, std::vector<HttpRule>& out);

// Checks between parts: a secret name that agent.env or the Comet itself (is_reserved_env_name)
// already sets.
void check_secret_names(Walker& w, const Manifest& m);

// M8 path pattern: nullopt when valid, else why not.
std::optional<std::string> http_path_problem(std::string_view path);
// M8 method: an upper-case HTTP token or "*"; nullopt when valid, else why not.
std::optional<std::string> http_method_problem(std::string_view method);

}  // namespace soyaos::manifest::detail
