// load_pack: reads DIR/soyapack.yaml safely and adds the filesystem checks that
// parse_manifest cannot make (the manifest stays inside the pack, the entrypoint and the
// example inputs exist inside the pack and do not escape it through ".." or symlinks).
//
// The manifest is opened with openat() relative to the pack directory's fd, O_NONBLOCK so
// that a FIFO cannot hang us, then fstat()ed: only a regular file no larger than
// kMaxManifestBytes is read, and at most kMaxManifestBytes + 1 bytes are ever read.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "common/pack_tree.h"
#include "common/unique_fd.h"
#include "manifest/manifest.h"

namespace soyaos::manifest {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int err) { return std::strerror(err); }

// True when `path` (canonical) is `root` (canonical) or below it.
bool inside(const fs::path& root, const fs::path& path) {
  return path_covers(root.string(), path.string());
}

// Resolves `relative` against the pack root and checks it stays inside. Returns the
// problem, or an empty string when fine; `is_dir` reports what was found.
std::string check_inside(const fs::path& root_canon, const fs::path& pack_dir, const std::string& relative,
                         bool& is_dir) {
  std::error_code ec;
  const fs::path joined = pack_dir / relative;
  const fs::file_status lst = fs::symlink_status(joined, ec);
  if (ec || !fs::exists(lst)) {
    // Distinguish a dangling symlink or missing file from an unreadable one.
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
      return "cannot be examined: " + ec.message();
    }
    return "does not exist in the pack";
  }
  const fs::path canon = fs::canonical(joined, ec);
  if (ec) {
    if (fs::is_symlink(lst)) return "is a symlink that does not resolve inside the pack";
    return "cannot be resolved: " + ec.message();
  }
  if (!inside(root_canon, canon)) return "resolves outside the pack (through a symlink)";
  // What .soyaignore (or the default rules) excludes is not part of the pack (SPEC T6).
  auto excluded = pack_excludes(pack_dir, fs::path(relative).lexically_normal().generic_string());
  if (!excluded) return "cannot be checked against " + std::string(kIgnoreFile) + ": " + excluded.error().describe();
  if (*excluded) return std::string("is excluded from the pack by ") + kIgnoreFile + " or the default rules (.git, .env*)";
  const fs::file_status st = fs::status(canon, ec);
  if (ec) return "cannot be examined: " + ec.message();
  is_dir = fs::is_directory(st);
  if (!is_dir && !fs::is_regular_file(st)) return "is neither a regular file nor a directory";
  return {};
}

}  // namespace

LoadResult load_pack(const fs::path& pack_dir) {
  const std::string file = (pack_dir / "soyapack.yaml").string();
  const std::string dir_display = pack_dir.string();
  LoadResult result;
  auto fail = [&](std::string display, std::string message) {
    result.errors.push_back(Diagnostic{std::move(display), {}, "", std::move(message)});
    return result;
  };

  UniqueFd dir{::open(pack_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!dir) {
    const int err = errno;
    if (err == ENOENT) return fail(dir_display, "pack directory does not exist");
    if (err == ENOTDIR) return fail(dir_display, "not a directory (a pack is a directory holding soyapack.yaml)");
    return fail(dir_display, "cannot open pack directory: " + errno_text(err));
  }

  std::error_code ec;
  const fs::path root_canon = fs::canonical(pack_dir, ec);
  if (ec) return fail(dir_display, "cannot resolve pack directory: " + ec.message());

  // soyapack.yaml itself may be a symlink only to a file inside the pack.
  struct stat lst {};
  if (::fstatat(dir.get(), "soyapack.yaml", &lst, AT_SYMLINK_NOFOLLOW) != 0) {
    const int err = errno;
    if (err == ENOENT) return fail(file, "no soyapack.yaml in " + dir_display);
    return fail(file, "cannot examine: " + errno_text(err));
  }
  if (S_ISLNK(lst.st_mode)) {
    const fs::path target = fs::canonical(pack_dir / "soyapack.yaml", ec);
    if (ec) return fail(file, "is a symlink that does not resolve: " + ec.message());
    if (!inside(root_canon, target)) return fail(file, "is a symlink leading outside the pack");
  }

  UniqueFd fd{::openat(dir.get(), "soyapack.yaml", O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (!fd) return fail(file, "cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(file, "cannot examine: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) return fail(file, "is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxManifestBytes) {
    return fail(file, "file is larger than " + std::to_string(kMaxManifestBytes) + " bytes (" +
                          std::to_string(st.st_size) + " bytes)");
  }

  // Read at most one byte more than allowed, so a file that grows meanwhile is caught.
  // The buffer starts at the file's size (+1 to see the end) and grows only if the file
  // did: zero-filling the 4 MiB bound for a 300-byte manifest cost ~0.5 ms of page
  // faults per read, several reads per run (bench/startup.sh, issue #16).
  std::string text;
  text.resize(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (text.size() > kMaxManifestBytes) break;
      text.resize(std::min(kMaxManifestBytes + 1, text.size() * 2));
    }
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(file, "cannot read: " + errno_text(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);

  result = parse_manifest(text, file);
  result.text = std::move(text);
  if (!result.manifest) return result;

  Manifest& m = *result.manifest;
  m.pack_dir = pack_dir;
  m.file = file;
  std::vector<Diagnostic> errors;
  {
    bool is_dir = false;
    std::string why = check_inside(root_canon, pack_dir, m.agent.entrypoint, is_dir);
    if (why.empty() && is_dir) why = "is a directory, not a file";
    if (!why.empty()) {
      errors.push_back(Diagnostic{file, m.agent.entrypoint_mark, "agent.entrypoint", m.agent.entrypoint + " " + why});
    }
  }
  for (const Example& ex : m.examples) {
    if (ex.input.empty()) continue;
    bool is_dir = false;
    const std::string why = check_inside(root_canon, pack_dir, ex.input, is_dir);
    if (!why.empty()) {
      errors.push_back(Diagnostic{file, ex.input_mark, ex.key_path + ".input", ex.input + " " + why});
    }
  }
  if (!errors.empty()) {
    std::stable_sort(errors.begin(), errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::pair(a.mark.line, a.mark.column) < std::pair(b.mark.line, b.mark.column);
    });
    result.manifest.reset();
    result.errors = std::move(errors);
  }
  return result;
}

}  // namespace soyaos::manifest
