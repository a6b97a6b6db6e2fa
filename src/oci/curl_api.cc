#include "oci/curl_api.h"

#include <mutex>
#include <string>

#include "common/dl_library.h"

namespace soyaos::oci {

Result<const CurlApi*> curl_api() {
  static CurlApi api{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    // Unversioned: libcurl's symbol version names its TLS flavour (CURL_OPENSSL_4).
    DlLibrary lib("libcurl.so.4", "libcurl4", nullptr);
    lib.function("curl_global_init", api.global_init);
    lib.function("curl_easy_init", api.easy_init);
    lib.function("curl_easy_cleanup", api.easy_cleanup);
    lib.function("curl_easy_reset", api.easy_reset);
    lib.function("curl_easy_setopt", api.easy_setopt);
    lib.function("curl_easy_perform", api.easy_perform);
    lib.function("curl_easy_getinfo", api.easy_getinfo);
    lib.function("curl_easy_strerror", api.easy_strerror);
    lib.function("curl_slist_append", api.slist_append);
    lib.function("curl_slist_free_all", api.slist_free_all);
    lib.function("curl_url", api.url);
    lib.function("curl_url_set", api.url_set);
    lib.function("curl_url_get", api.url_get);
    lib.function("curl_free", api.curl_free_);
    lib.function("curl_url_cleanup", api.url_cleanup);
    error = lib.error();
    if (!error.empty()) {
      if (error.find(" lacks ") != std::string::npos) error += " (libcurl 7.62 or newer is needed)";
      return;
    }
    if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) error = "curl_global_init failed";
  });
  if (!error.empty()) return make_error(error);
  return &api;
}

}  // namespace soyaos::oci
