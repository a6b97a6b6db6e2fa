#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "network/http_head.h"

namespace soyaos::network {
namespace {

HttpHeadParse parse(std::string_view s) {
  return parse_http_head(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

// What curl 7.88 sends for `curl http://www.Example.com:8080/a?b=1`.
constexpr std::string_view kCurl =
    "GET /a?b=1 HTTP/1.1\r\n"
    "Host: www.Example.com:8080\r\n"
    "User-Agent: curl/7.88.1\r\n"
    "Accept: */*\r\n"
    "\r\n";

// What Python's http.client sends for a JSON POST.
constexpr std::string_view kPost =
    "POST /v1/chat HTTP/1.1\r\n"
    "Host: api.example.com\r\n"
    "Accept-Encoding: identity\r\n"
    "Content-Length: 2\r\n"
    "Content-Type: application/json\r\n"
    "\r\n"
    "{}";

TEST(HttpHead, CurlRequest) {
  const HttpHeadParse p = parse(kCurl);
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.method, "GET");
  EXPECT_EQ(p.head.target, "/a?b=1");
  EXPECT_EQ(p.head.target_form, TargetForm::origin);
  EXPECT_EQ(p.head.minor_version, 1);
  EXPECT_EQ(p.head.host, "www.example.com");
  EXPECT_EQ(p.head.port, 8080);
  EXPECT_EQ(p.head.head_size, kCurl.size());
  ASSERT_EQ(p.head.fields.size(), 3U);
  EXPECT_EQ(p.head.fields[1].first, "User-Agent");
  EXPECT_EQ(p.head.fields[1].second, "curl/7.88.1");
  EXPECT_FALSE(p.head.proxy_fields);
}

TEST(HttpHead, BodyIsNotPartOfTheHead) {
  const HttpHeadParse p = parse(kPost);
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.head_size, kPost.size() - 2);
  EXPECT_EQ(p.head.content_length, 2U);
  EXPECT_FALSE(p.head.port.has_value());
  EXPECT_EQ(p.head.host, "api.example.com");
}

TEST(HttpHead, EveryPrefixNeedsMore) {
  for (std::string_view full : {kCurl, kPost.substr(0, kPost.size() - 2)}) {
    for (size_t n = 0; n < full.size(); ++n) {
      const HttpHeadParse p = parse(full.substr(0, n));
      ASSERT_EQ(p.status, ParseStatus::need_more) << n << ": " << p.reason;
      EXPECT_GT(p.need, n);
      EXPECT_LE(p.need, full.size()) << n;
    }
  }
}

TEST(HttpHead, Http10AndHostForms) {
  struct Case {
    std::string_view host_value;
    std::string_view host;
    std::optional<uint16_t> port;
  };
  for (const Case& c : std::vector<Case>{{"example.com", "example.com", std::nullopt},
                                         {"EXAMPLE.com:80", "example.com", 80},
                                         {"10.0.0.1:65535", "10.0.0.1", 65535},
                                         {"[::1]", "[::1]", std::nullopt},
                                         {"[2001:DB8::1]:443", "[2001:db8::1]", 443},
                                         {"  spaced.example \t", "spaced.example", std::nullopt}}) {
    const std::string req = "GET / HTTP/1.0\r\nHost:" + std::string(c.host_value) + "\r\n\r\n";
    const HttpHeadParse p = parse(req);
    ASSERT_EQ(p.status, ParseStatus::complete) << c.host_value << ": " << p.reason;
    EXPECT_EQ(p.head.minor_version, 0);
    EXPECT_EQ(p.head.host, c.host);
    EXPECT_EQ(p.head.port, c.port);
  }
}

TEST(HttpHead, ProxyFormsAreReportedDistinctly) {
  HttpHeadParse p = parse("GET http://evil.example/ HTTP/1.1\r\nHost: ok.example\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.target_form, TargetForm::absolute);
  p = parse("CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.target_form, TargetForm::authority);
  p = parse("OPTIONS * HTTP/1.1\r\nHost: ok.example\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.target_form, TargetForm::asterisk);
  EXPECT_EQ(to_string(TargetForm::absolute), "absolute");
}

// Python's http.client tunnels with `CONNECT host:port HTTP/1.0` and no Host; an absolute
// URI names its host too. Both parse (has_host false) — the Moon proxy uses the target — while
// an origin-form request without Host stays invalid, in HTTP/1.0 as in 1.1.
TEST(HttpHead, HostMayBeMissingOnlyWhereTheTargetNamesTheHost) {
  HttpHeadParse p = parse("CONNECT api.example.com:443 HTTP/1.0\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.target_form, TargetForm::authority);
  EXPECT_FALSE(p.head.has_host);
  EXPECT_TRUE(p.head.host.empty());
  p = parse("CONNECT api.example.com:443 HTTP/1.1\r\nUser-Agent: x\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_FALSE(p.head.has_host);
  p = parse("GET http://web.example/ HTTP/1.0\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_EQ(p.head.target_form, TargetForm::absolute);
  EXPECT_FALSE(p.head.has_host);
  p = parse("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_TRUE(p.head.has_host);
  EXPECT_EQ(p.head.host, "api.example.com");
  EXPECT_EQ(parse("GET / HTTP/1.0\r\n\r\n").reason, "http: no Host field");
  EXPECT_EQ(parse("OPTIONS * HTTP/1.1\r\n\r\n").reason, "http: no Host field");
  // Two Host fields stay invalid whatever the form.
  EXPECT_EQ(parse("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n").status,
            ParseStatus::invalid);
}

TEST(HttpHead, ProxyFieldsAreFlagged) {
  for (std::string_view name : {"Forwarded", "X-Forwarded-For", "x-forwarded-host", "Proxy-Authorization", "Proxy-Connection"}) {
    const std::string req = "GET / HTTP/1.1\r\nHost: a.example\r\n" + std::string(name) + ": x\r\n\r\n";
    const HttpHeadParse p = parse(req);
    ASSERT_EQ(p.status, ParseStatus::complete) << name;
    EXPECT_TRUE(p.head.proxy_fields) << name;
  }
}

// Issue #18: what an upstream could take as the host instead of Host, and h2c (#15).
TEST(HttpHead, GatewayRefusesOtherHostSpellingsAndH2c) {
  const std::pair<std::string_view, std::string_view> refused[] = {
      {"GET //other.host/x HTTP/1.1\r\nHost: a.example\r\n\r\n", "//"},
      {"GET // HTTP/1.1\r\nHost: a.example\r\n\r\n", "//"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-Host: secret.pw.test\r\n\r\n", "X-Forwarded-Host"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nx-forwarded-server: s\r\n\r\n", "x-forwarded-server"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nX-Host: s\r\n\r\n", "X-Host"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nX-Original-URL: http://s/\r\n\r\n", "X-Original-URL"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nForwarded: for=1.2.3.4;Host=secret.pw.test\r\n\r\n", "Forwarded"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nForwarded: for=x, host=s\r\n\r\n", "Forwarded"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
       "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
       "h2c"},
      {"GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket, H2C\r\n\r\n", "h2c"},
  };
  for (const auto& [req, why] : refused) {
    const HttpHeadParse p = parse(req);
    ASSERT_EQ(p.status, ParseStatus::complete) << req << ": " << p.reason;
    const std::string r = http_entry_refusal(p.head);
    EXPECT_NE(r.find(why), std::string::npos) << req << " -> " << r;
  }
  for (std::string_view ok : {kCurl, kPost, std::string_view("GET /a//b HTTP/1.1\r\nHost: a\r\n\r\n"),
                              std::string_view("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"),
                              std::string_view("GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=1.2.3.4;proto=http\r\n\r\n"),
                              std::string_view("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n")}) {
    const HttpHeadParse p = parse(ok);
    ASSERT_EQ(p.status, ParseStatus::complete) << ok << ": " << p.reason;
    EXPECT_EQ(http_entry_refusal(p.head), "") << ok;
  }
}

TEST(HttpHead, ChunkedRequest) {
  const HttpHeadParse p = parse("POST /u HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  ASSERT_EQ(p.status, ParseStatus::complete) << p.reason;
  EXPECT_TRUE(p.head.chunked);
  EXPECT_FALSE(p.head.content_length.has_value());
}

TEST(HttpHead, LimitsOnSizeAndFieldCount) {
  std::string big = "GET / HTTP/1.1\r\nHost: a.example\r\nX-Pad: " + std::string(kHttpMaxHead, 'a');
  HttpHeadParse p = parse(big);
  ASSERT_EQ(p.status, ParseStatus::invalid);
  EXPECT_EQ(p.reason, "http: head too large");
  // Exactly at the limit is fine.
  std::string exact = "GET / HTTP/1.1\r\nHost: a.example\r\nX-Pad: ";
  exact += std::string(kHttpMaxHead - exact.size() - 4, 'a') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), kHttpMaxHead);
  p = parse(exact);
  EXPECT_EQ(p.status, ParseStatus::complete) << p.reason;
  // 100 fields, then 101.
  std::string fields = "GET / HTTP/1.1\r\nHost: a.example\r\n";
  for (int i = 1; i < 100; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(parse(fields + "\r\n").status, ParseStatus::complete);
  p = parse(fields + "X-100: v\r\n\r\n");
  EXPECT_EQ(p.status, ParseStatus::invalid);
  EXPECT_EQ(p.reason, "http: more than 100 header fields");
}

TEST(HttpHead, EarlyRejectionOfNonHttp) {
  // A TLS ClientHello on an http port fails on its first byte, not after 16 KiB.
  const uint8_t tls[] = {22, 3, 1, 0, 200};
  EXPECT_EQ(parse_http_head(tls).status, ParseStatus::invalid);
  EXPECT_EQ(parse("GE(T").status, ParseStatus::invalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\rb").status, ParseStatus::invalid);
  EXPECT_EQ(parse(" GET").status, ParseStatus::invalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\n Host").status, ParseStatus::invalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHo st").status, ParseStatus::invalid);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a b").status, ParseStatus::need_more);  // decided at CRLF
}

TEST(HttpHead, RefusesMalformedAndAmbiguous) {
  const std::vector<std::pair<const char*, std::string_view>> cases = {
      {"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"},
      {"two hosts", "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"},
      {"two hosts, different case", "GET / HTTP/1.1\r\nHost: a.example\r\nhOST: a.example\r\n\r\n"},
      {"empty host", "GET / HTTP/1.1\r\nHost: \r\n\r\n"},
      {"host with userinfo", "GET / HTTP/1.1\r\nHost: user@a.example\r\n\r\n"},
      {"host trailing dot", "GET / HTTP/1.1\r\nHost: a.example.\r\n\r\n"},
      {"host two ports", "GET / HTTP/1.1\r\nHost: a.example:80:81\r\n\r\n"},
      {"host empty port", "GET / HTTP/1.1\r\nHost: a.example:\r\n\r\n"},
      {"host port 0", "GET / HTTP/1.1\r\nHost: a.example:0\r\n\r\n"},
      {"host port too big", "GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n"},
      {"host bad ipv6", "GET / HTTP/1.1\r\nHost: [::g]\r\n\r\n"},
      {"host unclosed ipv6", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"},
      {"host list", "GET / HTTP/1.1\r\nHost: a.example, b.example\r\n\r\n"},
      {"obs-fold", "GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\n 2\r\n\r\n"},
      {"fold before first field", "GET / HTTP/1.1\r\n Host: a.example\r\n\r\n"},
      {"bare LF", "GET / HTTP/1.1\nHost: a.example\r\n\r\n"},
      {"bare LF at the end", "GET / HTTP/1.1\r\nHost: a.example\r\n\n"},
      {"bare CR", "GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n"},
      {"space before colon", "GET / HTTP/1.1\r\nHost : a.example\r\n\r\n"},
      {"empty field name", "GET / HTTP/1.1\r\nHost: a.example\r\n: x\r\n\r\n"},
      {"field name with slash", "GET / HTTP/1.1\r\nHost: a.example\r\nX/Y: x\r\n\r\n"},
      {"no colon", "GET / HTTP/1.1\r\nHost: a.example\r\nJunk\r\n\r\n"},
      {"nul in value", std::string_view("GET / HTTP/1.1\r\nHost: a.example\r\nX: \0\r\n\r\n", 37)},
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a.example\r\n\r\n"},
      {"HTTP/0.9", "GET /\r\n\r\n"},
      {"lower-case version", "GET / http/1.1\r\nHost: a.example\r\n\r\n"},
      {"two spaces", "GET  / HTTP/1.1\r\nHost: a.example\r\n\r\n"},
      {"trailing space", "GET / HTTP/1.1 \r\nHost: a.example\r\n\r\n"},
      {"empty request line", "\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n"},
      {"fragment in target", "GET /#x HTTP/1.1\r\nHost: a.example\r\n\r\n"},
      {"relative target", "GET a/b HTTP/1.1\r\nHost: a.example\r\n\r\n"},
      {"asterisk with GET", "GET * HTTP/1.1\r\nHost: a.example\r\n\r\n"},
      {"non-ascii target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: a.example\r\n\r\n"},
      {"two content-lengths", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"},
      {"content-length list", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1, 1\r\n\r\n"},
      {"negative content-length", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: -1\r\n\r\n"},
      {"cl and te", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"},
      {"te not chunked", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n"},
      {"te in 1.0", "POST / HTTP/1.0\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"},
  };
  for (const auto& [what, text] : cases) {
    const HttpHeadParse p = parse(text);
    EXPECT_EQ(p.status, ParseStatus::invalid) << what;
    EXPECT_FALSE(p.reason.empty()) << what;
  }
}

}  // namespace
}  // namespace soyaos::network
