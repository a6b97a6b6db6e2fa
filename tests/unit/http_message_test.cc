// HTTP/1.1 messages after the request head (network/http_message.h): response heads, body
// framing (chunked edge cases included) and the request traits the exchange refuses on.
#include "network/http_message.h"

#include <gtest/gtest.h>

namespace soyaos::network {
namespace {

std::span<const uint8_t> bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

HttpHead request(std::string_view text) {
  auto p = parse_http_head(bytes(text));
  EXPECT_EQ(p.status, ParseStatus::complete) << p.reason;
  return p.head;
}

HttpResponseParse response(std::string_view text) { return parse_http_response_head(bytes(text)); }

// Feeds `body` to a framer one split at a time; returns consumed bytes, or -1 on an error.
long frame(BodyFraming f, std::string_view body, size_t step = 1, bool* done = nullptr, std::string* error = nullptr) {
  BodyFramer framer(f);
  size_t total = 0;
  while (total < body.size() && !framer.done()) {
    const size_t n = std::min(step, body.size() - total);
    auto s = framer.feed(bytes(body.substr(total, n)));
    total += s.consumed;
    if (!s.error.empty()) {
      if (error) *error = s.error;
      return -1;
    }
    if (s.consumed < n && !s.done) return -2;  // a framer must take all or finish
  }
  if (done) *done = framer.done();
  return static_cast<long>(total);
}

TEST(HttpRequestTraits, Framing) {
  auto t = request_traits(request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"));
  EXPECT_EQ(t.refusal, "");
  EXPECT_EQ(t.traits.body.kind, BodyKind::length);
  EXPECT_EQ(t.traits.body.length, 5u);
  t = request_traits(request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_EQ(t.traits.body.kind, BodyKind::chunked);
  t = request_traits(request("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_EQ(t.traits.body.kind, BodyKind::none);
  t = request_traits(request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_EQ(t.traits.body.kind, BodyKind::none);
}

TEST(HttpRequestTraits, TransferEncodingMustBeExactlyChunked) {
  EXPECT_NE(request_traits(request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")).refusal, "");
  EXPECT_NE(request_traits(request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n")).refusal,
            "");
  EXPECT_EQ(request_traits(request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n")).refusal, "");
}

TEST(HttpRequestHead, SmugglingShapesAreInvalid) {
  const char* bad[] = {
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nX: y\r\n chunked\r\n\r\n",  // obs-fold
      "POST / HTTP/1.1\r\nHost: a\nContent-Length: 5\r\n\r\n",   // bare LF
      "POST / HTTP/1.1\r\nHost: a\rContent-Length: 5\r\n\r\n",   // bare CR
      "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
      "PO(ST / HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
  };
  for (const char* text : bad) EXPECT_EQ(parse_http_head(bytes(text)).status, ParseStatus::invalid) << text;
}

TEST(HttpRequestTraits, OnlyWebsocketUpgradesOnGet) {
  auto t = request_traits(request(
      "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n"));
  EXPECT_EQ(t.refusal, "");
  EXPECT_TRUE(t.traits.upgrade);
  EXPECT_NE(request_traits(request("POST /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"))
                .refusal,
            "");
  EXPECT_NE(request_traits(request("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: TLS/1.2\r\n\r\n")).refusal,
            "");
  EXPECT_NE(request_traits(request("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket, foo\r\n\r\n")).refusal, "");
}

TEST(HttpRequestTraits, ExpectAndConnection) {
  auto t = request_traits(request("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  EXPECT_TRUE(t.traits.expect_continue);
  EXPECT_FALSE(t.traits.close);
  EXPECT_TRUE(request_traits(request("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")).traits.close);
  EXPECT_TRUE(request_traits(request("GET / HTTP/1.0\r\nHost: a\r\n\r\n")).traits.close);
  EXPECT_FALSE(request_traits(request("GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n")).traits.close);
}

TEST(HttpResponseHead, ParsesStatusFieldsAndFraming) {
  auto p = response("HTTP/1.1 200 OK\r\nContent-Length: 12\r\nX-A:  b \r\n\r\nbody");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.status, 200);
  EXPECT_EQ(p.head.reason, "OK");
  EXPECT_EQ(p.head.head_size, 49u);
  EXPECT_EQ(p.head.fields[1].second, "b");
  EXPECT_EQ(response_body("GET", p.head).kind, BodyKind::length);
  EXPECT_EQ(response_body("GET", p.head).length, 12u);
  EXPECT_EQ(response_body("HEAD", p.head).kind, BodyKind::none);

  p = response("HTTP/1.1 204\r\n\r\n");  // no reason phrase (and no space) is accepted
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(response_body("GET", p.head).kind, BodyKind::none);
  p = response("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n");
  EXPECT_EQ(response_body("GET", p.head).kind, BodyKind::none);
  p = response("HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(response_body("POST", p.head).kind, BodyKind::none);
  p = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(response_body("GET", p.head).kind, BodyKind::chunked);
  p = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
  EXPECT_EQ(response_body("GET", p.head).kind, BodyKind::until_close);
  p = response("HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n");
  EXPECT_EQ(response_body("GET", p.head).kind, BodyKind::until_close);
  p = response("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n");  // same value twice: RFC allows
  ASSERT_EQ(p.status, ParseStatus::complete);
  EXPECT_EQ(response_body("GET", p.head).length, 7u);
}

TEST(HttpResponseHead, IncompleteAndInvalid) {
  EXPECT_EQ(response("HTTP/1.1 200 OK\r\nContent-Le").status, ParseStatus::need_more);
  EXPECT_EQ(response("HTT").status, ParseStatus::need_more);
  EXPECT_EQ(response("").status, ParseStatus::need_more);
  const char* bad[] = {
      "SSH-2.0-OpenSSH\r\n\r\n",
      "HTTP/1.1 20 OK\r\n\r\n",
      "HTTP/1.1 200OK\r\n\r\n",
      "HTTP/2 200\r\n\r\n",
      "HTTP/1.1 200 OK\nX: y\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX: y\r\n folded\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX: a\x01\r\n\r\n",
  };
  for (const char* text : bad) EXPECT_EQ(response(text).status, ParseStatus::invalid) << text;
  EXPECT_EQ(parse_http_response_head(bytes(std::string(20000, 'H'))).status, ParseStatus::invalid);
}

TEST(HttpResponseHead, WebsocketUpgrade) {
  auto p = response("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete);
  EXPECT_TRUE(response_is_upgrade(p.head));
  p = response("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
  EXPECT_FALSE(response_is_upgrade(p.head));
}

TEST(BodyFramer, ContentLengthStopsAtItsEnd) {
  bool done = false;
  EXPECT_EQ(frame({BodyKind::length, 5}, "helloGET / HTTP/1.1", 1, &done), 5);
  EXPECT_TRUE(done);
  EXPECT_EQ(frame({BodyKind::length, 5}, "helloGET / HTTP/1.1", 100, &done), 5);
  EXPECT_EQ(frame({BodyKind::length, 5}, "hel", 100, &done), 3);
  EXPECT_FALSE(done);
  EXPECT_TRUE(BodyFramer({BodyKind::none, 0}).done());
}

TEST(BodyFramer, ChunkedWithExtensionsAndTrailers) {
  const std::string body = "5;name=\"v\"\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-Checksum: abc\r\n\r\n";
  for (size_t step : {size_t{1}, size_t{3}, size_t{1000}}) {
    bool done = false;
    EXPECT_EQ(frame({BodyKind::chunked, 0}, body + "NEXT", step, &done), static_cast<long>(body.size())) << step;
    EXPECT_TRUE(done);
  }
  bool done = false;
  EXPECT_EQ(frame({BodyKind::chunked, 0}, "0\r\n\r\n", 1, &done), 5);
  EXPECT_TRUE(done);
  EXPECT_EQ(frame({BodyKind::chunked, 0}, "000\r\n\r\n", 1, &done), 7);  // leading zeros are hex digits
  EXPECT_EQ(frame({BodyKind::chunked, 0}, "5 ;x\r\nhello\r\n0\r\n\r\n", 1, &done), 18);  // BWS before `;`
  EXPECT_EQ(frame({BodyKind::chunked, 0}, "5\r\nhel", 1, &done), 6);
  EXPECT_FALSE(done);
}

TEST(BodyFramer, ChunkedSmugglingShapesAreErrors) {
  const char* bad[] = {
      "5\nhello\r\n0\r\n\r\n",           // bare LF after the size
      "5\r\nhello\n0\r\n\r\n",           // bare LF after the data
      "5\r\nhelloX\r\n0\r\n\r\n",        // data longer than its size
      "0x5\r\nhello\r\n0\r\n\r\n",       // not hex
      " 5\r\nhello\r\n0\r\n\r\n",        // leading space
      "-5\r\nhello\r\n0\r\n\r\n",
      "\r\n",                            // empty size
      "5x\r\nhello\r\n0\r\n\r\n",        // junk after the size
      "11111111111111111\r\n",           // 17 hex digits: overflow
      "5\rhello\r\n0\r\n\r\n",           // bare CR
      "0\r\nX: y\nZ\r\n\r\n",            // bare LF in a trailer
      "0\r\n folded\r\n\r\n",            // obs-fold in a trailer
      "0\r\nno colon\r\n\r\n",
      "5;a\x01\r\nhello\r\n0\r\n\r\n",   // control byte in an extension
  };
  for (const char* b : bad) {
    std::string error;
    EXPECT_EQ(frame({BodyKind::chunked, 0}, b, 1, nullptr, &error), -1) << b;
    EXPECT_NE(error, "") << b;
  }
  std::string error;
  EXPECT_EQ(frame({BodyKind::chunked, 0}, std::string(5000, '1'), 100, nullptr, &error), -1);
  EXPECT_EQ(frame({BodyKind::chunked, 0}, "0\r\n" + std::string(17000, 'x'), 100, nullptr, &error), -1);
}

TEST(BodyFramer, UntilCloseTakesEverythingAndEndsAtEof) {
  BodyFramer f({BodyKind::until_close, 0});
  auto s = f.feed(bytes("data: a\n\ndata: b\n\n"));
  EXPECT_EQ(s.consumed, 18u);
  EXPECT_FALSE(s.done);
  EXPECT_TRUE(f.eof_ok());
  BodyFramer g({BodyKind::length, 10});
  (void)g.feed(bytes("abc"));
  EXPECT_FALSE(g.eof_ok());
}

}  // namespace
}  // namespace soyaos::network
