// The canonical pack archive (moon/archive.h): deterministic bytes, tree digest equal to
// common/digest.h's, and an extractor that accepts only files and directories below dest.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "common/digest.h"
#include "common/unique_fd.h"
#include "moon/archive.h"
#include "moon/semver.h"
#include "moon_test_util.h"

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;
using testing::make_pack;
using testing::read_file;
using testing::TmpDir;
using testing::write_file;

Result<ArchiveInfo> archive_to(const fs::path& root, const fs::path& out) {
  UniqueFd fd(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return errno_error("open");
  return write_archive(root, fd.get());
}

Result<std::string> extract_from(const fs::path& archive, const fs::path& dest) {
  UniqueFd fd(::open(archive.c_str(), O_RDONLY | O_CLOEXEC));
  fs::create_directories(dest);
  return extract_archive(fd.get(), dest);
}

// A ustar header block for a hand-made (hostile) archive.
std::string header(const std::string& name, char type, size_t size, const std::string& prefix = "",
                   const std::string& linkname = "") {
  std::array<char, 512> h{};
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(h.data() + 157, linkname.data(), std::min<size_t>(linkname.size(), 100));
  std::snprintf(h.data() + 100, 8, "%07o", 0644);
  std::snprintf(h.data() + 108, 8, "%07o", 0);
  std::snprintf(h.data() + 116, 8, "%07o", 0);
  std::snprintf(h.data() + 124, 12, "%011zo", size);
  std::snprintf(h.data() + 136, 12, "%011o", 0);
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar", 6);
  std::memcpy(h.data() + 263, "00", 2);
  std::memcpy(h.data() + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return std::string(h.data(), h.size());
}

std::string with_end(std::string body) { return body + std::string(1024, '\0'); }

TEST(MoonArchive, SameTreeSameBytesAndTreeDigestMatchesCommon) {
  TmpDir t;
  make_pack(t.path() / "p", "demo", "1.0.0");
  auto a = archive_to(t.path() / "p", t.path() / "a.tar");
  ASSERT_TRUE(a) << a.error().describe();
  // Same content in another directory, created in another order, with other mtimes.
  fs::create_directories(t.path() / "q" / "empty");
  make_pack(t.path() / "q", "demo", "1.0.0");
  auto b = archive_to(t.path() / "q", t.path() / "b.tar");
  ASSERT_TRUE(b);
  EXPECT_EQ(a->digest, b->digest);
  EXPECT_EQ(read_file(t.path() / "a.tar"), read_file(t.path() / "b.tar"));
  EXPECT_EQ(a->size, fs::file_size(t.path() / "a.tar"));
  EXPECT_EQ("sha256:" + sha256_hex(read_file(t.path() / "a.tar")), a->digest);
  auto td = tree_digest(t.path() / "p");
  ASSERT_TRUE(td);
  EXPECT_EQ(a->tree_digest, *td);
}

TEST(MoonArchive, HeadersAreCanonical) {
  TmpDir t;
  make_pack(t.path() / "p", "demo", "1.0.0");
  ASSERT_TRUE(archive_to(t.path() / "p", t.path() / "a.tar"));
  const std::string tar = read_file(t.path() / "a.tar");
  ASSERT_EQ(tar.size() % 512, 0U);
  // First entry: "bin/" (sorted), a directory 0755, mtime 0, uid/gid 0, no names.
  EXPECT_EQ(std::string(tar.data()), "bin/");
  EXPECT_EQ(tar[156], '5');
  EXPECT_EQ(std::string(tar.data() + 100), "0000755");
  EXPECT_EQ(std::string(tar.data() + 136), "00000000000");
  EXPECT_EQ(std::string(tar.data() + 108), "0000000");
  EXPECT_EQ(std::string(tar.data() + 265), "");  // uname
  EXPECT_EQ(std::string(tar.data() + 297), "");  // gname
  // Second: bin/run.sh keeps its exec bit.
  EXPECT_EQ(std::string(tar.data() + 512), "bin/run.sh");
  EXPECT_EQ(std::string(tar.data() + 512 + 100), "0000755");
  EXPECT_EQ(tar.substr(tar.size() - 1024), std::string(1024, '\0'));
}

TEST(MoonArchive, RoundTripKeepsTreeIncludingLongPathsAndModes) {
  TmpDir t;
  const fs::path src = t.path() / "p";
  make_pack(src, "demo", "1.0.0");
  const std::string longdir(90, 'd');
  write_file(src / longdir / (std::string(80, 'f') + ".txt"), "long\n");
  write_file(src / "big.bin", std::string(3 * 1024 * 1024 + 17, 'x'));
  ASSERT_TRUE(archive_to(src, t.path() / "a.tar"));
  auto got = extract_from(t.path() / "a.tar", t.path() / "out");
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_EQ(*got, "sha256:" + sha256_hex(read_file(t.path() / "a.tar")));
  EXPECT_EQ(tree_digest(src).value(), tree_digest(t.path() / "out").value());
  EXPECT_TRUE(fs::is_directory(t.path() / "out" / "empty"));
  struct stat st {};
  ASSERT_EQ(::stat((t.path() / "out" / "bin" / "run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  ASSERT_EQ(::stat((t.path() / "out" / "main.py").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644U);
}

TEST(MoonArchive, LinksOutOfThePackAndSpecialFilesAreRefused) {
  TmpDir t;
  make_pack(t.path() / "p", "demo", "1.0.0");
  fs::create_symlink("/etc/passwd", t.path() / "p" / "link");
  auto a = archive_to(t.path() / "p", t.path() / "a.tar");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("symlink that does not stay inside the pack: link -> /etc/passwd"),
            std::string::npos)
      << a.error().message;
  fs::remove(t.path() / "p" / "link");
  fs::create_symlink("../../etc/passwd", t.path() / "p" / "data" / "up");
  a = archive_to(t.path() / "p", t.path() / "a.tar");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("data/up -> ../../etc/passwd"), std::string::npos) << a.error().message;
  fs::remove(t.path() / "p" / "data" / "up");
  ASSERT_EQ(::mkfifo((t.path() / "p" / "fifo").c_str(), 0644), 0);
  a = archive_to(t.path() / "p", t.path() / "a.tar");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("special file: fifo"), std::string::npos) << a.error().message;
}

TEST(MoonArchive, RelativeLinksRoundTripAndIgnoredPathsAreLeftOut) {
  TmpDir t;
  const fs::path src = t.path() / "p";
  make_pack(src, "demo", "1.0.0");
  write_file(src / "node_modules" / "tool" / "cli.js", "console.log(1)\n");
  fs::create_directories(src / "node_modules" / ".bin");
  fs::create_symlink("../tool/cli.js", src / "node_modules" / ".bin" / "tool");
  write_file(src / "venv" / "bin" / "python3.11", "#!/bin/sh\n");
  fs::create_symlink("python3.11", src / "venv" / "bin" / "python3");
  fs::create_directory_symlink("bin", src / "venv" / "scripts");
  write_file(src / ".env", "SECRET=1\n");
  write_file(src / ".git" / "HEAD", "ref: refs/heads/main\n");
  write_file(src / ".soyaignore", "*.log\n");
  write_file(src / "debug.log", "x\n");
  auto info = archive_to(src, t.path() / "a.tar");
  ASSERT_TRUE(info) << info.error().describe();
  EXPECT_EQ(info->tree_digest, tree_digest(src).value());
  const std::string tar = read_file(t.path() / "a.tar");
  for (const char* secret : {".env", ".git/", "debug.log", "SECRET=1"}) {
    EXPECT_EQ(tar.find(secret), std::string::npos) << secret;
  }
  // The link's header: type '2', the target in linkname, no data.
  const size_t at = tar.find("node_modules/.bin/tool");
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(at % 512, 0U);
  EXPECT_EQ(tar[at + 156], '2');
  EXPECT_EQ(std::string(tar.data() + at + 157), "../tool/cli.js");
  EXPECT_EQ(std::string(tar.data() + at + 124), "00000000000");
  // Same bytes again.
  ASSERT_TRUE(archive_to(src, t.path() / "b.tar"));
  EXPECT_EQ(read_file(t.path() / "b.tar"), tar);

  auto got = extract_from(t.path() / "a.tar", t.path() / "out");
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_EQ(*got, info->digest);
  EXPECT_EQ(tree_digest(t.path() / "out").value(), info->tree_digest);
  EXPECT_TRUE(fs::is_symlink(t.path() / "out" / "node_modules" / ".bin" / "tool"));
  EXPECT_EQ(fs::read_symlink(t.path() / "out" / "node_modules" / ".bin" / "tool"), "../tool/cli.js");
  EXPECT_EQ(read_file(t.path() / "out" / "node_modules" / ".bin" / "tool"), "console.log(1)\n");
  EXPECT_EQ(fs::read_symlink(t.path() / "out" / "venv" / "bin" / "python3"), "python3.11");
  EXPECT_TRUE(fs::is_directory(t.path() / "out" / "venv" / "scripts"));
  EXPECT_FALSE(fs::exists(t.path() / "out" / ".env"));
  EXPECT_FALSE(fs::exists(t.path() / "out" / ".git"));
  EXPECT_FALSE(fs::exists(t.path() / "out" / "debug.log"));
  EXPECT_TRUE(fs::exists(t.path() / "out" / ".soyaignore"));
}

TEST(MoonArchive, ExtractorRefusesLinksOutOfTheTree) {
  TmpDir t;
  struct Case {
    const char* what;
    std::string archive;
  };
  const Case cases[] = {
      {"absolute", with_end(header("link", '2', 0, "", "/etc/passwd"))},
      {"escaping", with_end(header("link", '2', 0, "", "../evil"))},
      {"dangling", with_end(header("link", '2', 0, "", "missing"))},
      {"loop", with_end(header("l1", '2', 0, "", "l2") + header("l2", '2', 0, "", "l1"))},
      {"link to root then up",
       with_end(header("root", '2', 0, "", ".") + header("x", '2', 0, "", "root/../evil"))},
      {"entry below a link", with_end(header("d/", '5', 0) + header("l", '2', 0, "", "d") + header("l/x", '0', 0))},
      {"link with data", with_end(header("f", '0', 0) + header("link", '2', 512, "", "f") + std::string(512, 'x'))},
      {"link over a file", with_end(header("f", '0', 0) + header("f", '2', 0, "", "f"))},
  };
  int i = 0;
  for (const auto& c : cases) {
    const fs::path a = t.path() / ("a" + std::to_string(i));
    const fs::path out = t.path() / ("out" + std::to_string(i++));
    write_file(a, c.archive);
    auto r = extract_from(a, out);
    EXPECT_FALSE(r) << c.what;
    EXPECT_FALSE(fs::exists(t.path() / "evil")) << c.what;
    EXPECT_FALSE(fs::exists(out / "d" / "x")) << c.what;
  }
}

TEST(MoonArchive, ExtractorRefusesHostileEntries) {
  TmpDir t;
  struct Case {
    const char* what;
    std::string archive;
  };
  const Case cases[] = {
      {"dotdot", with_end(header("../evil", '0', 0))},
      {"inner dotdot", with_end(header("a/../../evil", '0', 0))},
      {"absolute", with_end(header("/tmp/evil", '0', 0))},
      {"dot", with_end(header("./x", '0', 0))},
      {"prefix dotdot", with_end(header("evil", '0', 0, ".."))},
      {"symlink without a target", with_end(header("link", '2', 0))},
      {"hardlink", with_end(header("link", '1', 0))},
      {"device", with_end(header("dev", '3', 0))},
      {"truncated", header("f", '0', 100) + "short"},
      {"duplicate", with_end(header("f", '0', 0) + header("f", '0', 0))},
  };
  int i = 0;
  for (const auto& c : cases) {
    const fs::path a = t.path() / ("a" + std::to_string(i));
    const fs::path out = t.path() / ("out" + std::to_string(i++));
    write_file(a, c.archive);
    auto r = extract_from(a, out);
    EXPECT_FALSE(r) << c.what;
    EXPECT_FALSE(fs::exists(t.path() / "evil")) << c.what;
    EXPECT_FALSE(fs::exists("/tmp/evil")) << c.what;
  }
  // A bad checksum.
  std::string bad = header("f", '0', 0);
  bad[0] = 'g';
  write_file(t.path() / "bad", with_end(bad));
  EXPECT_FALSE(extract_from(t.path() / "bad", t.path() / "outbad"));
}

TEST(MoonArchive, ExtractorDoesNotFollowSymlinksInDest) {
  TmpDir t;
  // Should a pre-existing link sit in dest, a/x must not land in its target.
  fs::create_directories(t.path() / "out");
  fs::create_directories(t.path() / "target");
  fs::create_directory_symlink(t.path() / "target", t.path() / "out" / "a");
  write_file(t.path() / "arc", with_end(header("a/x", '0', 0)));
  EXPECT_FALSE(extract_from(t.path() / "arc", t.path() / "out"));
  EXPECT_FALSE(fs::exists(t.path() / "target" / "x"));
}

TEST(MoonSemver, Precedence) {
  EXPECT_LT(compare_semver("1.0.0", "2.0.0"), 0);
  EXPECT_LT(compare_semver("1.9.0", "1.10.0"), 0);
  EXPECT_LT(compare_semver("1.0.0-alpha", "1.0.0"), 0);
  EXPECT_LT(compare_semver("1.0.0-alpha", "1.0.0-alpha.1"), 0);
  EXPECT_LT(compare_semver("1.0.0-alpha.1", "1.0.0-alpha.beta"), 0);
  EXPECT_LT(compare_semver("1.0.0-beta.2", "1.0.0-beta.11"), 0);
  EXPECT_LT(compare_semver("1.0.0-rc.1", "1.0.0"), 0);
  EXPECT_EQ(compare_semver("1.0.0+build.1", "1.0.0+build.2"), 0);
  EXPECT_GT(compare_semver("1.4.10", "1.4.9"), 0);
}

}  // namespace
}  // namespace soyaos::moon
