// Landlock, applied alone in a forked child: reads outside the rules fail with EACCES, writes
// only where read_write is granted, no rename/link out of the writable tree.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "child_test.h"
#include "comet/landlock.h"
#include "common/unique_fd.h"

namespace soyaos::comet {
namespace {

using ::soyaos::testing::child_fail;
using ::soyaos::testing::run_in_child;

#define CHILD_EXPECT_ERRNO2(call, want1, want2)                                          \
  do {                                                                                   \
    errno = 0;                                                                           \
    long rc_ = static_cast<long>(call);                                                  \
    if (rc_ != -1 || (errno != (want1) && errno != (want2)))                             \
      ::soyaos::testing::child_fail(report, __LINE__, #call, rc_, errno);                \
  } while (0)

class Landlock : public ::testing::Test {
 protected:
  void SetUp() override {
    if (landlock_abi() < 1) GTEST_SKIP() << "Landlock not available in this kernel";
    char tmpl[] = "/tmp/soyaos-landlock-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    char tmpl2[] = "/tmp/soyaos-landlock-out-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl2), nullptr);
    outside_ = tmpl2;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    if (!outside_.empty()) std::filesystem::remove_all(outside_, ec);
  }
  std::string dir_;      // granted read_write
  std::string outside_;  // not granted at all
};

TEST_F(Landlock, ReportsAbi) {
  RecordProperty("landlock_abi", landlock_abi());
  EXPECT_GE(landlock_abi(), 1);
}

TEST_F(Landlock, ReadExecUsrReadWriteTmpdir) {
  const std::string file = dir_ + "/f";
  const std::string sub = dir_ + "/sub";
  const std::string out_target = outside_ + "/moved";
  const std::string outside_file = outside_ + "/src";
  UniqueFd created(::open(outside_file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(created.valid());
  std::string failure = run_in_child([&](int report) {
    Status s = apply_landlock({{"/usr", FsAccess::read_exec}, {dir_, FsAccess::read_write}});
    if (!s) child_fail(report, __LINE__, s.error().describe().c_str(), -1, s.error().err);
    // Reads outside every rule.
    CHILD_EXPECT_ERRNO(::open("/etc/hostname", O_RDONLY | O_CLOEXEC), EACCES);
    CHILD_EXPECT_ERRNO(::open("/etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC), EACCES);
    // /usr is readable, not writable.
    CHILD_EXPECT_OK(::open("/usr/bin/env", O_RDONLY | O_CLOEXEC));
    CHILD_EXPECT_ERRNO(::open("/usr/bin/env", O_WRONLY | O_CLOEXEC), EACCES);
    CHILD_EXPECT_ERRNO(::open("/usr/soyaos-landlock-test", O_WRONLY | O_CREAT | O_CLOEXEC, 0600), EACCES);
    CHILD_EXPECT_ERRNO(::mkdir("/usr/soyaos-landlock-test", 0700), EACCES);
    CHILD_EXPECT_ERRNO(::truncate("/usr/bin/env", 0), EACCES);
    // The writable directory works.
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) child_fail(report, __LINE__, "create in tmpdir", fd, errno);
    CHILD_EXPECT_OK(::write(fd, "hello", 5));
    ::close(fd);
    CHILD_EXPECT_OK(::truncate(file.c_str(), 2));
    CHILD_EXPECT_OK(::mkdir(sub.c_str(), 0700));
    CHILD_EXPECT_OK(::rename(file.c_str(), (sub + "/g").c_str()));
    CHILD_EXPECT_OK(::rename((sub + "/g").c_str(), file.c_str()));
    CHILD_EXPECT_OK(::symlink("/etc/hostname", (dir_ + "/link").c_str()));
    // ...but a symlink does not widen access.
    CHILD_EXPECT_ERRNO(::open((dir_ + "/link").c_str(), O_RDONLY | O_CLOEXEC), EACCES);
    // Nothing leaves the writable tree by rename or hard link.
    CHILD_EXPECT_ERRNO2(::rename(file.c_str(), out_target.c_str()), EXDEV, EACCES);
    CHILD_EXPECT_ERRNO2(::link(file.c_str(), out_target.c_str()), EXDEV, EACCES);
    CHILD_EXPECT_ERRNO2(::rename(file.c_str(), "/usr/soyaos-landlock-test"), EXDEV, EACCES);
    // ...nor enters it from a tree without rights (a file we own, so protected_hardlinks
    // does not answer first when running unprivileged).
    CHILD_EXPECT_ERRNO2(::link(outside_file.c_str(), (dir_ + "/in").c_str()), EXDEV, EACCES);
    CHILD_EXPECT_ERRNO2(::rename(outside_file.c_str(), (dir_ + "/in").c_str()), EXDEV, EACCES);
    // Executing from the writable tree is not granted (read_write has no execute).
    CHILD_EXPECT_OK(::chmod(file.c_str(), 0700));
    char* const argv[] = {const_cast<char*>("f"), nullptr};
    CHILD_EXPECT_ERRNO(::execve(file.c_str(), argv, nullptr), EACCES);
  });
  EXPECT_EQ(failure, "");
  EXPECT_FALSE(std::filesystem::exists(out_target));
  EXPECT_FALSE(std::filesystem::exists("/usr/soyaos-landlock-test"));
  EXPECT_TRUE(std::filesystem::exists(outside_file));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/in"));
}

TEST_F(Landlock, FileRulesAndReadOnly) {
  std::string failure = run_in_child([&](int report) {
    Status s = apply_landlock({{"/etc/hostname", FsAccess::read_write}, {dir_, FsAccess::read}});
    if (!s) child_fail(report, __LINE__, s.error().describe().c_str(), -1, s.error().err);
    CHILD_EXPECT_OK(::open("/etc/hostname", O_RDONLY | O_CLOEXEC));
    CHILD_EXPECT_ERRNO(::open("/etc/passwd", O_RDONLY | O_CLOEXEC), EACCES);
    CHILD_EXPECT_OK(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    CHILD_EXPECT_ERRNO(::open((dir_ + "/new").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600), EACCES);
  });
  EXPECT_EQ(failure, "");
}

TEST_F(Landlock, MissingPathIsAnErrorNamingIt) {
  std::string failure = run_in_child([&](int report) {
    Status s = apply_landlock({{"/usr", FsAccess::read}, {"/nonexistent/soyaos", FsAccess::read}});
    if (s.ok()) child_fail(report, __LINE__, "apply_landlock accepted a missing path", 0, 0);
    if (s.error().err != ENOENT || s.error().message.find("/nonexistent/soyaos") == std::string::npos) {
      child_fail(report, __LINE__, s.error().describe().c_str(), -1, s.error().err);
    }
    // Nothing was restricted.
    CHILD_EXPECT_OK(::open("/etc/hostname", O_RDONLY | O_CLOEXEC));
  });
  EXPECT_EQ(failure, "");
}

TEST_F(Landlock, ScopesSignalsAndAbstractSockets) {
  if (landlock_abi() < 6) GTEST_SKIP() << "Landlock ABI " << landlock_abi() << " < 6: no scopes";
  // An abstract socket bound outside the Landlock domain.
  int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "soyaos-landlock-" + std::to_string(::getpid());
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(server, 1), 0);
  const pid_t parent = ::getpid();
  std::string failure = run_in_child([&](int report) {
    Status s = apply_landlock({{"/usr", FsAccess::read}});
    if (!s) child_fail(report, __LINE__, s.error().describe().c_str(), -1, s.error().err);
    int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHILD_EXPECT_ERRNO(::connect(c, reinterpret_cast<const sockaddr*>(&addr), len), EPERM);
    CHILD_EXPECT_ERRNO(::kill(parent, 0), EPERM);
    CHILD_EXPECT_OK(::kill(::getpid(), 0));
  });
  ::close(server);
  EXPECT_EQ(failure, "");
}

}  // namespace
}  // namespace soyaos::comet
