// load_pack: reading soyapack.yaml from a directory and the filesystem checks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "manifest/manifest.h"
#include "manifest_test_util.h"

namespace soyaos::manifest::testing {
namespace {

namespace fs = std::filesystem;

class Pack {
 public:
  Pack() {
    std::string tmpl = (fs::temp_directory_path() / "soyaos-manifest-XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    root_ = tmpl;
    dir_ = root_ / "pack";
    fs::create_directory(dir_);
  }
  ~Pack() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  Pack(const Pack&) = delete;
  Pack& operator=(const Pack&) = delete;

  [[nodiscard]] const fs::path& dir() const { return dir_; }
  [[nodiscard]] const fs::path& root() const { return root_; }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel, std::ios::binary) << text;
  }
  // A valid pack: kValid plus main.py.
  void valid() const {
    write("soyapack.yaml", kValid);
    write("main.py", "print('hi')\n");
  }

 private:
  fs::path root_, dir_;
};

Diagnostic only_error(const LoadResult& r) {
  EXPECT_FALSE(r.manifest);
  EXPECT_EQ(r.errors.size(), 1u) << dump(r);
  return r.errors.empty() ? Diagnostic{} : r.errors[0];
}

TEST(ManifestLoad, ValidPack) {
  Pack p;
  p.valid();
  auto r = load_pack(p.dir());
  ASSERT_TRUE(IsValid(r));
  EXPECT_EQ(r.manifest->pack_dir, p.dir());
  EXPECT_EQ(r.manifest->file, (p.dir() / "soyapack.yaml").string());
  // The bytes parsed, which a run records (E5) instead of reading the file a second time.
  std::ifstream in(p.dir() / "soyapack.yaml", std::ios::binary);
  const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(r.text, on_disk);
  std::ofstream(p.dir() / "soyapack.yaml", std::ios::app) << "# changed after the parse\n";
  EXPECT_EQ(r.text, on_disk);
}

TEST(ManifestLoad, DisplayNameIsThePathAsGiven) {
  Pack p;
  p.write("soyapack.yaml", with("name: demo", "name: Demo"));
  p.write("main.py", "");
  const fs::path old = fs::current_path();
  fs::current_path(p.root());
  auto r = load_pack("pack");
  fs::current_path(old);
  ASSERT_FALSE(r.manifest);
  EXPECT_EQ(r.errors[0].format(), "pack/soyapack.yaml:2:7: error: name: \"Demo\" must match ^[a-z][a-z0-9-]{0,62}$");
}

TEST(ManifestLoad, MissingDirectory) {
  Pack p;
  const Diagnostic d = only_error(load_pack(p.dir() / "nope"));
  EXPECT_EQ(d.format(), (p.dir() / "nope").string() + ": error: pack directory does not exist");
}

TEST(ManifestLoad, NotADirectory) {
  Pack p;
  p.write("file", "x");
  EXPECT_NE(only_error(load_pack(p.dir() / "file")).message.find("not a directory"), std::string::npos);
}

TEST(ManifestLoad, MissingManifest) {
  Pack p;
  const Diagnostic d = only_error(load_pack(p.dir()));
  EXPECT_EQ(d.file, (p.dir() / "soyapack.yaml").string());
  EXPECT_NE(d.message.find("no soyapack.yaml"), std::string::npos);
}

TEST(ManifestLoad, ManifestSymlinkOutsideThePackIsRefused) {
  Pack p;
  p.write("main.py", "");
  std::ofstream(p.root() / "outside.yaml") << kValid;
  fs::create_symlink(p.root() / "outside.yaml", p.dir() / "soyapack.yaml");
  EXPECT_NE(only_error(load_pack(p.dir())).message.find("symlink leading outside the pack"), std::string::npos);
  // Relative symlink escaping with "..".
  fs::remove(p.dir() / "soyapack.yaml");
  fs::create_symlink("../outside.yaml", p.dir() / "soyapack.yaml");
  EXPECT_NE(only_error(load_pack(p.dir())).message.find("outside the pack"), std::string::npos);
}

TEST(ManifestLoad, ManifestSymlinkInsideThePackIsFine) {
  Pack p;
  p.write("main.py", "");
  p.write("conf/real.yaml", kValid);
  fs::create_symlink("conf/real.yaml", p.dir() / "soyapack.yaml");
  EXPECT_TRUE(IsValid(load_pack(p.dir())));
}

TEST(ManifestLoad, DanglingManifestSymlink) {
  Pack p;
  fs::create_symlink("nowhere.yaml", p.dir() / "soyapack.yaml");
  EXPECT_NE(only_error(load_pack(p.dir())).message.find("symlink"), std::string::npos);
}

TEST(ManifestLoad, ManifestThatIsAFifoDoesNotHang) {
  Pack p;
  ASSERT_EQ(::mkfifo((p.dir() / "soyapack.yaml").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(only_error(load_pack(p.dir())).message.find("not a regular file"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(ManifestLoad, ManifestThatIsADirectory) {
  Pack p;
  fs::create_directory(p.dir() / "soyapack.yaml");
  EXPECT_NE(only_error(load_pack(p.dir())).message.find("not a regular file"), std::string::npos);
}

TEST(ManifestLoad, OversizedManifestIsRefusedBeforeReading) {
  Pack p;
  p.valid();
  fs::resize_file(p.dir() / "soyapack.yaml", 64ULL << 20);  // sparse 64 MiB
  EXPECT_NE(only_error(load_pack(p.dir())).message.find("larger than 4194304 bytes"), std::string::npos);
}

TEST(ManifestLoad, EntrypointMustExist) {
  Pack p;
  p.write("soyapack.yaml", kValid);
  EXPECT_TRUE(HasError(load_pack(p.dir()), "agent.entrypoint", 6, 15, "main.py does not exist in the pack"));
}

TEST(ManifestLoad, EntrypointMustBeAFile) {
  Pack p;
  p.write("soyapack.yaml", kValid);
  fs::create_directory(p.dir() / "main.py");
  EXPECT_TRUE(HasError(load_pack(p.dir()), "agent.entrypoint", 6, 15, "is a directory"));
}

TEST(ManifestLoad, EntrypointSymlinkEscapingThePackIsRefused) {
  Pack p;
  p.write("soyapack.yaml", kValid);
  std::ofstream(p.root() / "evil.py") << "x";
  fs::create_symlink("../evil.py", p.dir() / "main.py");
  EXPECT_TRUE(HasError(load_pack(p.dir()), "agent.entrypoint", 6, 15, "outside the pack"));
  // Through a symlinked directory.
  fs::remove(p.dir() / "main.py");
  fs::create_directory(p.root() / "elsewhere");
  std::ofstream(p.root() / "elsewhere" / "main.py") << "x";
  fs::create_directory_symlink(p.root() / "elsewhere", p.dir() / "src");
  p.write("soyapack.yaml", with("entrypoint: main.py", "entrypoint: src/main.py"));
  EXPECT_TRUE(HasError(load_pack(p.dir()), "agent.entrypoint", 6, 15, "outside the pack"));
}

TEST(ManifestLoad, EntrypointSymlinkInsideThePackIsFine) {
  Pack p;
  p.write("soyapack.yaml", kValid);
  p.write("src/app.py", "x");
  fs::create_symlink("src/app.py", p.dir() / "main.py");
  EXPECT_TRUE(IsValid(load_pack(p.dir())));
}

TEST(ManifestLoad, ExampleInputsMustExistInsideThePack) {
  Pack p;
  p.valid();
  p.write("soyapack.yaml", kValid + "examples:\n  - name: a\n    input: examples/in.json\n  - name: b\n    input: data\n");
  EXPECT_TRUE(HasError(load_pack(p.dir()), "examples[0].input", 22, 12, "does not exist"));
  p.write("examples/in.json", "{}");
  fs::create_directory(p.dir() / "data");  // a directory input is fine
  EXPECT_TRUE(IsValid(load_pack(p.dir())));
  fs::remove(p.dir() / "data");
  fs::create_directory_symlink("/etc", p.dir() / "data");
  EXPECT_TRUE(HasError(load_pack(p.dir()), "examples[1].input", 24, 12, "outside the pack"));
}

TEST(ManifestLoad, ParseErrorsAreReportedBeforeFilesystemChecks) {
  Pack p;
  p.write("soyapack.yaml", with("port: 443", "port: 0"));  // and no main.py
  auto r = load_pack(p.dir());
  ASSERT_EQ(r.errors.size(), 1u) << dump(r);
  EXPECT_EQ(r.errors[0].key_path, "capabilities.egress[0].port");
}

TEST(ManifestLoad, ShippedExamplesAreValid) {
  for (const char* name : {"hello-report", "issue-summarizer", "slack-notifier"}) {
    auto r = load_pack(fs::path(SOYAOS_SOURCE_DIR) / "examples" / name);
    EXPECT_TRUE(IsValid(r)) << name;
  }
}

}  // namespace
}  // namespace soyaos::manifest::testing
