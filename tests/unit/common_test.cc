#include <fcntl.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "common/dl_library.h"
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

// Every function resolved at load time, by its symbol version, each missing one named
// (common/dl_library.h: libssl and libcurl are loaded so).
TEST(DlLibrary, ResolvesEveryFunctionByVersionAndNamesEachMissingOne) {
  DlLibrary libc("libc.so.6", "libc6", "GLIBC_2.2.5");
  pid_t (*get_pid)() = nullptr;
  libc.function("getpid", get_pid);
  ASSERT_NE(get_pid, nullptr);
  EXPECT_EQ(get_pid(), ::getpid());
  EXPECT_EQ(libc.error(), "");

  int (*none)() = nullptr;
  libc.function("soyaos_no_such_function", none);
  libc.function("soyaos_nor_this_one", none);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(libc.error(), "libc.so.6 lacks soyaos_no_such_function, soyaos_nor_this_one (version GLIBC_2.2.5)");

  // Present, but not at the version asked for: another ABI than our headers describe.
  DlLibrary other("libc.so.6", "libc6", "GLIBC_9.99");
  other.function("getpid", get_pid);
  EXPECT_EQ(get_pid, nullptr);
  EXPECT_EQ(other.error(), "libc.so.6 lacks getpid (version GLIBC_9.99)");

  // Unversioned lookups (libcurl's version names its TLS flavour).
  DlLibrary any("libc.so.6", "libc6", nullptr);
  any.function("getpid", get_pid);
  EXPECT_NE(get_pid, nullptr);
  EXPECT_EQ(any.error(), "");

  DlLibrary absent("libsoyaos-absent.so.7", "soyaos-absent", nullptr);
  absent.function("anything", none);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(absent.error().rfind("cannot load libsoyaos-absent.so.7 (the soyaos-absent package): ", 0), 0u)
      << absent.error();
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
