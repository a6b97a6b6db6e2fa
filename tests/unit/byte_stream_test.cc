// FdStream (supervisor/byte_stream.h) over a real socketpair: the non-blocking contract the
// HTTP exchange relies on (would_block with the poll events to wait for, eof, half-close,
// EPIPE instead of SIGPIPE).
#include "supervisor/byte_stream.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <array>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "supervisor/http_exchange.h"  // compiles on its own (the interface other helpers build against)

namespace soyaos::supervisor {
namespace {

struct Pair {
  UniqueFd a, b;
};

Pair socket_pair() {
  std::array<int, 2> sv{-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv.data()), 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

std::span<const uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(FdStream, ReadsWhatWasWrittenAndWaitsForPollinWhenEmpty) {
  auto [a, b] = socket_pair();
  FdStream left(std::move(a));
  FdStream right(std::move(b));
  std::array<uint8_t, 16> buf{};
  IoResult r = right.read(buf);
  EXPECT_EQ(r.status, IoStatus::would_block);
  EXPECT_EQ(right.wanted_events(), POLLIN);
  EXPECT_FALSE(right.has_buffered_input());

  r = left.write(bytes("hello"));
  ASSERT_EQ(r.status, IoStatus::ok);
  EXPECT_EQ(r.n, 5u);
  r = right.read(buf);
  ASSERT_EQ(r.status, IoStatus::ok);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), r.n), "hello");
}

TEST(FdStream, ShutdownWriteIsEofForThePeerWhoCanStillAnswer) {
  auto [a, b] = socket_pair();
  FdStream left(std::move(a));
  FdStream right(std::move(b));
  ASSERT_EQ(left.shutdown_write().status, IoStatus::ok);
  std::array<uint8_t, 16> buf{};
  EXPECT_EQ(right.read(buf).status, IoStatus::eof);
  ASSERT_EQ(right.write(bytes("late")).status, IoStatus::ok);  // the other direction stays open
  const IoResult r = left.read(buf);
  ASSERT_EQ(r.status, IoStatus::ok);
  EXPECT_EQ(r.n, 4u);
}

TEST(FdStream, FullSocketIsWouldBlockWantingPollout) {
  auto [a, b] = socket_pair();
  FdStream left(std::move(a));
  const std::vector<uint8_t> chunk(65536, 'x');
  IoResult r;
  for (int i = 0; i < 1000; ++i) {
    r = left.write(chunk);
    if (r.status != IoStatus::ok) break;
  }
  EXPECT_EQ(r.status, IoStatus::would_block);
  EXPECT_EQ(left.wanted_events(), POLLOUT);
}

TEST(FdStream, WriteToAClosedPeerIsEpipeNotSigpipe) {
  auto [a, b] = socket_pair();
  FdStream left(std::move(a));
  b.reset();
  const IoResult r = left.write(bytes("x"));
  EXPECT_EQ(r.status, IoStatus::error);
  EXPECT_EQ(r.error, EPIPE);
}

TEST(FdStream, EmptyReadBufferIsAnError) {
  auto [a, b] = socket_pair();
  FdStream left(std::move(a));
  EXPECT_EQ(left.read({}).status, IoStatus::error);
}

}  // namespace
}  // namespace soyaos::supervisor
