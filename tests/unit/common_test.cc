#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "common/wipe.h"

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


// Key buffers (src/moon/chain.cc, src/common/minisign.cc) are wiped on every way out of the
// scope that holds them: an early error return as well as the normal one; a string or a
// vector up to its capacity, where an earlier, longer value may still be.
TEST(WipeOnExit, WipesKeyBuffersOnEveryWayOut) {
  std::array<unsigned char, 32> seed{};
  auto use = [&seed](bool fail) -> int {
    seed.fill(0xA5);
    const WipeOnExit wipe_seed(seed);
    if (fail) return 1;
    return 0;
  };
  auto zero = [](const unsigned char* p, std::size_t n) { return std::all_of(p, p + n, [](unsigned char c) { return c == 0; }); };
  EXPECT_EQ(use(true), 1);
  EXPECT_TRUE(zero(seed.data(), seed.size()));
  EXPECT_EQ(use(false), 0);
  EXPECT_TRUE(zero(seed.data(), seed.size()));

  std::string pem(200, 'K');
  pem.resize(10);  // the other 190 bytes stay in the buffer
  const char* buffer = pem.data();
  const std::size_t capacity = pem.capacity();
  { const WipeOnExit wipe_pem(pem); }
  EXPECT_TRUE(pem.empty());
  ASSERT_EQ(pem.data(), buffer);  // no reallocation: the old bytes are those wiped
  EXPECT_TRUE(zero(reinterpret_cast<const unsigned char*>(buffer), capacity));

  std::vector<unsigned char> der(48, 0x5A);
  der.resize(3);
  const unsigned char* der_buffer = der.data();
  const std::size_t der_capacity = der.capacity();
  { const WipeOnExit wipe_der(der); }
  EXPECT_TRUE(der.empty());
  ASSERT_EQ(der.data(), der_buffer);
  EXPECT_TRUE(zero(der_buffer, der_capacity));
}

}  // namespace
}  // namespace soyaos
