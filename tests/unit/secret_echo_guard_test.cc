// SecretEchoGuard (supervisor/secret_echo_guard.h): a secret's value never leaves the guard
// unmasked, whatever the split of the bytes across feeds and chunks; bytes that cannot start
// a value are never held back.
#include "supervisor/secret_echo_guard.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "network/http_message.h"

namespace soyaos::supervisor {
namespace {

constexpr std::string_view kValue = "sk-live-ECHO-0123456789abcdef";
const std::string kMasked(kValue.size(), SecretEchoGuard::kMask);

SecretEchoGuard guard_for(std::string_view value = kValue) { return SecretEchoGuard({{"API_KEY", value}}); }

TEST(SecretEchoGuard, MasksTheValueAtEverySplitPointAcrossTwoFeeds) {
  const std::string text = "{\"error\":\"The model '" + std::string(kValue) + "' does not exist\"}";
  const std::string want = "{\"error\":\"The model '" + kMasked + "' does not exist\"}";
  for (size_t split = 0; split <= text.size(); ++split) {
    SecretEchoGuard g = guard_for();
    std::string out;
    const std::string_view first = g.feed_data(std::string_view(text).substr(0, split), out);
    // Whatever went out after the first part never holds the whole value.
    EXPECT_EQ(out.find(kValue), std::string::npos) << split;
    const std::string_view second = g.feed_data(std::string_view(text).substr(split), out);
    g.release(out);
    EXPECT_EQ(out, want) << "split at " << split;
    EXPECT_EQ(std::string(first) + std::string(second), "API_KEY") << split;  // reported exactly once
  }
}

TEST(SecretEchoGuard, MasksTheValueFedOneByteAtATime) {
  const std::string text = "x-request-id: " + std::string(kValue) + "\r\n";
  SecretEchoGuard g = guard_for();
  std::string out;
  int reports = 0;
  for (char c : text) reports += g.feed_data(std::string_view(&c, 1), out).empty() ? 0 : 1;
  g.release(out);
  EXPECT_EQ(out, "x-request-id: " + kMasked + "\r\n");
  EXPECT_EQ(reports, 1);
}

// What is held back depends on how many data bytes came, never on what they are: otherwise an
// agent whose bytes a host echoes could tell, by the delay, whether its guess begins the value
// (review R2 G1). Every prefix of the value, and the same number of other bytes, leave exactly
// the same amount held and the same amount out.
TEST(SecretEchoGuard, HoldsTheSameAmountWhateverTheBytes) {
  for (size_t n = 1; n < kValue.size(); ++n) {
    for (const std::string& tail : {std::string(kValue.substr(0, n)), std::string(n, 'z')}) {
      SecretEchoGuard g = guard_for();
      std::string out;
      (void)g.feed_data("data: " + tail, out);
      const size_t held = std::min(kValue.size() - 1, 6 + n);
      EXPECT_EQ(g.held(), held) << n << " " << tail;
      EXPECT_EQ(out.size(), 6 + n - held) << n << " " << tail;
      g.release(out);
      EXPECT_EQ(out, "data: " + tail);
      EXPECT_EQ(g.held(), 0U);
    }
  }
}

TEST(SecretEchoGuard, ATailHeldByOneFeedGoesOutWithTheNext) {
  SecretEchoGuard g = guard_for();
  std::string out;
  const std::string event = "data: {\"delta\":\"hello, this is a long enough event\"}\n\n";
  (void)g.feed_data(event, out);
  EXPECT_EQ(out, event.substr(0, event.size() - (kValue.size() - 1)));
  (void)g.feed_data(event, out);
  EXPECT_EQ(out, event + event.substr(0, event.size() - (kValue.size() - 1)));
  g.release(out);
  EXPECT_EQ(out, event + event);
}

TEST(SecretEchoGuard, ReleaseDeliversAPartialMatchAndStillMasksTheRestOfTheValue) {
  SecretEchoGuard g = guard_for();
  std::string out;
  (void)g.feed_data("end: " + std::string(kValue.substr(0, 10)), out);
  g.release(out);  // the message ended: the agent is owed its bytes
  EXPECT_EQ(out, "end: " + std::string(kValue.substr(0, 10)));
  out.clear();
  // The next message completes the value: what had not gone out yet is masked.
  EXPECT_EQ(g.feed_data(std::string(kValue.substr(10)) + " tail", out), "API_KEY");
  g.release(out);
  EXPECT_EQ(out, std::string(kValue.size() - 10, '*') + " tail");
}

TEST(SecretEchoGuard, OverlappingAndRepeatedValues) {
  SecretEchoGuard g = guard_for("aab");
  std::string out;
  EXPECT_EQ(g.feed_data("aaab aabaab", out), "API_KEY");
  g.release(out);
  EXPECT_EQ(out, "a*** ******");
}

TEST(SecretEchoGuard, EverySecretIsMatchedAndNamed) {
  SecretEchoGuard g({{"FIRST", "first-secret-value"}, {"SECOND", "second-secret-value"}, {"EMPTY", ""}});
  std::string out;
  EXPECT_EQ(g.feed_data("a second-secret-value b", out), "SECOND");
  EXPECT_EQ(g.feed_data("c first-secret-value d", out), "FIRST");
  g.release(out);
  EXPECT_EQ(out, "a ******************* bc ****************** d");
}

// Against a naive reference (mask every occurrence, overlapping ones too) on random text of a
// small alphabet, where partial matches, restarts and overlaps are everywhere, cut into random
// feeds.
TEST(SecretEchoGuard, AgreesWithANaiveMaskOnRandomTextAndCuts) {
  std::mt19937 rng(12);
  for (const std::string value : {"abab", "aab", "abaabab", "ba"}) {
    for (int round = 0; round < 300; ++round) {
      std::string text(rng() % 200, 'a');
      for (char& c : text) c = "abc"[rng() % 3];
      std::string want = text;
      for (size_t i = 0; i + value.size() <= text.size(); ++i) {
        if (text.compare(i, value.size(), value) == 0) std::fill_n(want.begin() + static_cast<std::ptrdiff_t>(i), value.size(), '*');
      }
      SecretEchoGuard g({{"K", value}, {"OTHER", "cc-not-here"}});
      std::string out;
      bool named = false;
      for (size_t at = 0; at < text.size();) {
        const size_t n = std::min<size_t>(1 + rng() % 9, text.size() - at);
        named = !g.feed_data(std::string_view(text).substr(at, n), out).empty() || named;
        at += n;
      }
      g.release(out);
      ASSERT_EQ(out, want) << value << " in " << text;
      EXPECT_EQ(named, want != text) << text;
    }
  }
}

TEST(SecretEchoGuard, WithoutSecretsEverythingPassesAtOnce) {
  SecretEchoGuard g;
  std::string out;
  EXPECT_FALSE(g.active());
  EXPECT_TRUE(g.feed_data("anything", out).empty());
  EXPECT_EQ(out, "anything");
  EXPECT_EQ(g.held(), 0U);
}

// The body's framing is not data: a value split across two chunks (at every split point) is
// found, the chunk-size lines and CRLFs are untouched, and the chunked body stays valid.
TEST(SecretEchoGuard, ChunkedBodyValueSplitAcrossChunksAtEveryPoint) {
  for (size_t split = 1; split < kValue.size(); ++split) {
    const std::string a = "v=" + std::string(kValue.substr(0, split));
    const std::string b = std::string(kValue.substr(split)) + ";";
    auto hex = [](size_t n) {
      char buf[32];
      (void)std::snprintf(buf, sizeof buf, "%zx", n);
      return std::string(buf);
    };
    const std::string body = hex(a.size()) + ";ext=1\r\n" + a + "\r\n" + hex(b.size()) + "\r\n" + b + "\r\n0\r\nx-t: 1\r\n\r\n";
    const std::string want = hex(a.size()) + ";ext=1\r\nv=" + std::string(split, '*') + "\r\n" + hex(b.size()) + "\r\n" +
                             std::string(kValue.size() - split, '*') + ";\r\n0\r\nx-t: 1\r\n\r\n";
    for (size_t cut = 0; cut <= body.size(); cut += 3) {  // the upstream's reads split it anywhere too
      network::BodyFramer framer({network::BodyKind::chunked, 0});
      SecretEchoGuard g = guard_for();
      std::string out;
      std::string_view named;
      for (std::string_view rest = body; !rest.empty();) {
        const std::string_view piece = rest.substr(0, cut == 0 ? rest.size() : std::min(cut, rest.size()));
        const auto step = framer.feed({reinterpret_cast<const uint8_t*>(piece.data()), piece.size()});
        ASSERT_TRUE(step.error.empty()) << step.error;
        ASSERT_EQ(step.consumed, piece.size());
        const std::string_view n = g.feed(piece, step.data, out);
        if (named.empty()) named = n;
        rest.remove_prefix(piece.size());
      }
      ASSERT_TRUE(framer.done());
      g.release(out);
      EXPECT_EQ(out, want) << "split " << split << " read size " << cut;
      EXPECT_EQ(named, "API_KEY");
      network::BodyFramer check({network::BodyKind::chunked, 0});
      const auto again = check.feed({reinterpret_cast<const uint8_t*>(out.data()), out.size()});
      EXPECT_TRUE(again.done && again.error.empty() && again.consumed == out.size());
    }
  }
}

TEST(BodyFramerData, ReportsDataBytesOnly) {
  network::BodyFramer len({network::BodyKind::length, 5});
  const std::string l = "hellotail";
  auto s = len.feed({reinterpret_cast<const uint8_t*>(l.data()), l.size()});
  ASSERT_EQ(s.data.size(), 1U);
  EXPECT_EQ(s.data[0].offset, 0U);
  EXPECT_EQ(s.data[0].size, 5U);

  network::BodyFramer ch({network::BodyKind::chunked, 0});
  const std::string c = "3\r\nabc\r\n2;x\r\nde\r\n0\r\nk: v\r\n\r\n";
  s = ch.feed({reinterpret_cast<const uint8_t*>(c.data()), c.size()});
  ASSERT_TRUE(s.done);
  std::string data;
  for (const auto& d : s.data) data += c.substr(d.offset, d.size);
  EXPECT_EQ(data, "abcdek: v");
}

}  // namespace
}  // namespace soyaos::supervisor
