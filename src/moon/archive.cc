#include "moon/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "common/pack_tree.h"
#include "common/unique_fd.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBlock = 512;
constexpr size_t kBuf = 1 << 20;

Status write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_error("write archive");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

// Reads up to n bytes; fewer only at end of file.
Result<size_t> read_full(int fd, char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_error("read archive");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void put_octal(char* field, size_t width, uint64_t value) {
  // width-1 octal digits, zero padded, then NUL.
  for (size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  field[width - 1] = '\0';
}

Result<std::array<char, kBlock>> make_header(const PackEntry& e) {
  std::array<char, kBlock> h{};
  const bool dir = e.type == PackEntry::Type::dir, link = e.type == PackEntry::Type::symlink;
  std::string path = e.rel + (dir ? "/" : "");
  std::string name = path, prefix;
  if (name.size() > 100) {
    // Split at a '/' so that prefix <= 155 and name <= 100 (and non-empty).
    size_t cut = std::string::npos;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '/' && i <= 155 && path.size() - i - 1 <= 100 && path.size() - i - 1 > 0) {
        cut = i;
        break;
      }
    }
    if (cut == std::string::npos) return make_error("path too long for the pack archive (ustar): " + e.rel);
    prefix = path.substr(0, cut);
    name = path.substr(cut + 1);
  }
  std::memcpy(h.data(), name.data(), name.size());
  put_octal(h.data() + 100, 8, link ? 0777 : dir || e.exec ? 0755 : 0644);
  put_octal(h.data() + 108, 8, 0);
  put_octal(h.data() + 116, 8, 0);
  if (e.size > 077777777777ULL) return make_error("file too large for the pack archive (8 GiB): " + e.rel);
  put_octal(h.data() + 124, 12, e.type == PackEntry::Type::file ? e.size : 0);
  put_octal(h.data() + 136, 12, 0);
  h[156] = dir ? '5' : link ? '2' : '0';
  if (link) {
    // ustar keeps a link's target in the 100-byte linkname field (no pax extensions).
    if (e.target.size() > 100) return make_error("symlink target longer than 100 bytes, too long for the pack archive: " + e.rel);
    std::memcpy(h.data() + 157, e.target.data(), e.target.size());
  }
  std::memcpy(h.data() + 257, "ustar", 6);  // with its NUL
  std::memcpy(h.data() + 263, "00", 2);
  put_octal(h.data() + 329, 8, 0);
  put_octal(h.data() + 337, 8, 0);
  std::memcpy(h.data() + 345, prefix.data(), prefix.size());
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  put_octal(h.data() + 148, 7, sum);  // 6 digits, NUL, then the space already there
  h[155] = ' ';
  return h;
}

// A sink that writes and hashes.
class Out {
 public:
  explicit Out(int fd) : fd_(fd) {}
  Status put(const char* p, size_t n) {
    hash_.update(std::string_view(p, n));
    size_ += n;
    return write_all(fd_, p, n);
  }
  Sha256& hash() { return hash_; }
  [[nodiscard]] uint64_t size() const { return size_; }

 private:
  int fd_;
  Sha256 hash_;
  uint64_t size_ = 0;
};

bool valid_rel(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.back() == '/' || p.size() > 4096) return false;
  if (p.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (true) {
    size_t slash = p.find('/', start);
    std::string_view part = p.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

Result<uint64_t> parse_octal(const char* p, size_t n, const std::string& what) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v > (UINT64_MAX >> 3)) return make_error("archive: " + what + " overflows");
    v = (v << 3) | static_cast<uint64_t>(p[i] - '0');
    any = true;
  }
  for (; i < n; ++i) {
    if (p[i] != '\0' && p[i] != ' ') return make_error("archive: malformed " + what);
  }
  if (!any) return make_error("archive: malformed " + what);
  return v;
}

// Opens (creating when missing) the directory `rel` below `root_fd`, never following links.
Result<UniqueFd> open_dir(int root_fd, std::string_view rel, bool create) {
  UniqueFd cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur) return errno_error("dup directory fd");
  size_t start = 0;
  while (start < rel.size()) {
    size_t slash = rel.find('/', start);
    std::string part(rel.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (create && ::mkdirat(cur.get(), part.c_str(), 0755) != 0 && errno != EEXIST)
      return errno_error("mkdir " + std::string(rel.substr(0, slash)));
    int fd = ::openat(cur.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno_error("open directory " + std::string(rel.substr(0, slash)));
    cur = UniqueFd(fd);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return cur;
}

}  // namespace

Result<ArchiveInfo> write_archive(const fs::path& root, int fd) {
  auto scanned = scan_pack(root);
  if (!scanned) return scanned.error();
  // Sorted as tree_digest() sorts: plain byte order of the relative paths.
  const std::vector<PackEntry>& entries = scanned->entries;
  Out out(fd);
  Sha256 tree;
  std::vector<char> buf(kBuf);
  for (const auto& e : entries) {
    auto h = make_header(e);
    if (!h) return h.error();
    std::string line = e.rel + '\0';
    if (e.type == PackEntry::Type::dir) {
      line += "dir";
      if (auto s = out.put(h->data(), kBlock); !s) return s.error();
    } else if (e.type == PackEntry::Type::symlink) {
      line += "symlink" + std::string(1, '\0') + e.target;
      if (auto s = out.put(h->data(), kBlock); !s) return s.error();
    } else {
      const fs::path p = root / e.rel;
      UniqueFd in(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!in) return errno_error("open " + p.string());
      struct stat st {};
      if (::fstat(in.get(), &st) != 0) return errno_error("stat " + p.string());
      if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != e.size)
        return make_error("pack file changed while archiving: " + e.rel);
      if (auto s = out.put(h->data(), kBlock); !s) return s.error();
      Sha256 content;
      uint64_t left = e.size;
      while (left > 0) {
        auto n = read_full(in.get(), buf.data(), std::min<uint64_t>(left, buf.size()));
        if (!n) return n.error();
        if (*n == 0) return make_error("pack file changed while archiving: " + e.rel);
        content.update(std::string_view(buf.data(), *n));
        if (auto s = out.put(buf.data(), *n); !s) return s.error();
        left -= *n;
      }
      if (size_t pad = (kBlock - e.size % kBlock) % kBlock; pad > 0) {
        std::array<char, kBlock> zeros{};
        if (auto s = out.put(zeros.data(), pad); !s) return s.error();
      }
      line += std::string(e.exec ? "exec" : "file") + '\0' + content.hex();
    }
    tree.update(line);
    tree.update("\n");
  }
  std::array<char, 2 * kBlock> end{};
  if (auto s = out.put(end.data(), end.size()); !s) return s.error();
  return ArchiveInfo{"sha256:" + out.hash().hex(), out.size(), "sha256:" + tree.hex()};
}

Result<std::string> digest_fd(int fd) {
  Sha256 h;
  std::vector<char> buf(kBuf);
  while (true) {
    auto n = read_full(fd, buf.data(), buf.size());
    if (!n) return n.error();
    if (*n == 0) break;
    h.update(std::string_view(buf.data(), *n));
  }
  return "sha256:" + h.hex();
}

Result<std::string> extract_archive(int fd, const fs::path& dest) {
  auto info = extract_archive_info(fd, dest);
  if (!info) return info.error();
  return info->digest;
}

Result<ArchiveInfo> extract_archive_info(int fd, const fs::path& dest, bool hash_archive) {
  UniqueFd root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return errno_error("open " + dest.string());
  Sha256 hash;
  Sha256 tree;  // as write_archive computes it, from the entries in archive order
  uint64_t total = 0;
  std::vector<char> buf(kBuf);
  auto read_hashed = [&](char* p, size_t n) -> Status {
    auto got = read_full(fd, p, n);
    if (!got) return got.error();
    if (hash_archive) hash.update(std::string_view(p, *got));
    total += *got;
    if (*got != n) return make_error("archive is truncated");
    return {};
  };
  auto tree_line = [&](const std::string& line) {
    tree.update(line);
    tree.update("\n");
  };
  // What was extracted, to check the symlinks against once every entry is known.
  std::vector<PackEntry> entries;
  bool ended = false;
  while (!ended) {
    std::array<char, kBlock> h{};
    if (auto s = read_hashed(h.data(), kBlock); !s) return s.error();
    if (std::all_of(h.begin(), h.end(), [](char c) { return c == '\0'; })) {
      ended = true;
      break;
    }
    auto sum = parse_octal(h.data() + 148, 8, "header checksum");
    if (!sum) return sum.error();
    unsigned computed = 0;
    for (size_t i = 0; i < kBlock; ++i)
      computed += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    if (computed != *sum) return make_error("archive: header checksum mismatch");
    if (std::memcmp(h.data() + 257, "ustar", 5) != 0) return make_error("archive: not a ustar header");
    std::string name = field(h.data(), 100), prefix = field(h.data() + 345, 155);
    std::string path = prefix.empty() ? name : prefix + "/" + name;
    const char type = h[156];
    auto size = parse_octal(h.data() + 124, 12, "entry size");
    if (!size) return size.error();
    if (type == '5') {
      if (!path.empty() && path.back() == '/') path.pop_back();
      if (!valid_rel(path)) return make_error("archive: refused entry path '" + path + "'");
      auto d = open_dir(root.get(), path, true);
      if (!d) return d.error();
      if (::fchmod(d->get(), 0755) != 0) return errno_error("chmod " + path);
      entries.push_back({path, PackEntry::Type::dir, false, 0, {}});
      tree_line(path + '\0' + "dir");
      continue;
    }
    if (type != '0' && type != '\0' && type != '2')
      return make_error("archive: refused entry '" + path + "' of type '" + std::string(1, type) +
                        "' (only files, directories and symlinks)");
    if (!valid_rel(path)) return make_error("archive: refused entry path '" + path + "'");
    auto mode = parse_octal(h.data() + 100, 8, "mode");
    if (!mode) return mode.error();
    const auto slash = path.rfind('/');
    // Parents are opened with O_NOFOLLOW: no entry can land below a symlink.
    auto parent = open_dir(root.get(), slash == std::string::npos ? std::string_view() : std::string_view(path).substr(0, slash), true);
    if (!parent) return parent.error();
    const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
    if (type == '2') {
      // Where it points is checked once the whole tree is known (check_symlinks below).
      const std::string target = field(h.data() + 157, 100);
      if (*size != 0 || target.empty()) return make_error("archive: malformed symlink entry '" + path + "'");
      if (::symlinkat(target.c_str(), parent->get(), leaf.c_str()) != 0) return errno_error("symlink " + path);
      entries.push_back({path, PackEntry::Type::symlink, false, 0, target});
      tree_line(path + '\0' + "symlink" + '\0' + target);
      continue;
    }
    entries.push_back({path, PackEntry::Type::file, (*mode & 0111) != 0, *size, {}});
    const mode_t m = (*mode & 0111) != 0 ? 0755 : 0644;
    UniqueFd out(::openat(parent->get(), leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, m));
    if (!out) return errno_error("create " + path);
    if (::fchmod(out.get(), m) != 0) return errno_error("chmod " + path);
    Sha256 content;
    uint64_t left = *size;
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      if (auto s = read_hashed(buf.data(), n); !s) return s.error();
      content.update(std::string_view(buf.data(), n));
      if (auto s = write_all(out.get(), buf.data(), n); !s) return s.error();
      left -= n;
    }
    tree_line(path + '\0' + ((*mode & 0111) != 0 ? "exec" : "file") + '\0' + content.hex());
    if (size_t pad = (kBlock - *size % kBlock) % kBlock; pad > 0) {
      if (auto s = read_hashed(buf.data(), pad); !s) return s.error();
    }
  }
  if (auto s = check_symlinks(entries); !s) return make_error("archive: " + s.error().message);
  // The rest (the second end block) is covered by the digest too.
  while (true) {
    auto n = read_full(fd, buf.data(), buf.size());
    if (!n) return n.error();
    if (*n == 0) break;
    if (hash_archive) hash.update(std::string_view(buf.data(), *n));
    total += *n;
  }
  return ArchiveInfo{hash_archive ? "sha256:" + hash.hex() : std::string(), total, "sha256:" + tree.hex()};
}

}  // namespace soyaos::moon
