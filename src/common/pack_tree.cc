#include "common/pack_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <unordered_map>

#include "common/ignore.h"

namespace soyaos {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxIgnoreFile = 1 << 20;
// As the kernel's MAXSYMLINKS: more links than this on one resolution is a loop.
constexpr int kMaxLinks = 40;
constexpr const char* kManifestFile = "soyapack.yaml";

Result<IgnoreRules> load_rules(const fs::path& root) {
  IgnoreRules rules = IgnoreRules::defaults();
  const fs::path file = root / kIgnoreFile;
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    if (errno == ENOENT) return rules;
    return errno_error("stat " + file.string());
  }
  if (!S_ISREG(st.st_mode)) return make_error(std::string(kIgnoreFile) + " must be a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxIgnoreFile) {
    return make_error(std::string(kIgnoreFile) + " is larger than 1 MiB");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error("read " + file.string(), errno);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (auto s = rules.add(text, kIgnoreFile); !s) return s.error();
  return rules;
}

Status walk(const fs::path& root, const std::string& rel, const IgnoreRules& rules, PackTree& out) {
  std::error_code ec;
  const fs::path dir = rel.empty() ? root : root / rel;
  for (fs::directory_iterator it(dir, ec), end; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    const std::string child = rel.empty() ? name : rel + "/" + name;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) return errno_error("stat " + it->path().string());
    const bool always = rel.empty() && (name == kManifestFile || name == kIgnoreFile);
    if (!always && rules.excluded(child, S_ISDIR(st.st_mode))) {
      out.excluded.push_back(child);
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      const ssize_t n = ::readlink(it->path().c_str(), target.data(), target.size());
      if (n < 0) return errno_error("readlink " + it->path().string());
      if (static_cast<size_t>(n) >= target.size()) return make_error("pack symlink changed while reading it: " + child);
      target.resize(static_cast<size_t>(n));
      out.entries.push_back({child, PackEntry::Type::symlink, false, 0, std::move(target)});
    } else if (S_ISDIR(st.st_mode)) {
      out.entries.push_back({child, PackEntry::Type::dir, false, 0, {}});
      if (auto s = walk(root, child, rules, out); !s) return s;
    } else if (S_ISREG(st.st_mode)) {
      out.entries.push_back({child, PackEntry::Type::file, (st.st_mode & 0111) != 0,
                             static_cast<uint64_t>(st.st_size), {}});
    } else {
      return make_error("pack contains a special file: " + child);
    }
  }
  if (ec) return make_error("read directory " + dir.string(), ec.value());
  return {};
}

void push_components(std::deque<std::string>& todo, std::string_view path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    parts.emplace_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_front(std::move(*it));
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : "/") + p;
  return s;
}

}  // namespace

bool PackTree::contains(std::string_view rel) const {
  auto it = std::lower_bound(entries.begin(), entries.end(), rel,
                             [](const PackEntry& e, std::string_view r) { return e.rel < r; });
  return it != entries.end() && it->rel == rel;
}

Status check_symlinks(const std::vector<PackEntry>& entries) {
  std::unordered_map<std::string_view, const PackEntry*> by_path;
  for (const auto& e : entries) by_path.emplace(e.rel, &e);
  for (const auto& link : entries) {
    if (link.type != PackEntry::Type::symlink) continue;
    const std::string what = "pack contains a symlink that does not stay inside the pack: " + link.rel + " -> " +
                             link.target;
    if (link.target.empty() || link.target.front() == '/') {
      return make_error(what + " (an absolute link; a pack keeps only relative links to its own files: "
                               "copy the target into the pack)");
    }
    // Resolve as the kernel would from the link's directory: `cur` is always a real
    // directory of the pack (links on the way are replaced by their resolution).
    std::vector<std::string> cur;
    std::deque<std::string> todo;
    if (const size_t slash = link.rel.rfind('/'); slash != std::string::npos) {
      std::deque<std::string> parent;
      push_components(parent, std::string_view(link.rel).substr(0, slash));
      cur.assign(parent.begin(), parent.end());
    }
    // The directory `cur` names (nullptr for the root); an archive may lack it.
    auto dir_at = [&]() -> Result<const PackEntry*> {
      if (cur.empty()) return static_cast<const PackEntry*>(nullptr);
      auto it = by_path.find(join(cur));
      if (it == by_path.end()) return make_error(what + " (" + join(cur) + " is not in the pack)");
      return it->second;
    };
    push_components(todo, link.target);
    const bool wants_dir = link.target.back() == '/';
    int links = 1;
    auto start = dir_at();
    if (!start) return start.error();
    const PackEntry* at = *start;  // nullptr: the pack root
    while (!todo.empty()) {
      std::string c = std::move(todo.front());
      todo.pop_front();
      if (c.empty() || c == ".") continue;
      if (at != nullptr && at->type == PackEntry::Type::file) {
        return make_error(what + " (" + at->rel + " is a file, not a directory)");
      }
      if (c == "..") {
        if (cur.empty()) return make_error(what + " (it leads out of the pack)");
        cur.pop_back();
        auto d = dir_at();
        if (!d) return d.error();
        at = *d;
        continue;
      }
      cur.push_back(std::move(c));
      const std::string path = join(cur);
      auto found = by_path.find(path);
      if (found == by_path.end()) {
        return make_error(what + " (" + path + " is not in the pack" +
                          " — missing, or excluded by .soyaignore or the default rules)");
      }
      at = found->second;
      if (at->type == PackEntry::Type::symlink) {
        if (++links > kMaxLinks) return make_error(what + " (too many levels of links: a loop)");
        if (at->target.empty() || at->target.front() == '/') {
          return make_error(what + " (it goes through " + at->rel + " -> " + at->target + ", an absolute link)");
        }
        cur.pop_back();
        push_components(todo, at->target);
        auto d = dir_at();
        if (!d) return d.error();
        at = *d;
      }
    }
    if (wants_dir && at != nullptr && at->type != PackEntry::Type::dir) {
      return make_error(what + " (" + at->rel + " is not a directory)");
    }
  }
  return {};
}

Result<PackTree> scan_pack(const fs::path& root) {
  auto rules = load_rules(root);
  if (!rules) return rules.error();
  PackTree tree;
  if (auto s = walk(root, "", *rules, tree); !s) return s.error();
  std::sort(tree.entries.begin(), tree.entries.end(),
            [](const PackEntry& a, const PackEntry& b) { return a.rel < b.rel; });
  std::sort(tree.excluded.begin(), tree.excluded.end());
  if (auto s = check_symlinks(tree.entries); !s) return s.error();
  return tree;
}

Result<bool> pack_excludes(const fs::path& root, std::string_view rel) {
  if (rel == kManifestFile || rel == kIgnoreFile) return false;
  auto rules = load_rules(root);
  if (!rules) return rules.error();
  for (size_t slash = rel.find('/'); slash != std::string_view::npos; slash = rel.find('/', slash + 1)) {
    if (rules->excluded(rel.substr(0, slash), /*is_dir=*/true)) return true;
  }
  struct stat st {};
  const bool is_dir = ::lstat((root / std::string(rel)).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  return rules->excluded(rel, is_dir);
}

}  // namespace soyaos
