// The one unpacking path of stored pack archives (moon/unpack.h), used by the local
// registry's pull and by registry packs' pull and run: size and digest verified before
// anything is unpacked, the extracted tree's digest (as a run computes it) checked, nothing
// left at the destination on any failure.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "moon/archive.h"
#include "moon/unpack.h"
#include "moon_test_util.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using testing::make_pack;
using testing::read_file;
using testing::TmpDir;
using testing::write_file;

struct Archived {
  ArchiveInfo info;
  fs::path file;
};

Archived archive(const fs::path& root, const fs::path& out) {
  UniqueFd fd(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  auto info = write_archive(root, fd.get());
  EXPECT_TRUE(info) << info.error().describe();
  return {info ? *info : ArchiveInfo{}, out};
}

UnpackExpect expect_of(const Archived& a) {
  UnpackExpect e;
  e.what = "archive " + a.file.string();
  e.digest = a.info.digest;
  e.size = a.info.size;
  e.size_known = true;
  e.tree_digest = a.info.tree_digest;
  return e;
}

Status unpack(const fs::path& file, const UnpackExpect& e, const fs::path& dest) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  return unpack_archive(fd.get(), e, dest);
}

// Nothing named like the staging directory is left next to `dest`.
void no_staging_left(const fs::path& parent) {
  for (const auto& e : fs::directory_iterator(parent)) {
    EXPECT_EQ(e.path().filename().string().find(".pull.tmp-"), std::string::npos) << e.path();
  }
}

TEST(MoonUnpack, TreeDigestWhileExtractingEqualsTheWritersAndCommons) {
  TmpDir t;
  const fs::path src = t.path() / "p";
  make_pack(src, "demo", "1.0.0");
  write_file(src / "big.bin", std::string(2 * 1024 * 1024 + 5, 'x'));
  fs::create_symlink("main.py", src / "alias.py");
  const Archived a = archive(src, t.path() / "a.tar");
  fs::create_directories(t.path() / "out");
  UniqueFd fd(::open(a.file.c_str(), O_RDONLY | O_CLOEXEC));
  auto got = extract_archive_info(fd.get(), t.path() / "out");
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_EQ(got->digest, a.info.digest);
  EXPECT_EQ(got->size, a.info.size);
  EXPECT_EQ(got->tree_digest, a.info.tree_digest);
  EXPECT_EQ(got->tree_digest, tree_digest(t.path() / "out").value());
  // Without the archive's own hash (an fd verified as it arrived): the tree still is.
  fs::create_directories(t.path() / "out2");
  ASSERT_EQ(::lseek(fd.get(), 0, SEEK_SET), 0);
  auto quick = extract_archive_info(fd.get(), t.path() / "out2", /*hash_archive=*/false);
  ASSERT_TRUE(quick) << quick.error().describe();
  EXPECT_EQ(quick->digest, "");
  EXPECT_EQ(quick->tree_digest, a.info.tree_digest);
}

TEST(MoonUnpack, UnpacksIntoANewOrEmptyDirectoryOnly) {
  TmpDir t;
  make_pack(t.path() / "p", "demo", "1.0.0");
  const Archived a = archive(t.path() / "p", t.path() / "a.tar");
  ASSERT_TRUE(unpack(a.file, expect_of(a), t.path() / "new"));
  EXPECT_EQ(read_file(t.path() / "new" / "main.py"), "print('hello')\n");
  fs::create_directories(t.path() / "empty-dir");
  ASSERT_TRUE(unpack(a.file, expect_of(a), t.path() / "empty-dir"));
  EXPECT_TRUE(fs::exists(t.path() / "empty-dir" / "soyapack.yaml"));
  // Not empty, or not a directory: refused, left as it was.
  write_file(t.path() / "full" / "mine.txt", "keep\n");
  auto s = unpack(a.file, expect_of(a), t.path() / "full");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("not empty"), std::string::npos) << s.error().message;
  EXPECT_EQ(read_file(t.path() / "full" / "mine.txt"), "keep\n");
  write_file(t.path() / "file", "x");
  EXPECT_FALSE(unpack(a.file, expect_of(a), t.path() / "file"));
  no_staging_left(t.path());
}

TEST(MoonUnpack, ModifiedArchiveIsRefusedBeforeAnythingIsUnpacked) {
  TmpDir t;
  make_pack(t.path() / "p", "demo", "1.0.0");
  const Archived a = archive(t.path() / "p", t.path() / "a.tar");
  std::string bytes = read_file(a.file);
  const auto at = bytes.find("print('hello')");
  ASSERT_NE(at, std::string::npos);
  // Same size, other content: the digest says so.
  bytes.replace(at, 14, "print('pwned')");
  write_file(t.path() / "same-size.tar", bytes);
  auto s = unpack(t.path() / "same-size.tar", expect_of(a), t.path() / "out");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("does not match its digest " + a.info.digest), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("tampered"), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(t.path() / "out"));
  // Longer: refused on its size, before it is read.
  write_file(t.path() / "longer.tar", read_file(a.file) + std::string(512, '\0'));
  s = unpack(t.path() / "longer.tar", expect_of(a), t.path() / "out");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("bytes, not " + std::to_string(a.info.size)), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(t.path() / "out"));
  no_staging_left(t.path());
}

TEST(MoonUnpack, TreeDigestOtherThanTheRecordsIsRefused) {
  TmpDir t;
  make_pack(t.path() / "p", "demo", "1.0.0");
  const Archived a = archive(t.path() / "p", t.path() / "a.tar");
  UnpackExpect e = expect_of(a);
  e.tree_digest = "sha256:" + std::string(64, '0');
  auto s = unpack(a.file, e, t.path() / "out");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("not the sha256:000"), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(t.path() / "out"));
  // Also when the caller verified the fd itself (the tree is always checked).
  e.verified = true;
  EXPECT_FALSE(unpack(a.file, e, t.path() / "out"));
  EXPECT_FALSE(fs::exists(t.path() / "out"));
  no_staging_left(t.path());
}

// One ustar entry: a header for `name` (a regular file of `content`), then the content padded.
std::string tar_file_entry(const std::string& name, const std::string& content) {
  std::array<char, 512> h{};
  std::memcpy(h.data(), name.data(), name.size());
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  std::snprintf(h.data() + 124, 12, "%011o", static_cast<unsigned>(content.size()));
  std::snprintf(h.data() + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h.data() + 257, "ustar", 6);
  std::memcpy(h.data() + 263, "00", 2);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return std::string(h.data(), h.size()) + content + std::string((512 - content.size() % 512) % 512, '\0');
}

// The same content archived another way than write_archive does (entries out of order, a
// parent directory left implicit) has the same tree digest once unpacked: the one a run
// computes. The digest hashed from that archive's entries as they come is not accepted in
// its place — else one content could be published under many tree digests, and its runs'
// flags (keyed by the run's digest) would not find its origin.
TEST(MoonUnpack, TheTreeDigestIsTheContentsWhateverTheArchivesOrder) {
  TmpDir t;
  write_file(t.path() / "ref" / "a.txt", "alpha\n");
  write_file(t.path() / "ref" / "sub" / "b.txt", "beta\n");
  auto canonical = tree_digest(t.path() / "ref");
  ASSERT_TRUE(canonical) << canonical.error().describe();
  const std::string tar =
      tar_file_entry("sub/b.txt", "beta\n") + tar_file_entry("a.txt", "alpha\n") + std::string(1024, '\0');
  write_file(t.path() / "other.tar", tar);
  UnpackExpect e;
  e.what = "other";
  e.digest = "sha256:" + sha256_hex(tar);
  e.size = tar.size();
  e.size_known = true;
  // What the entries hash to in archive order: not the content's digest.
  fs::create_directories(t.path() / "scratch");
  UniqueFd fd(::open((t.path() / "other.tar").c_str(), O_RDONLY | O_CLOEXEC));
  auto streamed = extract_archive_info(fd.get(), t.path() / "scratch");
  ASSERT_TRUE(streamed) << streamed.error().describe();
  ASSERT_NE(streamed->tree_digest, *canonical);
  e.tree_digest = streamed->tree_digest;
  auto s = unpack(t.path() / "other.tar", e, t.path() / "refused");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("has the digest " + *canonical), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(t.path() / "refused"));
  e.tree_digest = *canonical;
  auto ok = unpack(t.path() / "other.tar", e, t.path() / "out");
  ASSERT_TRUE(ok) << ok.error().describe();
  EXPECT_EQ(read_file(t.path() / "out" / "sub" / "b.txt"), "beta\n");
  auto again = tree_digest(t.path() / "out");
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *canonical);
  no_staging_left(t.path());
}

// A hostile archive whose digest the record names (a registry that signed what it should
// not have): the extractor's own rules still refuse it, nothing is left.
TEST(MoonUnpack, HostileArchiveWithAMatchingDigestIsStillRefused) {
  TmpDir t;
  const std::string tar = tar_file_entry("../escape.txt", "") + std::string(1024, '\0');
  write_file(t.path() / "evil.tar", tar);
  UnpackExpect e;
  e.what = "evil";
  e.digest = "sha256:" + sha256_hex(tar);
  e.size = tar.size();
  e.size_known = true;
  auto s = unpack(t.path() / "evil.tar", e, t.path() / "d" / "out");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("refused entry path '../escape.txt'"), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(t.path() / "d" / "out"));
  EXPECT_FALSE(fs::exists(t.path() / "d" / "escape.txt"));
  EXPECT_FALSE(fs::exists(t.path() / "escape.txt"));
  no_staging_left(t.path() / "d");
}

}  // namespace
}  // namespace soyaos::moon
