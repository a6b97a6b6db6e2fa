#include "moon/unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "common/digest.h"
#include "moon/archive.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;

Error tampered(const UnpackExpect& e, const std::string& why) {
  return make_error(e.what + " does not match its digest " + e.digest + " (" + why +
                    "): refused; the stored copy is corrupt or was tampered with");
}

}  // namespace

Status unpack_archive(int fd, const UnpackExpect& expect, const fs::path& dest_in) {
  std::error_code ec;
  const fs::path dest = fs::absolute(dest_in, ec).lexically_normal();
  if (ec) return make_error("resolve " + dest_in.string(), ec.value());
  const fs::path target = dest.filename().empty() ? dest.parent_path() : dest;
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return make_error(dest_in.string() + " exists and is not a directory");
    if (!fs::is_empty(target, ec) || ec) {
      return make_error(dest_in.string() + " exists and is not empty (refusing to extract into it)");
    }
  } else if (errno != ENOENT) {
    return errno_error("stat " + dest_in.string());
  }
  fs::create_directories(target.parent_path(), ec);
  if (ec) return make_error("create " + target.parent_path().string(), ec.value());

  // The size first (one fstat), then the digest over the whole file: verified before
  // anything is unpacked.
  if (::fstat(fd, &st) != 0) return errno_error("stat " + expect.what);
  if (!S_ISREG(st.st_mode)) return make_error(expect.what + " is not a regular file");
  if (expect.size_known && static_cast<uint64_t>(st.st_size) != expect.size) {
    return tampered(expect, "it is " + std::to_string(st.st_size) + " bytes, not " + std::to_string(expect.size));
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) return errno_error("seek " + expect.what);
  if (!expect.verified) {
    auto whole = digest_fd(fd);
    if (!whole) return whole.error();
    if (*whole != expect.digest) return tampered(expect, "its content hashes to " + *whole);
    if (::lseek(fd, 0, SEEK_SET) != 0) return errno_error("seek " + expect.what);
  }

  const fs::path staging = target.parent_path() / ("." + target.filename().string() + ".pull.tmp-" +
                                                   std::to_string(::getpid()) + "-" +
                                                   scope::new_event_id().substr(0, 8));
  if (::mkdir(staging.c_str(), 0700) != 0) return errno_error("mkdir " + staging.string());
  struct StagingGuard {
    const fs::path& p;
    bool keep = false;
    ~StagingGuard() {
      std::error_code e;
      if (!keep) fs::remove_all(p, e);
    }
  } guard{staging};
  auto got = extract_archive_info(fd, staging, /*hash_archive=*/!expect.verified);
  if (!got) return make_error("extract " + expect.what + ": " + got.error().describe());
  if (!expect.verified && got->digest != expect.digest) {
    return tampered(expect, "it changed while it was extracted: the bytes read hash to " + got->digest);
  }
  if (!expect.tree_digest.empty()) {
    // The tree digest of what a run will see: scan_pack's, over the extracted directory —
    // not the one hashed from the archive's entries as they were written (got->tree_digest).
    // That one depends on the archive's order, on parents left implicit, and counts entries
    // the pack's ignore rules leave out, so one content could be published under many tree
    // digests and its runs' flags (keyed by the run's digest) would not find the origin
    // recorded under the archive's. A second read of the tree, from the page cache.
    auto canonical_digest = tree_digest(staging);
    if (!canonical_digest) {
      return make_error("the tree extracted from " + expect.what + ": " + canonical_digest.error().describe());
    }
    const std::string& canonical = *canonical_digest;
    if (canonical != expect.tree_digest) {
      return make_error("the tree extracted from " + expect.what + " has the digest " + canonical + ", not the " +
                        expect.tree_digest + " its record names; refused");
    }
  }
  if (::chmod(staging.c_str(), 0755) != 0) return errno_error("chmod " + staging.string());
  // rename(2) replaces an empty directory at `target`.
  if (::rename(staging.c_str(), target.c_str()) != 0) {
    return errno_error("move the extracted pack to " + dest_in.string());
  }
  guard.keep = true;
  return {};
}

}  // namespace soyaos::moon
