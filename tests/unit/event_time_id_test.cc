// An event's time and id (scope/events.h, scope/rfc3339.h; issue #16): the hand-made
// RFC 3339 formatter writes what gmtime_r + strftime wrote, and the pooled random ids stay
// UUID v4 text, unique, and are not repeated by a forked child.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <random>
#include <regex>
#include <set>
#include <string>

#include "scope/events.h"
#include "scope/rfc3339.h"

namespace soyaos::scope {
namespace {

// The formatter it replaced.
std::string with_strftime(int64_t unix_us) {
  int64_t secs = unix_us / 1'000'000;
  int64_t micros = unix_us % 1'000'000;
  if (micros < 0) {
    micros += 1'000'000;
    secs -= 1;
  }
  const auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  const size_t len = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  (void)std::snprintf(buf + len, sizeof buf - len, ".%06lldZ", static_cast<long long>(micros));
  return buf;
}

TEST(EventTime, FormatterWritesWhatStrftimeWrote) {
  constexpr int64_t kUs = 1'000'000;
  constexpr int64_t kDay = 86'400 * kUs;
  // Edges: the epoch, leap days (2000 divisible by 400, 2100 not a leap year, 2024), the
  // last microsecond of a minute, of a day, of a year, of 9999, before 1970, year 0.
  const int64_t edges[] = {0,
                           -1,
                           kUs - 1,
                           59 * kUs + 999'999,
                           951'782'400 * kUs,               // 2000-02-29T00:00:00Z
                           951'868'799 * kUs + 999'999,     // 2000-02-29T23:59:59.999999Z
                           1'709'164'800 * kUs,             // 2024-02-29
                           4'107'456'000 * kUs,             // 2100-02-28
                           4'107'542'400 * kUs,             // 2100-03-01
                           1'735'689'599 * kUs + 999'999,   // 2024-12-31T23:59:59.999999Z
                           253'402'300'799 * kUs + 999'999,  // 9999-12-31T23:59:59.999999Z
                           -62'167'219'200 * kUs,           // 0000-01-01 (strftime: "0-01-01")
                           -30'610'224'001 * kUs,           // 0999-12-31T23:59:59Z (strftime: "999-")
                           -30'610'224'000 * kUs,           // 1000-01-01
                           -86'400 * kUs * 365 * 100 + 12'345,
                           1'796'000'000 * kUs + 123'456};
  for (const int64_t t : edges) EXPECT_EQ(format_rfc3339(t), with_strftime(t)) << t;
  // Every day from 1900 to 2200 at a second 59 and a random microsecond, and random instants.
  std::mt19937_64 rng(16);
  for (int64_t day = -25'567; day < 84'000; ++day) {
    const int64_t t = day * kDay + static_cast<int64_t>(rng() % 86'400) / 60 * 60 * kUs + 59 * kUs +
                      static_cast<int64_t>(rng() % 1'000'000);
    ASSERT_EQ(format_rfc3339(t), with_strftime(t)) << t;
  }
  for (int i = 0; i < 20'000; ++i) {
    const auto t = static_cast<int64_t>(rng() % (253'402'300'800ULL * 1'000'000ULL));
    ASSERT_EQ(format_rfc3339(t), with_strftime(t)) << t;
  }
  // Outside 0..9999: strftime's own text.
  EXPECT_EQ(format_rfc3339(253'402'300'800 * kUs), with_strftime(253'402'300'800 * kUs));
}

TEST(EventTime, NowIsTheClockInTheFormat) {
  const std::regex shape(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)");
  const std::time_t before = std::time(nullptr);
  const std::string now = now_rfc3339();
  const std::time_t after = std::time(nullptr);
  ASSERT_TRUE(std::regex_match(now, shape)) << now;
  const std::string lo = with_strftime(static_cast<int64_t>(before) * 1'000'000);
  const std::string hi = with_strftime((static_cast<int64_t>(after) + 1) * 1'000'000);
  EXPECT_LE(lo, now);
  EXPECT_LT(now, hi);
}

TEST(EventId, IdsAreUuidV4AndUniqueAcrossPoolRefills) {
  const std::regex uuid4("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  std::set<std::string> seen;
  for (int i = 0; i < 3'000; ++i) {  // several refills of the pool, the first small ones included
    const std::string id = new_event_id();
    ASSERT_TRUE(std::regex_match(id, uuid4)) << id;
    ASSERT_TRUE(seen.insert(id).second) << "repeated id " << id;
  }
}

// The pool's page is wiped in a forked child: the child's next ids are not the parent's.
TEST(EventId, ForkedChildDoesNotRepeatTheParentsIds) {
  (void)new_event_id();  // the pool is filled, with ids left in it
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string ids;
    for (int i = 0; i < 4; ++i) ids += new_event_id() + "\n";
    const bool ok = ::write(fds[1], ids.data(), ids.size()) == static_cast<ssize_t>(ids.size());
    ::_exit(ok ? 0 : 1);
  }
  ::close(fds[1]);
  std::set<std::string> parent;
  for (int i = 0; i < 4; ++i) parent.insert(new_event_id());
  std::string got;
  char buf[512];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(got.size(), 4U * 37U);
  for (size_t at = 0; at < got.size(); at += 37) {
    const std::string id = got.substr(at, 36);
    EXPECT_EQ(parent.count(id), 0U) << "the child repeated the parent's id " << id;
  }
}

}  // namespace
}  // namespace soyaos::scope
