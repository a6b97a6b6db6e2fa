#include <gtest/gtest.h>

#include <string>

#include "network/host_name.h"

namespace soyaos::network {
namespace {

std::string ok(std::string_view raw) {
  auto r = canonical_host_name(raw);
  EXPECT_TRUE(r.ok()) << raw << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : "";
}

std::string refused(std::string_view raw) {
  auto r = canonical_host_name(raw);
  EXPECT_FALSE(r.ok()) << "accepted `" << raw << "` as " << (r.ok() ? *r : "");
  if (r.ok()) return "";
  EXPECT_EQ(r.error().err, EINVAL);
  return r.error().message;
}

TEST(HostNameTest, CaseAndOneTrailingDotAreCanonicalised) {
  EXPECT_EQ(ok("api.example.com"), "api.example.com");
  EXPECT_EQ(ok("API.Example.COM"), "api.example.com");
  EXPECT_EQ(ok("api.example.com."), "api.example.com");
  EXPECT_EQ(ok("Secret.PW.test."), "secret.pw.test");
  EXPECT_EQ(ok("a-b.c0.test"), "a-b.c0.test");
  EXPECT_EQ(ok("localhost"), "localhost");
}

TEST(HostNameTest, ZoneFileEscapesAreRefused) {
  // What the system resolver would decode into `secret.pw.test` (issue #18).
  EXPECT_NE(refused("secre\\t.pw.test").find("backslash"), std::string::npos);
  EXPECT_NE(refused("\\115ecret.pw.test").find("backslash"), std::string::npos);
  refused("secret\\.pw.test");
  refused("secret.pw.test\\.");
  refused("\\");
}

TEST(HostNameTest, ControlCharactersPercentAndOtherBytesAreRefused) {
  EXPECT_NE(refused(std::string("secret\0.pw.test", 15)).find("control"), std::string::npos);
  EXPECT_NE(refused("secret\t.pw.test").find("control"), std::string::npos);
  refused("secret\r\n.pw.test");
  refused("secret\x7f.pw.test");
  refused("\x1b[2Jsecret.pw.test");
  EXPECT_NE(refused("secre%74.pw.test").find("percent"), std::string::npos);
  refused("secret.pw.test%00");
  refused("se cret.pw.test");
  refused("_dmarc.pw.test");
  refused("secret.pw.test:443");
  refused("user@secret.pw.test");
  refused("secret/pw.test");
  refused("*.pw.test");
  refused("[::1]");
}

TEST(HostNameTest, EmptyLabelsAndLengthLimitsAreRefused) {
  refused("");
  refused(".");
  refused("..");
  refused(".secret.pw.test");
  refused("secret..pw.test");
  refused("secret.pw.test..");
  refused("-secret.pw.test");
  refused("secret-.pw.test");
  const std::string label63(63, 'a');
  EXPECT_EQ(ok(label63 + ".test"), label63 + ".test");
  EXPECT_NE(refused(std::string(64, 'a') + ".test").find("63"), std::string::npos);
  // 253 bytes is the longest name; one trailing dot on top is still fine.
  std::string name;
  while (name.size() < 253 - 62) name += std::string(61, 'b') + ".";
  name += std::string(253 - name.size(), 'c');
  ASSERT_EQ(name.size(), 253U);
  EXPECT_EQ(ok(name), name);
  EXPECT_EQ(ok(name + "."), name);
  refused(name + "c");
}

TEST(HostNameTest, NumericSpellingsOfAddressesAreRefused) {
  // inet_aton (and getaddrinfo with it) reads each of these as 127.0.0.1.
  refused("127.1");
  refused("0x7f.1");
  refused("0x7f000001");
  refused("2130706433");
  refused("0177.0.0.1");
  refused("127.0.0.1");
  refused("example.123");
  EXPECT_EQ(ok("123.example"), "123.example");
  EXPECT_EQ(ok("0x7f.example"), "0x7f.example");
}

TEST(HostNameTest, UnicodeULabelsAreRefusedTheirALabelsAccepted) {
  EXPECT_NE(refused("bücher.example").find("A-label"), std::string::npos);
  refused("secret\xef\xbc\x8epw.test");  // U+FF0E FULLWIDTH FULL STOP
  refused("secret\xe3\x80\x82pw.test");  // U+3002 IDEOGRAPHIC FULL STOP
  refused("\xff\xfe.test");              // not UTF-8 at all
  EXPECT_EQ(ok("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_EQ(ok("XN--BCHER-KVA.example"), "xn--bcher-kva.example");
  EXPECT_EQ(ok("xn--mnchen-3ya.de"), "xn--mnchen-3ya.de");
  EXPECT_EQ(ok("xn--fiqs8s.test"), "xn--fiqs8s.test");  // 中国
}

TEST(HostNameTest, InvalidALabelsAreRefused) {
  refused("xn--.example");                // nothing after the prefix
  refused("xn--abc.example");              // does not decode
  refused("xn--secret-.pw.test");          // decodes to ASCII "secret": an ASCII name in disguise
  refused("xn--zzzzzzzzzzzzzzzzzz.test");  // overflows
  refused("xn--99999999999.test");
  refused("xn--bcher-kva9.example");       // trailing garbage
}

TEST(HostNameTest, PunycodeRoundTripsRfc3492Samples) {
  // RFC 3492 7.1 (L) and (A) samples, lower-cased.
  const std::u32string japanese = U"3年B組金八先生";
  auto enc = punycode_encode(japanese);
  ASSERT_TRUE(enc);
  EXPECT_EQ(*enc, "3B-ww4c5e180e575a65lsy2b");
  const std::u32string arabic = U"\u0644\u064A\u0647\u0645\u0627\u0628\u062A\u0643\u0644\u0645\u0648\u0634\u0639\u0631\u0628\u064A\u061F";
  enc = punycode_encode(arabic);
  ASSERT_TRUE(enc);
  EXPECT_EQ(*enc, "egbpdaj6bu4bxfgehfvwxn");
  auto dec = punycode_decode("egbpdaj6bu4bxfgehfvwxn");
  ASSERT_TRUE(dec);
  EXPECT_EQ(*dec, arabic);
  dec = punycode_decode("3B-ww4c5e180e575a65lsy2b");
  ASSERT_TRUE(dec);
  EXPECT_EQ(*dec, japanese);
  EXPECT_FALSE(punycode_decode("a\xc3\xa9-x"));  // non-ASCII basic part
  EXPECT_FALSE(punycode_decode("-"));
  EXPECT_FALSE(punycode_decode("b"));            // runs out mid-number
  EXPECT_FALSE(punycode_encode(std::u32string(1, static_cast<char32_t>(0x110000))));
}

}  // namespace
}  // namespace soyaos::network
