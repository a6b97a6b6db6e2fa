// RunRecorder::call() and the writer's failure paths (moon/recorder.h; review L6): a Moon
// that is slow, refuses, or fails for a while. The Moon here is a scripted daemon: a real
// unix socket speaking the wire protocol (moon/wire.h) to the real RemoteMoon backend, whose
// replies the test holds back, refuses or fails, so each path is reached on purpose.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "moon/backend.h"
#include "moon/recorder.h"
#include "moon/wire.h"
#include "moon_test_util.h"
#include "scope/events.h"

namespace soyaos::moon {
namespace {

using json = nlohmann::ordered_json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

const scope::RunContext kCtx{"host-1", "01JDREC0000000000000000000", "rec-pack", "0.1.0",
                             "sha256:" + std::string(64, 'a')};

// A gate the daemon's handler waits at until the test opens it.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Opens a gate when it dies: declared after the recorder, so a failed assertion cannot
// leave the recorder's writer waiting for a reply the gate holds back (a hang, not a failure).
struct OpenOnExit {
  Gate& gate;
  ~OpenOnExit() { gate.open(); }
};

// A daemon that answers `hello` itself and every other request with handler(request): a
// reply object, or nullopt to close the connection without one.
class ScriptedDaemon {
 public:
  using Handler = std::function<std::optional<json>(const json& request)>;
  ScriptedDaemon(const std::filesystem::path& socket, Handler handler) : handler_(std::move(handler)) {
    listener_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(listener_.get(), 16), 0);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ScriptedDaemon() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    for (int fd : conns_) ::close(fd);
  }
  ScriptedDaemon(const ScriptedDaemon&) = delete;
  ScriptedDaemon& operator=(const ScriptedDaemon&) = delete;

  // The requests received so far (not hello), in order.
  std::vector<json> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  // Waits (up to 10 s) until a request of `op` has arrived.
  bool saw(const std::string& op) {
    for (int i = 0; i < 1000; ++i) {
      for (const auto& r : requests()) {
        if (r.value("op", "") == op) return true;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      conns_.push_back(fd);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    wire::Conn conn(fd);
    for (;;) {
      auto req = conn.receive();
      if (!req) break;
      std::optional<json> reply;
      if (req->value("op", "") == "hello") {
        reply = json{{"ok", true}, {"moon", "soyaos"}, {"v", wire::kProtocolVersion}};
      } else {
        {
          std::lock_guard lock(mu_);
          requests_.push_back(*req);
        }
        reply = handler_(*req);
      }
      if (!reply || !conn.send(*reply)) break;
    }
    ::shutdown(fd, SHUT_RDWR);
  }

  Handler handler_;
  UniqueFd listener_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conns_;  // closed once their workers are joined
  std::vector<std::thread> workers_;
  std::vector<json> requests_;
};

// SOYAOS_MOON_STORE_DEADLINE_MS for one test.
class ScopedDeadline {
 public:
  explicit ScopedDeadline(int ms) { ::setenv("SOYAOS_MOON_STORE_DEADLINE_MS", std::to_string(ms).c_str(), 1); }
  ~ScopedDeadline() { ::unsetenv("SOYAOS_MOON_STORE_DEADLINE_MS"); }
  ScopedDeadline(const ScopedDeadline&) = delete;
  ScopedDeadline& operator=(const ScopedDeadline&) = delete;
};

json ok() { return json{{"ok", true}}; }

// The ids of the events the daemon accepted in run_events requests (handler's record).
std::vector<std::string> ids_of(const std::vector<json>& batches) {
  std::vector<std::string> out;
  for (const auto& b : batches) {
    for (const auto& e : b) out.push_back(e.value("id", ""));
  }
  return out;
}

class RecorderCall : public ::testing::Test {
 protected:
  // rec.call() with a function that only notes that it ran; how long the call took to `waited`.
  static Status call_noting_run(RunRecorder& rec, bool& ran, steady_clock::duration* waited = nullptr) {
    const auto t0 = steady_clock::now();
    Status s = rec.call([&](MoonBackend&) {
      ran = true;
      return Status{};
    });
    if (waited != nullptr) *waited = steady_clock::now() - t0;
    return s;
  }
  std::unique_ptr<MoonBackend> connect() {
    auto backend = open_remote(dir_.path() / "moon.sock", std::nullopt);
    EXPECT_TRUE(backend) << backend.error().describe();
    return backend ? std::move(backend.value()) : nullptr;
  }
  testing::TmpDir dir_;
  const scope::EventFormat fmt_{kCtx};
};

// A writer stuck on a slow Moon: call() gives up at the deadline with a clear error, its
// function never runs, and nothing queued meanwhile is lost once the Moon answers again.
TEST_F(RecorderCall, AWriterThatCannotTakeTheCallInTimeIsAClearErrorAndLosesNothing) {
  ScopedDeadline deadline(300);
  Gate begin;
  std::mutex mu;
  std::vector<json> accepted;  // run_events batches, as accepted
  ScriptedDaemon daemon(dir_.path() / "moon.sock", [&](const json& req) -> std::optional<json> {
    const std::string op = req.value("op", "");
    if (op == "run_begin") begin.wait();  // the Moon is slow: the writer waits here
    if (op == "run_events") {
      std::lock_guard lock(mu);
      accepted.push_back(req["events"]);
    }
    return ok();
  });
  RunRecorder rec(connect(), kCtx);
  const OpenOnExit release{begin};
  const scope::Event started = fmt_.make("run_started", {{"host", "h"}});
  rec.push(started);
  ASSERT_TRUE(daemon.saw("run_begin"));
  bool ran = false;
  steady_clock::duration waited{};
  Status s = call_noting_run(rec, ran, &waited);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().describe().find("the Moon's writer did not take the request within 300 ms"), std::string::npos)
      << s.error().describe();
  EXPECT_FALSE(ran) << "a withdrawn call must never run";
  EXPECT_GE(waited, milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(30)) << "no hang past the deadline";
  // Events pushed while the Moon is slow wait in the queue; none is lost.
  std::vector<scope::Event> later;
  for (int i = 0; i < 3; ++i) later.push_back(fmt_.make("egress_opened", {{"connection", i}}));
  for (const auto& e : later) rec.push(e);
  begin.open();
  ASSERT_TRUE(rec.wait_durable());
  EXPECT_EQ(rec.stored(), 4U);
  // The writer is well again: a call runs, after what was queued.
  s = call_noting_run(rec, ran);
  EXPECT_TRUE(s) << s.error().describe();
  EXPECT_TRUE(ran);
  ASSERT_TRUE(rec.finish());
  std::lock_guard lock(mu);
  std::vector<std::string> want;
  for (const auto& e : later) want.push_back(json::parse(e.json())["id"]);
  EXPECT_EQ(ids_of(accepted), want);
  const auto reqs = daemon.requests();
  ASSERT_FALSE(reqs.empty());
  EXPECT_EQ(reqs.front()["event"]["id"], json::parse(started.json())["id"]);
  EXPECT_EQ(reqs.back()["op"], "run_end");
}

// A refusal (EPERM) is fatal: a call waiting for the writer returns at once with that cause
// (not at a deadline 30 s away), later calls too, and wait_durable()/finish() say how many
// events were not stored instead of claiming success.
TEST_F(RecorderCall, AFatalRefusalEndsACallAtOnceWithItsCause) {
  ScopedDeadline deadline(30'000);
  Gate begin;
  ScriptedDaemon daemon(dir_.path() / "moon.sock", [&](const json& req) -> std::optional<json> {
    if (req.value("op", "") == "run_begin") {
      begin.wait();
      return wire::error_reply(make_error("run_begin: refused by the test", EPERM));
    }
    return ok();
  });
  RunRecorder rec(connect(), kCtx);
  const OpenOnExit release{begin};
  rec.push(fmt_.make("run_started", {{"host", "h"}}));
  ASSERT_TRUE(daemon.saw("run_begin"));
  // The refusal comes while the call waits (or, on a slow machine, before it was queued:
  // the same answer).
  std::thread refuse([&] {
    std::this_thread::sleep_for(milliseconds(200));
    begin.open();
  });
  bool ran = false;
  steady_clock::duration waited{};
  Status s = call_noting_run(rec, ran, &waited);
  refuse.join();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().describe().find("the Moon's writer has stopped: run_begin: refused by the test"),
            std::string::npos)
      << s.error().describe();
  EXPECT_EQ(s.error().err, EPERM) << "the daemon's errno reaches the caller";
  EXPECT_FALSE(ran);
  EXPECT_LT(waited, std::chrono::seconds(20)) << "a fatal error must not wait for the deadline";
  s = call_noting_run(rec, ran);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().describe().find("has stopped"), std::string::npos) << s.error().describe();
  EXPECT_FALSE(ran);
  // Not stored, and said so: every event pushed is counted, none silently dropped.
  rec.push(fmt_.make("egress_opened", {{"connection", 1}}));
  Status d = rec.wait_durable();
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().describe().find("2 event(s) of run " + kCtx.run_id + " could not be stored in the Moon"),
            std::string::npos)
      << d.error().describe();
  EXPECT_NE(d.error().describe().find("refused by the test"), std::string::npos) << d.error().describe();
  EXPECT_FALSE(rec.finish());
  EXPECT_EQ(rec.stored(), 0U);
  for (const auto& r : daemon.requests()) EXPECT_EQ(r["op"], "run_begin") << "nothing after the refusal: " << r.dump();
}

// A failure worth retrying (the daemon's EAGAIN, then a dropped connection as the run's
// stream dies): the call still runs and returns its function's own result; the failed
// batch is retried in order; and a stream whose daemon went away is fatal.
TEST_F(RecorderCall, ARetryableFailureStillRunsTheCallAndKeepsTheEventsInOrder) {
  ScopedDeadline deadline(10'000);
  std::mutex mu;
  int run_events = 0;
  std::vector<json> accepted;
  bool drop = false;
  ScriptedDaemon daemon(dir_.path() / "moon.sock", [&](const json& req) -> std::optional<json> {
    if (req.value("op", "") != "run_events") return ok();
    std::lock_guard lock(mu);
    if (drop) return std::nullopt;  // the daemon goes away mid-run
    if (++run_events == 1) return wire::error_reply(make_error("run_events: busy, try again", EAGAIN));
    accepted.push_back(req["events"]);
    return ok();
  });
  RunRecorder rec(connect(), kCtx);
  rec.push(fmt_.make("run_started", {{"host", "h"}}));
  ASSERT_TRUE(rec.wait_durable());
  std::vector<scope::Event> events;
  for (int i = 0; i < 3; ++i) events.push_back(fmt_.make("egress_opened", {{"connection", i}}));
  for (const auto& e : events) rec.push(e);
  bool ran = false;
  Status s = rec.call([&](MoonBackend&) -> Status {
    ran = true;
    return make_error("the call's own failure", EIO);
  });
  ASSERT_FALSE(s);
  EXPECT_TRUE(ran);
  EXPECT_EQ(s.error().describe(), "the call's own failure: " + std::string(std::strerror(EIO)));
  ASSERT_TRUE(rec.wait_durable());
  EXPECT_EQ(rec.stored(), 4U);
  {
    std::lock_guard lock(mu);
    EXPECT_GE(run_events, 2) << "the refused batch was retried";
    std::vector<std::string> want;
    for (const auto& e : events) want.push_back(json::parse(e.json())["id"]);
    EXPECT_EQ(ids_of(accepted), want);
    drop = true;
  }
  // The run's connection drops: no fallback home, so the writer gives up (fatal), and a
  // call says why instead of waiting out its 10 s.
  rec.push(fmt_.make("egress_opened", {{"connection", 9}}));
  Status d = rec.wait_durable();
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().describe().find("went away during run " + kCtx.run_id), std::string::npos) << d.error().describe();
  const auto t0 = steady_clock::now();
  s = rec.call([&](MoonBackend&) { return Status{}; });
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().describe().find("has stopped"), std::string::npos) << s.error().describe();
  EXPECT_LT(steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_FALSE(rec.finish());
}

}  // namespace
}  // namespace soyaos::moon
