// Helpers shared by the moon_*_test.cc files: a temp directory and a small valid pack.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace soyaos::moon::testing {

namespace fs = std::filesystem;

class TmpDir {
 public:
  TmpDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/soyaos-moon-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp";
    path_ = tmpl;
  }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TmpDir(const TmpDir&) = delete;
  TmpDir& operator=(const TmpDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << content;
}

// One read of the whole file: the test programs are built at -O0, where an
// istreambuf_iterator copy costs a few calls per byte (MegaByte blobs took minutes).
inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::string data(static_cast<size_t>(f.tellg()), '\0');
  f.seekg(0);
  f.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(f.gcount()));
  return data;
}

inline std::string pack_manifest(const std::string& name, const std::string& version) {
  return "soyapack: v0\n"
         "name: " + name + "\n"
         "version: " + version + "\n"
         "agent:\n"
         "  runtime: python3\n"
         "  entrypoint: main.py\n"
         "capabilities:\n"
         "  egress: []\n"
         "  fs:\n"
         "    read: [/workdir]\n"
         "    write: [/workdir/out]\n"
         "  determinism_tier: read-only\n";
}

// A valid pack at `dir`: soyapack.yaml, main.py (with `body`), an executable script, a
// nested directory and an empty one.
inline void make_pack(const fs::path& dir, const std::string& name, const std::string& version,
                      const std::string& body = "print('hello')\n") {
  write_file(dir / "soyapack.yaml", pack_manifest(name, version));
  write_file(dir / "main.py", body);
  write_file(dir / "bin" / "run.sh", "#!/bin/sh\necho run\n");
  fs::permissions(dir / "bin" / "run.sh", fs::perms(0755));
  write_file(dir / "data" / "nested" / "deep" / "x.json", "{\"a\":1}\n");
  fs::create_directories(dir / "empty");
}

}  // namespace soyaos::moon::testing
