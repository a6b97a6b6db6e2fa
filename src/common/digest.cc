#include "common/digest.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <vector>

namespace soyaos {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void update(std::string_view d) { EVP_DigestUpdate(ctx_.get(), d.data(), d.size()); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &len);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += kHex[md[i] >> 4];
      out += kHex[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

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
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> entries;
  for (fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end; it != end;
       it.increment(ec)) {
    if (ec) break;
    entries.push_back(it->path());
  }
  if (ec) return make_error("walk " + root.string(), ec.value());
  std::vector<std::string> rels;
  for (const auto& e : entries) rels.push_back(fs::relative(e, root).generic_string());
  std::sort(rels.begin(), rels.end());
  Sha256 tree;
  for (const auto& rel : rels) {
    auto p = root / rel;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return make_error("stat " + p.string(), errno);
    std::string line = rel + '\0';
    if (S_ISLNK(st.st_mode)) {
      line += "symlink" + std::string(1, '\0') + fs::read_symlink(p, ec).string();
    } else if (S_ISDIR(st.st_mode)) {
      line += "dir";
    } else if (S_ISREG(st.st_mode)) {
      auto d = file_digest(p);
      if (!d) return d.error();
      line += std::string((st.st_mode & 0111) != 0 ? "exec" : "file") + '\0' + *d;
    } else {
      return make_error("pack contains a special file: " + rel);
    }
    tree.update(line);
    tree.update(std::string_view("\n", 1));
  }
  return "sha256:" + tree.hex();
}

}  // namespace soyaos
