#include "common/digest.h"

// OpenSSL's low-level SHA-256: the EVP interface would load and query the provider
// machinery on first use (~5M instructions, about a third of `soyaos run`'s own start-up)
// for one fixed algorithm. The functions are deprecated in 3.0 but kept, and are the same
// implementation; the API level is pinned for this file only.
#define OPENSSL_API_COMPAT 10101
#include <openssl/sha.h>
#include <fstream>
#include <memory>
#include <vector>

namespace soyaos {

struct Sha256::Context {
  SHA256_CTX ctx{};
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) { SHA256_Init(&ctx_->ctx); }
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) { SHA256_Update(&ctx_->ctx, data, size); }

std::string Sha256::hex() {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256_Final(md, &ctx_->ctx);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof md);
  for (unsigned char byte : md) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

namespace {

Result<std::string> file_digest(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return make_error("read " + p.string(), errno);
  Sha256 h;
  std::vector<char> buf(1 << 16);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(std::string_view(buf.data(), static_cast<size_t>(f.gcount())));
  }
  return h.hex();
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

Result<std::string> tree_digest(const std::filesystem::path& root) {
  auto tree = scan_pack(root);
  if (!tree) return tree.error();
  return tree_digest(root, *tree);
}

Result<std::string> tree_digest(const std::filesystem::path& root, const PackTree& tree) {
  Sha256 digest;
  for (const auto& e : tree.entries) {
    std::string line = e.rel + '\0';
    switch (e.type) {
      case PackEntry::Type::symlink:
        line += "symlink" + std::string(1, '\0') + e.target;
        break;
      case PackEntry::Type::dir:
        line += "dir";
        break;
      case PackEntry::Type::file: {
        auto d = file_digest(root / e.rel);
        if (!d) return d.error();
        line += std::string(e.exec ? "exec" : "file") + '\0' + *d;
        break;
      }
    }
    digest.update(line);
    digest.update(std::string_view("\n", 1));
  }
  return "sha256:" + digest.hex();
}

}  // namespace soyaos
