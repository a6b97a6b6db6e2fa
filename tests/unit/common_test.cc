#include <fcntl.h>
#include <gtest/gtest.h>

#include "common/result.h"
#include "common/unique_fd.h"

namespace soyaos {
namespace {

TEST(UniqueFd, ClosesOnDestructionAndMoves) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd a(raw);
    UniqueFd b = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(Result, CarriesErrnoAndContext) {
  errno = ENOENT;
  Result<int> r = errno_error("open /nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_EQ(r.error().describe(), "open /nope: No such file or directory");
  Result<int> v = 7;
  EXPECT_EQ(*v, 7);
}

}  // namespace
}  // namespace soyaos
