// gate_request (supervisor/http_gate.h) on requests that ask the upstream for more than the
// http rules saw (review R1 F2, F5 and TRACE): a body on a method that defines none (the
// upstream may read it as a second, unchecked request), a method-override field naming another
// method, TRACE with a bound secret (the echo would carry the value), a target starting with
// `//`. Each refusal next to the allowed neighbours that must still pass.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "network/http_head.h"
#include "network/http_message.h"
#include "supervisor/http_gate.h"

namespace soyaos::supervisor {
namespace {

constexpr const char* kBound = "soyaos-placeholder-0123456789abcdef0123456789abcdef";
constexpr const char* kUnbound = "soyaos-placeholder-fedcba9876543210fedcba9876543210";
constexpr std::string_view kValue = "sk-test-value-0123";

manifest::HttpRule rule(std::string method, std::string path, int i) {
  return {std::move(method), std::move(path), "capabilities.egress[0].http[" + std::to_string(i) + "]", {}};
}

// api.example.com:443 with rules for every method the tests send, or without rules.
HttpExchangePolicy policy(bool with_rules, bool bound_secret) {
  HttpExchangePolicy p;
  p.host = "api.example.com";
  p.port = 443;
  p.manifest_entry = "capabilities.egress[0]";
  if (with_rules) p.rules = {rule("*", "/v1/**", 0)};
  p.secrets.push_back({kUnbound, "unbound-value", false});
  if (bound_secret) p.secrets.push_back({kBound, kValue, true});
  return p;
}

network::HttpHeadParse parse(const std::string& head) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(head.data());
  return network::parse_http_head(std::span<const uint8_t>(bytes, head.size()));
}

// `METHOD /v1/x HTTP/1.1` with Host and the extra field lines (each ending in CRLF).
GateDecision gate(const std::string& method, const std::string& fields, const HttpExchangePolicy& p,
                  const std::string& target = "/v1/x") {
  const network::HttpHeadParse hp = parse(method + " " + target + " HTTP/1.1\r\nHost: api.example.com\r\n" + fields + "\r\n");
  EXPECT_EQ(hp.status, network::ParseStatus::complete) << method << " " << fields << ": " << hp.reason;
  return gate_request(hp, p);
}

const std::vector<std::string> kBodiless = {"GET", "HEAD", "TRACE"};

// DELETE and OPTIONS carry bodies in real APIs (GitHub's "delete a file", Kubernetes'
// DeleteOptions): they go through (review R2 G4).
TEST(HttpGateBody, ABodyOnDeleteOrOptionsGoesThrough) {
  for (bool rules : {true, false}) {
    for (const std::string m : {"DELETE", "OPTIONS"}) {
      const GateDecision d = gate(m, "Content-Length: 5\r\n", policy(rules, false));
      EXPECT_TRUE(d.allowed) << m << " rules=" << rules << ": " << d.reason;
    }
  }
}

// An entry without rules promises no path: the target goes up as sent, its spelling neither
// refused nor rewritten (review R2 G9: an npm scope `%2f`, a GitLab project id `%2F`, `%25`
// in a file name, `//`).
TEST(HttpGatePath, WithoutRulesTheTargetGoesUpAsSent) {
  for (const std::string target : {"/@types%2fnode", "/api/v4/projects/group%2Fproject",
                                   "/files/report%25202024.pdf", "/a//b", "/a/./b?x=%2F"}) {
    const GateDecision d = gate("GET", "", policy(false, false), target);
    EXPECT_TRUE(d.allowed) << target << ": " << d.reason;
    EXPECT_EQ(d.upstream_head.rfind("GET " + target + " HTTP/1.1\r\n", 0), 0U) << d.upstream_head;
  }
  // With rules, the path is normalised and checked as before.
  EXPECT_FALSE(gate("GET", "", policy(true, false), "/v1/x%2Fy").allowed);
}

TEST(HttpGateBody, ContentLengthOnABodilessMethodIsRefused) {
  for (bool rules : {true, false}) {
    for (const std::string& m : kBodiless) {
      const GateDecision d = gate(m, "Content-Length: 5\r\n", policy(rules, false));
      EXPECT_FALSE(d.allowed) << m << " rules=" << rules;
      EXPECT_NE(d.reason.find("a body on a " + m + " request (Content-Length 5)"), std::string::npos) << d.reason;
      EXPECT_EQ(d.rule, "capabilities.egress[0]") << m;
      EXPECT_TRUE(d.upstream_head.empty()) << m;
    }
  }
}

TEST(HttpGateBody, TransferEncodingOnABodilessMethodIsRefused) {
  for (const std::string& m : kBodiless) {
    for (const char* te : {"chunked", "CHUNKED", "gzip, chunked"}) {
      const GateDecision d = gate(m, std::string("Transfer-Encoding: ") + te + "\r\n", policy(true, false));
      EXPECT_FALSE(d.allowed) << m << " " << te;
      EXPECT_NE(d.reason.find("a body on a " + m + " request (Transfer-Encoding)"), std::string::npos) << d.reason;
    }
  }
}

TEST(HttpGateBody, ALowerCaseBodilessMethodWithABodyIsRefusedToo) {
  // No rules, no bound secret: `get` reaches the gate's framing check (a server folding the
  // method's case would ignore the body as it does a GET's).
  const GateDecision d = gate("get", "Content-Length: 1\r\n", policy(false, false));
  EXPECT_FALSE(d.allowed);
  EXPECT_NE(d.reason.find("a body on a get request"), std::string::npos) << d.reason;
}

TEST(HttpGateBody, ConnectIsABodilessMethod) {
  // CONNECT never reaches the framing check at the gate (its target is refused first), but
  // request_traits refuses its body on its own as well.
  for (std::string_view m : {"GET", "HEAD", "TRACE", "CONNECT", "get", "Trace"}) {
    EXPECT_TRUE(network::method_defines_no_body(m)) << m;
  }
  for (std::string_view m : {"POST", "PUT", "PATCH", "PROPFIND", "GETX", "", "DELETE", "OPTIONS"}) {
    EXPECT_FALSE(network::method_defines_no_body(m)) << m;
  }
  network::HttpHead h;
  h.method = "CONNECT";
  h.content_length = 3;
  EXPECT_NE(network::request_traits(h).refusal.find("a body on a CONNECT request"), std::string::npos);
  h.content_length = 0;
  EXPECT_EQ(network::request_traits(h).refusal, "");
}

TEST(HttpGateBody, NoBodyOrAnEmptyOneIsAllowed) {
  for (const std::string& m : kBodiless) {
    for (const char* fields : {"", "Content-Length: 0\r\n", "Content-Length: 00\r\n"}) {
      const GateDecision d = gate(m, fields, policy(true, false));
      EXPECT_TRUE(d.allowed) << m << " [" << fields << "] " << d.reason;
      EXPECT_EQ(d.traits.body.kind, network::BodyKind::none) << m;
    }
  }
}

TEST(HttpGateBody, MethodsWithBodiesKeepThem) {
  for (const char* m : {"POST", "PUT", "PATCH"}) {
    GateDecision d = gate(m, "Content-Length: 78\r\n", policy(true, true));
    EXPECT_TRUE(d.allowed) << m << " " << d.reason;
    EXPECT_EQ(d.traits.body.kind, network::BodyKind::length) << m;
    EXPECT_EQ(d.traits.body.length, 78u) << m;
    d = gate(m, "Transfer-Encoding: chunked\r\n", policy(true, true));
    EXPECT_TRUE(d.allowed) << m << " " << d.reason;
    EXPECT_EQ(d.traits.body.kind, network::BodyKind::chunked) << m;
  }
}

TEST(HttpGateOverride, MethodOverrideFieldsAreRefusedOnEntriesWithRules) {
  for (const char* name : {"X-HTTP-Method-Override", "x-http-method-override", "X-HTTP-Method", "x-http-METHOD",
                           "X-Method-Override", "X-METHOD-OVERRIDE"}) {
    for (const char* value : {"DELETE", "PUT", "post", "GET"}) {  // `post`: not exactly the method
      const GateDecision d = gate("POST", std::string(name) + ": " + value + "\r\nContent-Length: 2\r\n", policy(true, false));
      EXPECT_FALSE(d.allowed) << name << ": " << value;
      EXPECT_NE(d.reason.find(std::string("a `") + name + ": " + value + "` field on a POST request"), std::string::npos)
          << d.reason;
      EXPECT_EQ(d.rule, "capabilities.egress[0]");
    }
  }
}

TEST(HttpGateOverride, AnOverrideEqualToTheMethodIsAllowed) {
  for (const char* name : {"X-HTTP-Method-Override", "X-HTTP-Method", "x-method-override"}) {
    GateDecision d = gate("POST", std::string(name) + ": POST\r\n", policy(true, false));
    EXPECT_TRUE(d.allowed) << name << " " << d.reason;
    EXPECT_NE(d.upstream_head.find(std::string(name) + ": POST\r\n"), std::string::npos) << d.upstream_head;
    d = gate("GET", std::string(name) + ": GET\r\n", policy(true, false));
    EXPECT_TRUE(d.allowed) << name << " " << d.reason;
  }
}

TEST(HttpGateOverride, EntriesWithoutRulesAllowEveryMethodSoOverridesPass) {
  const GateDecision d = gate("POST", "X-HTTP-Method-Override: DELETE\r\n", policy(false, true));
  EXPECT_TRUE(d.allowed) << d.reason;
}

TEST(HttpGateTrace, TraceIsRefusedWhenASecretIsBoundToTheHost) {
  for (bool rules : {true, false}) {
    for (const char* m : {"TRACE", "trace"}) {
      const GateDecision d = gate(m, std::string("Authorization: Bearer ") + kBound + "\r\n", policy(rules, true));
      EXPECT_FALSE(d.allowed) << m << " rules=" << rules;
      EXPECT_NE(d.reason.find("TRACE on an entry with a bound secret"), std::string::npos) << d.reason;
      EXPECT_EQ(d.reason.find(kValue), std::string::npos);
      EXPECT_TRUE(d.upstream_head.empty());
    }
  }
  // Without a placeholder in the request too: the entry's secret decides, not the request.
  EXPECT_FALSE(gate("TRACE", "", policy(false, true)).allowed);
}

TEST(HttpGateTrace, TraceWithoutABoundSecretFollowsTheRules) {
  // Only a secret bound elsewhere: TRACE is an ordinary method (the `*` rule allows it).
  GateDecision d = gate("TRACE", "", policy(true, false));
  EXPECT_TRUE(d.allowed) << d.reason;
  d = gate("TRACE", "", policy(false, false));
  EXPECT_TRUE(d.allowed) << d.reason;
  // And a bound secret leaves the other methods alone.
  d = gate("GET", std::string("Authorization: Bearer ") + kBound + "\r\n", policy(true, true));
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_NE(d.upstream_head.find(std::string("Authorization: Bearer ") + std::string(kValue)), std::string::npos);
}

TEST(HttpGatePath, ATargetStartingWithTwoSlashesIsRefusedNotNormalised) {
  // docs/http-rules.md: `/v1//models` is normalised, `//v1/models` names another host.
  GateDecision d = gate("GET", "", policy(true, false), "//v1/models");
  EXPECT_FALSE(d.allowed);
  EXPECT_NE(d.reason.find("starts with `//`"), std::string::npos) << d.reason;
  d = gate("GET", "", policy(true, false), "/v1//models");
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_EQ(d.path, "/v1/models");
  EXPECT_EQ(d.upstream_head.rfind("GET /v1/models HTTP/1.1\r\n", 0), 0u) << d.upstream_head;
}

TEST(HttpGatePath, DoubleEncodedAndEncodedParameterDotSegmentsAreRefused) {
  for (const char* target : {"/v1/..%3B/..%3B/admin", "/v1/%2e%2e%3bx/admin", "/v1/%252e%252e/%252e%252e/admin",
                             "/v1/..%252f..%252fadmin"}) {
    const GateDecision d = gate("GET", "", policy(true, false), target);
    EXPECT_FALSE(d.allowed) << target;
    EXPECT_TRUE(d.upstream_head.empty()) << target;
  }
  const GateDecision d = gate("GET", "", policy(true, false), "/v1/%2e%2e/v1/a%3Bb");
  EXPECT_TRUE(d.allowed) << d.reason;
  EXPECT_EQ(d.path, "/v1/a%3Bb");
}

}  // namespace
}  // namespace soyaos::supervisor
