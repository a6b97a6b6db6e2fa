// Registry references (SPEC.md C12): REGISTRY[:PORT]/REPO[:TAG][@sha256:HEX].
//
// Strict, after the distribution project's grammar (github.com/distribution/reference):
//   - REGISTRY is a DNS name (labels of [A-Za-z0-9-], no leading or trailing '-'), an IPv4
//     literal or a bracketed IPv6 literal, optionally :PORT (1..65535). It must look like a
//     registry — contain a '.' or a ':' or be `localhost` — so that `team/pack` is an
//     error rather than a request to a host called "team";
//   - REPO is one or more '/'-separated components [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
//     (so no "..", no empty component, nothing a path could escape with);
//   - TAG is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; DIGEST is sha256: and 64 lower-case hex;
//   - REGISTRY/REPO is at most 255 characters; neither a tag nor a digest means `latest`.
// `NAME@VERSION` (no '/') stays a reference to the local Moon (moon/registry.h parse_ref).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace soyaos::oci {

struct Reference {
  std::string registry;    // "registry.example.com:5000", "[::1]:5000" (as written, host lower-cased)
  std::string repository;  // "team/summarizer"
  std::string tag;         // "1.4.2"; "latest" when neither tag nor digest was given
  std::string digest;      // "sha256:HEX" when pinned, else empty

  // registry/repository[:tag][@digest], as it parses back.
  [[nodiscard]] std::string str() const;
  // registry/repository: the repository's scope (trust, approvals).
  [[nodiscard]] std::string scope() const { return registry + "/" + repository; }
  // What to ask the registry for: the digest when pinned, else the tag.
  [[nodiscard]] const std::string& target() const { return digest.empty() ? tag : digest; }
  // The same repository pinned to `digest` (the tag kept for display).
  [[nodiscard]] Reference pinned(const std::string& d) const {
    Reference r = *this;
    r.digest = d;
    return r;
  }
};

// True when `text` names a registry rather than the local Moon: it has a '/'. (A pack
// directory is recognised before this by the callers that accept directories.)
bool looks_remote(std::string_view text);

// Parses a reference; nullopt with `why` set ("REF: the tag ... is not valid") when it is
// not one. Never throws; any input is safe.
std::optional<Reference> parse_reference(std::string_view text, std::string& why);

// The registry host without the port and brackets ("::1", "registry.example.com").
std::string registry_host(std::string_view registry);

// "sha256:" followed by 64 lower-case hex digits.
bool valid_digest(std::string_view digest);

}  // namespace soyaos::oci
