#include "comet/nft_api.h"

#include <cerrno>

#include <mutex>
#include <string>

#include "common/dl_library.h"

namespace soyaos::comet {

Result<const NftApi*> nft_api() {
  static NftApi api{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    DlLibrary lib("libnftables.so.1", "libnftables1", "LIBNFTABLES_1");
    lib.function("nft_ctx_new", api.ctx_new);
    lib.function("nft_ctx_free", api.ctx_free);
    lib.function("nft_ctx_buffer_output", api.ctx_buffer_output);
    lib.function("nft_ctx_buffer_error", api.ctx_buffer_error);
    lib.function("nft_ctx_get_error_buffer", api.ctx_get_error_buffer);
    lib.function("nft_run_cmd_from_buffer", api.run_cmd_from_buffer);
    error = lib.error();
  });
  if (!error.empty()) return make_error(error, ELIBACC);
  return &api;
}

}  // namespace soyaos::comet
