#include "comet/nft_api.h"

#include <dlfcn.h>

#include <cerrno>

#include <mutex>
#include <string>

namespace soyaos::comet {
namespace {

template <typename F>
void load(void* lib, const char* name, F& out, std::string& missing) {
  // dlsym returns an object pointer; the conversion to a function pointer is what POSIX
  // specifies for dlsym.
  out = reinterpret_cast<F>(::dlsym(lib, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
}

}  // namespace

Result<const NftApi*> nft_api() {
  static NftApi api{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      error = std::string("cannot load libnftables.so.1 (the libnftables1 package): ") +
              (e != nullptr ? e : "dlopen failed");
      return;
    }
    std::string missing;
    load(lib, "nft_ctx_new", api.ctx_new, missing);
    load(lib, "nft_ctx_free", api.ctx_free, missing);
    load(lib, "nft_ctx_buffer_output", api.ctx_buffer_output, missing);
    load(lib, "nft_ctx_buffer_error", api.ctx_buffer_error, missing);
    load(lib, "nft_ctx_get_error_buffer", api.ctx_get_error_buffer, missing);
    load(lib, "nft_run_cmd_from_buffer", api.run_cmd_from_buffer, missing);
    if (!missing.empty()) error = "libnftables.so.1 lacks " + missing;
  });
  if (!error.empty()) return make_error(error, ELIBACC);
  return &api;
}

}  // namespace soyaos::comet
