// The inode half of write_quota (src/policy/policy.h, docs/sandbox.md "Write quota").
#include <gtest/gtest.h>

#include "policy/policy.h"

namespace soyaos::policy {
namespace {

TEST(WriteQuotaInodes, ZeroQuotaHasNoInodes) { EXPECT_EQ(write_quota_inodes(0), 0u); }

TEST(WriteQuotaInodes, OnePerKibWithAFloorAndACeiling) {
  EXPECT_EQ(write_quota_inodes(1), 8u);           // a tiny quota still holds a few files
  EXPECT_EQ(write_quota_inodes(1024), 8u);
  EXPECT_EQ(write_quota_inodes(8 * 1024), 8u);
  EXPECT_EQ(write_quota_inodes(9 * 1024), 9u);
  EXPECT_EQ(write_quota_inodes(16ULL << 20), 16384u);
  EXPECT_EQ(write_quota_inodes(1ULL << 30), 65536u);  // the default quota: capped
  EXPECT_EQ(write_quota_inodes(~0ULL), 65536u);
}

}  // namespace
}  // namespace soyaos::policy
