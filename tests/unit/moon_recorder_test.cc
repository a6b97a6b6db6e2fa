// RunRecorder::call (issue #16: a run's other uses of the Moon share the recorder's
// connection): the function runs on the writer thread, after what was queued before it is
// stored, its status comes back to the caller, and a stopped recorder refuses.
#include <gtest/gtest.h>

#include <cerrno>
#include <thread>

#include "moon/backend.h"
#include "moon/recorder.h"
#include "moon/store.h"
#include "moon_test_util.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using testing::TmpDir;

TEST(MoonRecorder, CallRunsOnTheWriterAfterWhatIsQueuedAndReturnsItsStatus) {
  TmpDir home;
  auto moon = open_embedded(home.path());
  ASSERT_TRUE(moon) << moon.error().describe();
  const scope::RunContext ctx{"host", scope::new_run_id(), "recorder-probe", "0.1.0",
                              "sha256:" + std::string(64, 'a')};
  RunRecorder rec(std::move(moon.value()), ctx);
  const scope::EventFormat format(ctx);
  rec.push(format.make("run_started", {{"probe", true}}));

  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  size_t stored_before = 0;
  Status s = rec.call([&](MoonBackend& m) -> Status {
    ran_on = std::this_thread::get_id();
    EventQuery q;
    q.run_id = ctx.run_id;
    auto events = m.query_events(q);
    if (!events) return events.error();
    stored_before = events->size();
    auto digest = m.keep_manifest("soyapack: v0\n");
    if (!digest) return digest.error();
    return {};
  });
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_NE(ran_on, caller);
  EXPECT_EQ(stored_before, 1u) << "run_started is stored before the call runs";

  Status failed = rec.call([](MoonBackend&) -> Status { return make_error("refused here", EIO); });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "refused here");
  EXPECT_EQ(failed.error().err, EIO);

  rec.push(format.make("run_finished", {{"exit_code", 0}}));
  Status finished = rec.finish();
  ASSERT_TRUE(finished) << finished.error().describe();
  EXPECT_EQ(rec.stored(), 2u);
  Status after = rec.call([](MoonBackend&) -> Status { return {}; });
  ASSERT_FALSE(after);
  EXPECT_NE(after.error().message.find("writer has stopped"), std::string::npos) << after.error().message;
}

}  // namespace
}  // namespace soyaos::moon
