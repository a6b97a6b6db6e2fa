#include <gtest/gtest.h>

#include "harness.h"

namespace soyaos::testing {
namespace {

TEST(Cli, VersionPrints) {
  auto r = run_soyaos({"version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("soyaos "), std::string::npos);
}

TEST(Cli, UnknownCommandIsUsageError) {
  auto r = run_soyaos({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.err.empty());
}

}  // namespace
}  // namespace soyaos::testing
