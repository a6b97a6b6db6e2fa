#include "common/dl_library.h"

#include <dlfcn.h>

namespace soyaos {

DlLibrary::DlLibrary(const char* soname, const char* package, const char* version)
    : soname_(soname), version_(version) {
  handle_ = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = ::dlerror();
    load_error_ = std::string("cannot load ") + soname + " (the " + package + " package): " +
                  (why != nullptr ? why : "dlopen failed");
  }
}

void* DlLibrary::symbol(const char* name) {
  if (handle_ == nullptr) return nullptr;  // load_error_ says why
  void* sym = version_ != nullptr ? ::dlvsym(handle_, name, version_) : ::dlsym(handle_, name);
  if (sym == nullptr) missing_ += std::string(missing_.empty() ? "" : ", ") + name;
  return sym;
}

std::string DlLibrary::error() const {
  if (!load_error_.empty()) return load_error_;
  if (missing_.empty()) return {};
  std::string out = std::string(soname_) + " lacks " + missing_;
  if (version_ != nullptr) out += std::string(" (version ") + version_ + ")";
  return out;
}

}  // namespace soyaos
