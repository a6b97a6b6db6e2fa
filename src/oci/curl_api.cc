#include "oci/curl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace soyaos::oci {
namespace {

template <typename F>
bool load(void* lib, const char* name, F& out, std::string& missing) {
  // dlsym returns an object pointer; the conversion to a function pointer is what POSIX
  // specifies for dlsym.
  out = reinterpret_cast<F>(::dlsym(lib, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return out != nullptr;
}

}  // namespace

Result<const CurlApi*> curl_api() {
  static CurlApi api{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      error = std::string("load libcurl (the libcurl4 package): ") + (e != nullptr ? e : "dlopen failed");
      return;
    }
    std::string missing;
    load(lib, "curl_global_init", api.global_init, missing);
    load(lib, "curl_easy_init", api.easy_init, missing);
    load(lib, "curl_easy_cleanup", api.easy_cleanup, missing);
    load(lib, "curl_easy_reset", api.easy_reset, missing);
    load(lib, "curl_easy_setopt", api.easy_setopt, missing);
    load(lib, "curl_easy_perform", api.easy_perform, missing);
    load(lib, "curl_easy_getinfo", api.easy_getinfo, missing);
    load(lib, "curl_easy_strerror", api.easy_strerror, missing);
    load(lib, "curl_slist_append", api.slist_append, missing);
    load(lib, "curl_slist_free_all", api.slist_free_all, missing);
    load(lib, "curl_url", api.url, missing);
    load(lib, "curl_url_set", api.url_set, missing);
    load(lib, "curl_url_get", api.url_get, missing);
    load(lib, "curl_free", api.curl_free_, missing);
    load(lib, "curl_url_cleanup", api.url_cleanup, missing);
    if (!missing.empty()) {
      error = "libcurl.so.4 lacks " + missing + " (libcurl 7.62 or newer is needed)";
      return;
    }
    if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) error = "curl_global_init failed";
  });
  if (!error.empty()) return make_error(error);
  return &api;
}

}  // namespace soyaos::oci
