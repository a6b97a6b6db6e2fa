// The Moon daemon's wire format (moon/wire.h) over a socketpair: JSON lines, binary
// attachments, several messages in one read, limits and truncated streams.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "moon/backend.h"
#include "moon/wire.h"

namespace soyaos::moon {
namespace {

using json = nlohmann::ordered_json;

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

TEST(MoonWire, MessagesAndAttachmentsRoundTrip) {
  Pair p;
  wire::Conn tx(p.a), rx(p.b);
  std::string blob(3 << 20, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);
  std::thread writer([&] {
    ASSERT_TRUE(tx.send({{"op", "one"}, {"text", "line\nbreak é"}}));
    ASSERT_TRUE(tx.send({{"op", "two"}}, blob));
    ASSERT_TRUE(tx.send({{"op", "three"}}));
    ::shutdown(p.a, SHUT_WR);
  });
  auto m1 = rx.receive();
  ASSERT_TRUE(m1) << m1.error().describe();
  EXPECT_EQ((*m1)["op"], "one");
  EXPECT_EQ((*m1)["text"], "line\nbreak é");
  auto m2 = rx.receive();
  ASSERT_TRUE(m2);
  EXPECT_EQ((*m2)["attachment"], blob.size());
  auto got = rx.read_attachment((*m2)["attachment"].get<uint64_t>());
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, blob);
  auto m3 = rx.receive();
  ASSERT_TRUE(m3);
  EXPECT_EQ((*m3)["op"], "three");
  auto end = rx.receive();
  ASSERT_FALSE(end);
  EXPECT_EQ(end.error().message, "eof");
  writer.join();
}

// A message that arrives only after the reader has consumed everything before it (an
// attachment read to its last byte, or a whole message), and one split over two writes:
// the reader must not skip or join messages whatever the previous read left in its buffer.
// The writer waits for the reader at each step, so the arrival order is fixed.
TEST(MoonWire, AMessageArrivingAfterTheBufferWasConsumedIsRead) {
  for (const bool file_attachment : {false, true}) {
    SCOPED_TRACE(file_attachment ? "file attachment" : "string attachment");
    Pair p;
    // A reader that skipped a message would wait for it forever: time out instead.
    const timeval five_seconds{5, 0};
    ASSERT_EQ(::setsockopt(p.b, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof five_seconds), 0);
    wire::Conn tx(p.a), rx(p.b);
    int step[2];
    ASSERT_EQ(::pipe(step), 0);
    auto wait_step = [&] {
      char c;
      return ::read(step[0], &c, 1) == 1;
    };
    auto next_step = [&] { ASSERT_EQ(::write(step[1], "x", 1), 1); };
    const std::string blob(100, 'b');
    std::thread writer([&] {
      ASSERT_TRUE(tx.send({{"op", "two"}}, blob));
      ASSERT_TRUE(wait_step());  // the attachment has been read
      ASSERT_TRUE(tx.send({{"op", "three"}}));
      ASSERT_TRUE(wait_step());  // "three" has been read
      const std::string four = R"({"op":"four"})";
      ASSERT_EQ(::write(p.a, four.data(), 5), 5);  // half a message...
      ASSERT_TRUE(wait_step());
      ASSERT_EQ(::write(p.a, four.data() + 5, four.size() - 5), static_cast<ssize_t>(four.size() - 5));
      ASSERT_EQ(::write(p.a, "\n", 1), 1);  // ...then the rest
      ::shutdown(p.a, SHUT_WR);
    });
    auto m2 = rx.receive();
    ASSERT_TRUE(m2) << m2.error().describe();
    const auto size = (*m2)["attachment"].get<uint64_t>();
    if (file_attachment) {
      int dst = ::memfd_create("dst", MFD_CLOEXEC);
      EXPECT_TRUE(rx.read_attachment(size, dst));
      EXPECT_EQ(::lseek(dst, 0, SEEK_CUR), static_cast<off_t>(blob.size()));
      ::close(dst);
    } else {
      auto got = rx.read_attachment(size);
      ASSERT_TRUE(got);
      EXPECT_EQ(*got, blob);
    }
    next_step();
    auto m3 = rx.receive();
    ASSERT_TRUE(m3) << m3.error().describe();
    EXPECT_EQ((*m3)["op"], "three");
    next_step();
    std::thread release([&] {
      ::usleep(20000);  // let the reader take the first half alone
      next_step();
    });
    auto m4 = rx.receive();
    release.join();
    ASSERT_TRUE(m4) << m4.error().describe();
    EXPECT_EQ((*m4)["op"], "four");
    auto end = rx.receive();
    ASSERT_FALSE(end);
    EXPECT_EQ(end.error().message, "eof");
    writer.join();
    ::close(step[0]);
    ::close(step[1]);
  }
}

TEST(MoonWire, AttachmentIntoAFileAndFromAFile) {
  Pair p;
  wire::Conn tx(p.a), rx(p.b);
  int src = ::memfd_create("src", MFD_CLOEXEC);
  const std::string data(200000, 'z');
  ASSERT_EQ(::write(src, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::lseek(src, 0, SEEK_SET), 0);
  std::thread writer([&] { ASSERT_TRUE(tx.send_file({{"ok", true}}, src, data.size())); });
  auto h = rx.receive();
  ASSERT_TRUE(h);
  int dst = ::memfd_create("dst", MFD_CLOEXEC);
  ASSERT_TRUE(rx.read_attachment((*h)["attachment"].get<uint64_t>(), dst));
  writer.join();
  EXPECT_EQ(::lseek(dst, 0, SEEK_CUR), static_cast<off_t>(data.size()));
  ::close(src);
  ::close(dst);
}

TEST(MoonWire, GarbageAndTruncationAreErrors) {
  {
    Pair p;
    ASSERT_EQ(::write(p.a, "[1,2]\n", 6), 6);
    wire::Conn rx(p.b);
    auto r = rx.receive();
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("not a JSON object"), std::string::npos);
  }
  {
    Pair p;
    ASSERT_EQ(::write(p.a, "{\"op\":", 6), 6);
    ::shutdown(p.a, SHUT_WR);
    wire::Conn rx(p.b);
    auto r = rx.receive();
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("mid-message"), std::string::npos);
  }
  {
    Pair p;
    ASSERT_EQ(::write(p.a, "{\"attachment\":10}\nabc", 21), 21);
    ::shutdown(p.a, SHUT_WR);
    wire::Conn rx(p.b);
    auto h = rx.receive();
    ASSERT_TRUE(h);
    EXPECT_FALSE(rx.read_attachment(10));
  }
  {
    Pair p;
    wire::Conn rx(p.b);
    EXPECT_FALSE(rx.read_attachment(wire::kMaxAttachmentBytes + 1, -1));
  }
}

TEST(MoonWire, RecordsSurviveTheirJsonForm) {
  PackRecord p;
  p.id = 7;
  p.name = "demo";
  p.version = "1.2.3-rc.1";
  p.digest = "sha256:aa";
  p.tree_digest = "sha256:bb";
  p.size = 1 << 20;
  p.manifest = "soyapack: v0\n";
  const PackRecord q = pack_from_json(to_json(p));
  EXPECT_EQ(q.id, 7);
  EXPECT_EQ(q.version, p.version);
  EXPECT_EQ(q.size, p.size);
  EXPECT_EQ(q.manifest, p.manifest);

  EventQuery eq;
  eq.type = "run_finished";
  eq.after_seq = 42;
  eq.limit = 5;
  const EventQuery er = query_from_json(to_json(eq));
  EXPECT_EQ(er.type, eq.type);
  EXPECT_FALSE(er.run_id.has_value());
  EXPECT_EQ(er.after_seq, 42);
  EXPECT_EQ(er.limit, 5);

  PushReply r;
  r.outcome = PushOutcome::lint_errors;
  r.diagnostics = {"a:1:2: error: x"};
  r.findings_text = "err   x\n";
  const PushReply s = push_reply_from_json(to_json(r));
  EXPECT_EQ(s.outcome, PushOutcome::lint_errors);
  EXPECT_EQ(s.diagnostics, r.diagnostics);
  EXPECT_EQ(s.findings_text, r.findings_text);
}

}  // namespace
}  // namespace soyaos::moon
