// libnftables, loaded with dlopen() when a Comet's network layer is about to be set up
// (as src/oci/curl_api.h loads libcurl). Linking it made every soyaos process — a cache hit,
// `version`, `scope`, `pack *` — load it and its four dependencies (libnftnl, libxtables,
// libjansson, libgmp) and relocate them at start (issue #16, docs/benchmarks-issue16.md).
// Only the headers are used at build time (libnftables-dev); at run time libnftables1's
// libnftables.so.1.
//
// The Comet's child installs the ruleset after its mounts replaced the filesystem and
// after clone3 (no atfork handlers), where it must not dlopen: whoever creates a network
// layer calls nft_api() first, in the parent (launch_comet, hold_netfilter_hooks), and a
// failure there refuses the run (exit 125, naming the library) — never a Comet without its
// network layer.
#pragma once

#include <nftables/libnftables.h>

#include "common/result.h"

namespace soyaos::comet {

struct NftApi {
  nft_ctx* (*ctx_new)(uint32_t flags);
  void (*ctx_free)(nft_ctx*);
  int (*ctx_buffer_output)(nft_ctx*);
  int (*ctx_buffer_error)(nft_ctx*);
  const char* (*ctx_get_error_buffer)(nft_ctx*);
  int (*run_cmd_from_buffer)(nft_ctx*, const char*);
};

// Loads libnftables.so.1 once per process (thread-safe, RTLD_NOW: nothing is left to bind
// later in the Comet's child); later calls return the same table or the same error, which
// names the library and the package.
Result<const NftApi*> nft_api();

}  // namespace soyaos::comet
