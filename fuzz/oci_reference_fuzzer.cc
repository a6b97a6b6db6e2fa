// libFuzzer target for registry references (src/oci/reference.h) and the OCI pack
// manifest/config parsers (src/oci/pack.h), which read what a registry sends.
// Invariants (violations trap): an accepted reference prints back (str()) to text that
// parses to the same reference; its repository has no empty, "." or ".." component and no
// character outside [a-z0-9._/-]; a digest is sha256 + 64 hex. The manifest and config
// parsers never crash and, when they accept, fill what they promise.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "oci/pack.h"
#include "oci/reference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace soyaos::oci;
  const std::string raw(reinterpret_cast<const char*>(data), size);
  std::string why;
  if (auto ref = parse_reference(raw, why)) {
    if (ref->registry.empty() || ref->repository.empty()) __builtin_trap();
    if (ref->tag.empty() && ref->digest.empty()) __builtin_trap();
    if (!ref->digest.empty() && !valid_digest(ref->digest)) __builtin_trap();
    for (char c : ref->repository) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '/')) __builtin_trap();
    }
    const std::string& r = ref->repository;
    if (r.front() == '/' || r.back() == '/' || r.find("//") != std::string::npos || r.find("..") != std::string::npos ||
        r.rfind("./", 0) == 0 || r.find("/./") != std::string::npos || r.find("/.") != std::string::npos) {
      __builtin_trap();
    }
    std::string why2;
    auto again = parse_reference(ref->str(), why2);
    if (!again || again->registry != ref->registry || again->repository != ref->repository ||
        again->tag != ref->tag || again->digest != ref->digest) {
      __builtin_trap();
    }
  } else if (why.empty()) {
    __builtin_trap();
  }
  RemotePack p;
  if (parse_pack_manifest(raw, p)) {
    if (!valid_digest(p.config.digest) || !valid_digest(p.layer.digest) || !valid_digest(p.manifest_digest)) __builtin_trap();
  }
  RemotePack q;
  if (parse_pack_config(raw, q)) {
    if (q.name.empty() || !valid_digest(q.tree_digest) || q.config_bytes != raw) __builtin_trap();
  }
  return 0;
}
