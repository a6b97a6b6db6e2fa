// What a pack is (common/pack_tree.h): exclusions and the symlink rules, as scan_pack,
// tree_digest and the manifest loader apply them.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "common/digest.h"
#include "common/pack_tree.h"
#include "manifest/manifest.h"
#include "moon_test_util.h"

namespace soyaos {
namespace {

namespace fs = std::filesystem;
using moon::testing::make_pack;
using moon::testing::TmpDir;
using moon::testing::write_file;

std::vector<std::string> rels(const PackTree& t) {
  std::vector<std::string> out;
  for (const auto& e : t.entries) out.push_back(e.rel);
  return out;
}

bool has(const PackTree& t, const std::string& rel) { return t.contains(rel); }

TEST(PackTree, DefaultsExcludeGitAndEnvFiles) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  write_file(p / ".git" / "config", "[core]\n");
  write_file(p / ".env", "API_KEY=secret\n");
  write_file(p / ".env.local", "x\n");
  write_file(p / "sub" / ".env", "y\n");
  write_file(p / ".gitignore", "*.pyc\n");
  auto tree = scan_pack(p);
  ASSERT_TRUE(tree) << tree.error().describe();
  EXPECT_FALSE(has(*tree, ".git"));
  EXPECT_FALSE(has(*tree, ".git/config"));
  EXPECT_FALSE(has(*tree, ".env"));
  EXPECT_FALSE(has(*tree, ".env.local"));
  EXPECT_FALSE(has(*tree, "sub/.env"));
  EXPECT_TRUE(has(*tree, ".gitignore"));
  EXPECT_TRUE(has(*tree, "sub"));
  EXPECT_EQ(tree->excluded, (std::vector<std::string>{".env", ".env.local", ".git", "sub/.env"}));
  // Entries are sorted, directories before their contents.
  auto r = rels(*tree);
  EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
}

TEST(PackTree, SoyaignoreAppliesWithNegationAndNeverDropsTheManifest) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  write_file(p / ".soyaignore", "# local files\n*.log\n!keep.log\ndata/\n.*\n!.env.example\n");
  write_file(p / "a.log", "x");
  write_file(p / "keep.log", "x");
  write_file(p / ".env.example", "API_KEY=\n");
  write_file(p / ".cache" / "x", "x");
  auto tree = scan_pack(p);
  ASSERT_TRUE(tree) << tree.error().describe();
  EXPECT_FALSE(has(*tree, "a.log"));
  EXPECT_TRUE(has(*tree, "keep.log"));
  EXPECT_FALSE(has(*tree, "data"));
  EXPECT_FALSE(has(*tree, "data/nested/deep/x.json"));
  EXPECT_TRUE(has(*tree, ".env.example"));
  EXPECT_FALSE(has(*tree, ".cache"));
  EXPECT_TRUE(has(*tree, "soyapack.yaml"));
  EXPECT_TRUE(has(*tree, ".soyaignore"));  // `.*` does not drop the rules themselves
  EXPECT_TRUE(has(*tree, "main.py"));
}

TEST(PackTree, ExcludedFilesDoNotChangeTheDigest) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  write_file(p / ".soyaignore", "*.log\n");
  auto before = tree_digest(p);
  ASSERT_TRUE(before) << before.error().describe();
  write_file(p / ".env", "SECRET=1\n");
  write_file(p / "debug.log", "noise\n");
  write_file(p / ".git" / "HEAD", "ref: refs/heads/main\n");
  EXPECT_EQ(tree_digest(p).value(), *before);
  write_file(p / "new.txt", "x\n");
  EXPECT_NE(tree_digest(p).value(), *before);
}

// A file swapped after the scan, for a FIFO (which would block the digest forever) or a
// symlink (to anything, outside the pack), is refused by the digest, not waited on or followed.
TEST(PackTree, AFileSwappedAfterTheScanIsRefusedByTheDigest) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  write_file(p / "data.txt", "x\n");
  write_file(t.path() / "outside.txt", "host secret\n");
  auto tree = scan_pack(p);
  ASSERT_TRUE(tree) << tree.error().describe();
  ASSERT_TRUE(tree_digest(p, *tree));

  fs::remove(p / "data.txt");
  ASSERT_EQ(::mkfifo((p / "data.txt").c_str(), 0644), 0);
  auto fifo = tree_digest(p, *tree);  // returns at once: no writer is waited for
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().describe().find("no longer a regular file"), std::string::npos) << fifo.error().describe();

  fs::remove(p / "data.txt");
  fs::create_symlink(t.path() / "outside.txt", p / "data.txt");
  auto link = tree_digest(p, *tree);
  ASSERT_FALSE(link);
  EXPECT_EQ(link.error().err, ELOOP) << link.error().describe();
  EXPECT_NE(link.error().describe().find("became a symbolic link"), std::string::npos) << link.error().describe();
}

// The same for a file's directory: swapped after the scan for a link to a host directory that
// holds a file of the same name, it is refused (ELOOP), not followed (O_NOFOLLOW alone covers
// only the last component). A link as the pack's own root is the operator's choice: followed.
TEST(PackTree, AFilesDirectorySwappedForALinkAfterTheScanIsRefusedByTheDigest) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  fs::create_directories(p / "sub" / "deeper");
  write_file(p / "sub" / "deeper" / "data.txt", "x\n");
  fs::create_directories(t.path() / "host" / "deeper");
  write_file(t.path() / "host" / "deeper" / "data.txt", "host secret\n");
  auto tree = scan_pack(p);
  ASSERT_TRUE(tree) << tree.error().describe();
  auto before = tree_digest(p, *tree);
  ASSERT_TRUE(before) << before.error().describe();
  fs::create_directory_symlink(p, t.path() / "via-link");
  auto via_link = tree_digest(t.path() / "via-link", *tree);
  ASSERT_TRUE(via_link) << via_link.error().describe();
  EXPECT_EQ(*via_link, *before);

  for (const fs::path& swapped : {p / "sub", p / "sub" / "deeper"}) {
    SCOPED_TRACE(swapped.string());
    fs::rename(swapped, t.path() / "moved");
    const fs::path target = swapped == p / "sub" ? t.path() / "host" : t.path() / "host" / "deeper";
    fs::create_directory_symlink(target, swapped);
    auto d = tree_digest(p, *tree);
    ASSERT_FALSE(d) << "followed the link to " << target;
    EXPECT_EQ(d.error().err, ELOOP) << d.error().describe();
    EXPECT_NE(d.error().describe().find("became a symbolic link"), std::string::npos) << d.error().describe();
    fs::remove(swapped);
    fs::rename(t.path() / "moved", swapped);
  }
  auto after = tree_digest(p, *tree);
  ASSERT_TRUE(after) << after.error().describe();
  EXPECT_EQ(*after, *before);
}

TEST(PackTree, AnInvalidSoyaignoreIsAnErrorNamingTheLine) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  write_file(p / ".soyaignore", "ok\n[oops\n");
  auto tree = scan_pack(p);
  ASSERT_FALSE(tree);
  EXPECT_NE(tree.error().message.find(".soyaignore:2:"), std::string::npos) << tree.error().message;
  fs::remove(p / ".soyaignore");
  fs::create_symlink("soyapack.yaml", p / ".soyaignore");
  tree = scan_pack(p);
  ASSERT_FALSE(tree);
  EXPECT_NE(tree.error().message.find("regular file"), std::string::npos) << tree.error().message;
}

TEST(PackTree, RelativeLinksInsideThePackAreKept) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  // npm: node_modules/.bin/tool -> ../tool/cli.js
  write_file(p / "node_modules" / "tool" / "cli.js", "console.log(1)\n");
  fs::create_directories(p / "node_modules" / ".bin");
  fs::create_symlink("../tool/cli.js", p / "node_modules" / ".bin" / "tool");
  // venv: bin/python3 -> python3.11, bin/python -> python3 (a chain), lib64 -> lib
  write_file(p / "venv" / "bin" / "python3.11", "#!/bin/sh\n");
  fs::create_symlink("python3.11", p / "venv" / "bin" / "python3");
  fs::create_symlink("python3", p / "venv" / "bin" / "python");
  fs::create_directories(p / "venv" / "lib" / "site-packages");
  fs::create_directory_symlink("lib", p / "venv" / "lib64");
  // Through a directory link and back up: venv/lib64/../bin/python resolves in venv/.
  fs::create_symlink("../venv/lib64/../bin/python", p / "bin" / "py");
  fs::create_symlink(".", p / "here");  // the pack root itself
  auto tree = scan_pack(p);
  ASSERT_TRUE(tree) << tree.error().describe();
  ASSERT_TRUE(has(*tree, "node_modules/.bin/tool"));
  for (const auto& e : tree->entries) {
    if (e.rel == "node_modules/.bin/tool") {
      EXPECT_EQ(e.type, PackEntry::Type::symlink);
      EXPECT_EQ(e.target, "../tool/cli.js");
    }
  }
  EXPECT_TRUE(has(*tree, "venv/bin/python"));
  EXPECT_TRUE(has(*tree, "venv/lib64"));
  // The digest records the link, not the file it points to.
  const auto d1 = tree_digest(p).value();
  fs::remove(p / "venv" / "bin" / "python");
  fs::create_symlink("python3.11", p / "venv" / "bin" / "python");
  EXPECT_NE(tree_digest(p).value(), d1);
}

TEST(PackTree, LinksThatLeaveThePackAreRefusedNamingTheLink) {
  struct Case {
    const char* what;
    const char* link;    // relative path of the link in the pack
    const char* target;  // its content
    const char* expect;  // in the error
  };
  const Case cases[] = {
      {"absolute", "venv/bin/python3", "/usr/bin/python3", "absolute"},
      {"escaping", "up", "../outside", "leads out of the pack"},
      {"escaping deep", "data/x", "../../../etc/passwd", "leads out of the pack"},
      {"back in by name", "data/back", "../../p/main.py", "leads out of the pack"},
      {"dangling", "dangling", "missing.txt", "not in the pack"},
      {"excluded target", "cfg", ".env", "not in the pack"},
      {"through a file", "thru", "main.py/x", "is a file"},
      {"self loop", "loop", "loop", "loop"},
  };
  for (const auto& c : cases) {
    TmpDir t;
    const fs::path p = t.path() / "p";
    make_pack(p, "demo", "1.0.0");
    write_file(p / ".env", "SECRET=1\n");
    write_file(t.path() / "outside", "host file\n");
    fs::create_directories((p / c.link).parent_path());
    fs::create_symlink(c.target, p / c.link);
    auto tree = scan_pack(p);
    ASSERT_FALSE(tree) << c.what;
    EXPECT_NE(tree.error().message.find(std::string(c.link) + " -> " + c.target), std::string::npos)
        << c.what << ": " << tree.error().message;
    EXPECT_NE(tree.error().message.find(c.expect), std::string::npos) << c.what << ": " << tree.error().message;
    EXPECT_FALSE(tree_digest(p)) << c.what;
  }
}

TEST(PackTree, ChainsAndLoopsAreFollowedToTheEnd) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  // a -> b -> /etc: each link is refused by itself; a is refused for going through b.
  fs::create_symlink("b", p / "a");
  fs::create_symlink("/etc", p / "b");
  auto tree = scan_pack(p);
  ASSERT_FALSE(tree);
  EXPECT_NE(tree.error().message.find("absolute"), std::string::npos) << tree.error().message;
  fs::remove(p / "a");
  fs::remove(p / "b");
  // root -> . ; x -> root/../escape: the kernel resolves root first, then ".." above the pack.
  fs::create_symlink(".", p / "root");
  fs::create_symlink("root/../p/main.py", p / "x");
  tree = scan_pack(p);
  ASSERT_FALSE(tree);
  EXPECT_NE(tree.error().message.find("x -> root/../p/main.py"), std::string::npos) << tree.error().message;
  EXPECT_NE(tree.error().message.find("leads out of the pack"), std::string::npos) << tree.error().message;
  fs::remove(p / "x");
  // A two-link loop.
  fs::create_symlink("l2", p / "l1");
  fs::create_symlink("l1", p / "l2");
  tree = scan_pack(p);
  ASSERT_FALSE(tree);
  EXPECT_NE(tree.error().message.find("loop"), std::string::npos) << tree.error().message;
}

TEST(PackTree, CheckSymlinksWorksOnAnEntryListWithoutParents) {
  // An archive may name a link whose directory it never listed: refused, not a crash.
  std::vector<PackEntry> entries = {{"a/link", PackEntry::Type::symlink, false, 0, "../x"}};
  EXPECT_FALSE(check_symlinks(entries));
  entries = {{"x", PackEntry::Type::file, false, 0, {}},
             {"a", PackEntry::Type::dir, false, 0, {}},
             {"a/link", PackEntry::Type::symlink, false, 0, "../x"}};
  EXPECT_TRUE(check_symlinks(entries));
  entries.push_back({"a/dirlink", PackEntry::Type::symlink, false, 0, "../x/"});
  EXPECT_FALSE(check_symlinks(entries));  // x is a file, the target asks for a directory
}

TEST(PackTree, TheManifestLoaderRefusesAnExcludedEntrypoint) {
  TmpDir t;
  const fs::path p = t.path() / "p";
  make_pack(p, "demo", "1.0.0");
  write_file(p / ".soyaignore", "*.py\n");
  auto loaded = manifest::load_pack(p);
  ASSERT_FALSE(loaded.manifest);
  ASSERT_FALSE(loaded.errors.empty());
  EXPECT_NE(loaded.errors[0].format().find("main.py is excluded from the pack by .soyaignore"), std::string::npos)
      << loaded.errors[0].format();
  write_file(p / ".soyaignore", "*.py\n!main.py\n");
  EXPECT_TRUE(manifest::load_pack(p).manifest);
  auto ex = pack_excludes(p, "data/nested/deep/x.json");
  ASSERT_TRUE(ex);
  EXPECT_FALSE(*ex);
  write_file(p / ".soyaignore", "nested/\n");
  EXPECT_TRUE(pack_excludes(p, "data/nested/deep/x.json").value());  // through a parent
  EXPECT_FALSE(pack_excludes(p, "soyapack.yaml").value());
}

}  // namespace
}  // namespace soyaos
