// The run's bounded violation log (supervisor/violation_log.h; docs/events.md "Bounds"):
// past the distinct bound, a new area is still its own event (issue #17).
#include <gtest/gtest.h>

#include <string>

#include "supervisor/violation_log.h"

namespace soyaos::supervisor {
namespace {

Violation fs_read(const std::string& path) {
  Violation v;
  v.surface = "fs";
  v.access = "read";
  v.resource = path;
  v.syscall = "openat";
  v.errno_name = "ENOENT";
  v.manifest_entry = "no match";
  return v;
}

TEST(ViolationLog, AreaOfAPathIsItsDirectoryAtMostTwoLevelsDeep) {
  EXPECT_EQ(ViolationLog::area_of("fs", "/root/.ssh/id_ed25519"), "/root/.ssh");
  EXPECT_EQ(ViolationLog::area_of("fs", "/tmp/decoy-5"), "/tmp");
  EXPECT_EQ(ViolationLog::area_of("fs", "/a/b/c/d/e"), "/a/b");
  EXPECT_EQ(ViolationLog::area_of("fs", "/etc"), "/");
  EXPECT_EQ(ViolationLog::area_of("exec", "/usr/bin/curl"), "/usr/bin");
  EXPECT_EQ(ViolationLog::area_of("exec", "process"), "process");
  EXPECT_EQ(ViolationLog::area_of("network", "dns:x1.decoy.evil.com"), "dns:evil.com");
  EXPECT_EQ(ViolationLog::area_of("network", "a.b.example.org:443/https"), "example.org:443/https");
  EXPECT_EQ(ViolationLog::area_of("network", "dns:localhost"), "dns:localhost");
  EXPECT_EQ(ViolationLog::area_of("time", "clock:CLOCK_REALTIME"), "clock:CLOCK_REALTIME");
}

TEST(ViolationLog, DistinctDecoysDoNotHideARealReadElsewhere) {
  ViolationLog log;
  constexpr size_t kDecoys = 20000;
  size_t emitted = 0;
  for (size_t i = 0; i < kDecoys; ++i) {
    if (log.record(fs_read("/tmp/decoy-" + std::to_string(i)), "t")) ++emitted;
  }
  // The first kMaxDistinct are events, then one for the area /tmp: the rest are counted.
  EXPECT_EQ(emitted, kMaxDistinct + 1);
  EXPECT_EQ(log.dropped(), kDecoys - kMaxDistinct - 1);
  EXPECT_TRUE(log.record(fs_read("/root/.ssh/id_ed25519"), "t")) << "the real read must be its own event";
  EXPECT_FALSE(log.record(fs_read("/root/.ssh/id_rsa"), "t")) << "same area: counted";
  EXPECT_EQ(log.total(), kDecoys + 2);
  EXPECT_EQ(log.emitted().back().resource, "/root/.ssh/id_ed25519");
}

TEST(ViolationLog, AreasAreBoundedToo) {
  ViolationLog log;
  for (size_t i = 0; i < kMaxDistinct; ++i) (void)log.record(fs_read("/d/" + std::to_string(i)), "t");
  size_t emitted = 0;
  for (size_t i = 0; i < kMaxAreas + 500; ++i) {
    if (log.record(fs_read("/area-" + std::to_string(i) + "/x/f"), "t")) ++emitted;
  }
  EXPECT_EQ(emitted, kMaxAreas);
  EXPECT_FALSE(log.record(fs_read("/root/.ssh/id"), "t")) << "past both bounds a violation is counted only";
  EXPECT_EQ(log.dropped(), 501u);
}

}  // namespace
}  // namespace soyaos::supervisor
