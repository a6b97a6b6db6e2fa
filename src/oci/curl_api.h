// libcurl, loaded with dlopen() the first time a registry is used. Linking it would make
// every soyaos process (every `run` of a directory too) load its 25 dependencies (gnutls,
// krb5, ldap, ssh2, nghttp2, …): ~2 ms of CPU per start (issue #16:
// docs/benchmarks-issue16-history.md, "After").
// Only the headers are used at build time (libcurl4-openssl-dev); at run time the
// libcurl4 package's libcurl.so.4.
#pragma once

#include <curl/curl.h>

#include "common/result.h"

namespace soyaos::oci {

struct CurlApi {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
  CURLU* (*url)();
  CURLUcode (*url_set)(CURLU*, CURLUPart, const char*, unsigned int);
  CURLUcode (*url_get)(const CURLU*, CURLUPart, char**, unsigned int);
  void (*curl_free_)(void*);
  void (*url_cleanup)(CURLU*);
};

// Loads libcurl.so.4 and curl_global_init()s it once (thread-safe); the error names what
// could not be loaded.
Result<const CurlApi*> curl_api();

}  // namespace soyaos::oci
