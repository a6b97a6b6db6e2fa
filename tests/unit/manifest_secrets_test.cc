// M7 (secrets) and M8 (http rules): every shape rule with a positive and a negative case,
// checking the key path and line:column of each error.
#include <gtest/gtest.h>

#include "manifest/manifest.h"
#include "manifest_test_util.h"

namespace soyaos::manifest::testing {
namespace {

// kValid (19 lines) plus a secrets block at lines 20-22.
std::string with_secrets(const std::string& block, const std::string& base = kValid) { return base + block; }

// kValid's egress entry with an `http:` list starting at line 16.
std::string with_http(const std::string& rules) {
  return with("      protocol: https\n", "      protocol: https\n      http:\n" + rules);
}

TEST(ManifestSecrets, ValidSecretsAreTypedInFileOrder) {
  auto r = parse(with_secrets(
      "secrets:\n"                                             // 20
      "  ZED_KEY:\n"                                           // 21
      "    hosts: [API.Example.com]\n"                         // 22
      "  A_TOKEN: {hosts: [api.example.com, \"[::1]\", 10.0.0.1]}\n"));  // 23
  ASSERT_TRUE(IsValid(r));
  const Manifest& m = *r.manifest;
  ASSERT_EQ(m.secrets.size(), 2u);
  EXPECT_EQ(m.secrets[0].name, "ZED_KEY");
  EXPECT_EQ(m.secrets[0].key_path, "secrets.ZED_KEY");
  EXPECT_EQ(m.secrets[0].mark, (Mark{21, 3}));
  EXPECT_EQ(m.secrets[0].hosts, std::vector<std::string>{"api.example.com"});
  ASSERT_EQ(m.secrets[0].host_marks.size(), 1u);
  EXPECT_EQ(m.secrets[0].host_marks[0], (Mark{22, 13}));
  EXPECT_EQ(m.secrets[1].name, "A_TOKEN");
  EXPECT_EQ(m.secrets[1].hosts, (std::vector<std::string>{"api.example.com", "::1", "10.0.0.1"}));
  // No secrets block: none.
  EXPECT_TRUE(parse(kValid).manifest->secrets.empty());
  EXPECT_TRUE(IsValid(parse(with_secrets("secrets: {}\n"))));
}

TEST(ManifestSecrets, BadNames) {
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  api_key: {hosts: [a.example.com]}\n")), "secrets.api_key", 21,
                       3, "^[A-Z_][A-Z0-9_]*$"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  9KEY: {hosts: [a.example.com]}\n")), "secrets.9KEY", 21, 3,
                       "must match"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY-1: {hosts: [a.example.com]}\n")), "secrets.KEY-1", 21, 3,
                       "must match"));
}

TEST(ManifestSecrets, DuplicateNames) {
  auto r = parse(with_secrets("secrets:\n  KEY: {hosts: [a.example.com]}\n  KEY: {hosts: [b.example.com]}\n"));
  EXPECT_TRUE(HasError(r, "secrets.KEY", 22, 3, "duplicate key (first defined at 21:3)"));
}

TEST(ManifestSecrets, ShapeErrors) {
  EXPECT_TRUE(HasError(parse(with_secrets("secrets: [KEY]\n")), "secrets", 20, 10, "must be a mapping"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: api.example.com\n")), "secrets.KEY", 21, 8,
                       "must be a mapping"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {}\n")), "secrets.KEY.hosts", 21, 8,
                       "required key is missing"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: a.example.com}\n")), "secrets.KEY.hosts", 21, 16,
                       "must be a list of host names"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: []}\n")), "secrets.KEY.hosts", 21, 16,
                       "at least one host"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [a.example.com], value: x}\n")),
                       "secrets.KEY.value", 21, 33, "unknown key"));
}

TEST(ManifestSecrets, BadHosts) {
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [\"*.example.com\"]}\n")),
                       "secrets.KEY.hosts[0]", 21, 17, "concrete host names only"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [\"exa mple.com\"]}\n")),
                       "secrets.KEY.hosts[0]", 21, 17, "must be a DNS name or an IP literal"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [\"\"]}\n")), "secrets.KEY.hosts[0]", 21, 17,
                       "must be a DNS name"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [\"https://a.example.com\"]}\n")),
                       "secrets.KEY.hosts[0]", 21, 17, "must be a DNS name"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [a.example.com, A.example.com]}\n")),
                       "secrets.KEY.hosts[1]", 21, 32, "duplicate host"));
  EXPECT_TRUE(HasError(parse(with_secrets("secrets:\n  KEY: {hosts: [[a]]}\n")), "secrets.KEY.hosts[0]", 21, 17,
                       "must be a string"));
}

TEST(ManifestSecrets, NameCollidesWithAgentEnv) {
  const std::string base = with("  entrypoint: main.py\n", "  entrypoint: main.py\n  env: {API_KEY: x}\n");
  auto r = parse(base + "secrets:\n  API_KEY: {hosts: [api.example.com]}\n");
  EXPECT_TRUE(HasError(r, "secrets.API_KEY", 22, 3, "agent.env also sets API_KEY"));
}

TEST(ManifestSecrets, NameCollidesWithReservedVariables) {
  for (const char* name : {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                           "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(is_reserved_env_name(name));
    auto r = parse(with_secrets(std::string("secrets:\n  ") + name + ": {hosts: [api.example.com]}\n"));
    EXPECT_TRUE(HasError(r, std::string("secrets.") + name, 21, 3, "the Comet sets itself"));
  }
  EXPECT_FALSE(is_reserved_env_name("ANTHROPIC_API_KEY"));
}

TEST(ManifestHttpRules, ValidRulesAreTyped) {
  auto r = parse(with_http(
      "        - {method: POST, path: /v1/messages}\n"          // 17
      "        - {method: GET, path: \"/v1/models/*\"}\n"       // 18
      "        - {method: \"*\", path: \"/v1/files/**\"}\n"     // 19
      "        - {method: GET, path: \"/**\"}\n"                // 20
      "        - {method: GET, path: /}\n"                      // 21
      "        - {method: PROPFIND, path: \"/a/*/b%41/c:d@e\"}\n"  // 22
      "        - {method: GET, path: /dir/}\n"));               // 23
  ASSERT_TRUE(IsValid(r));
  const EgressEntry& e = r.manifest->capabilities.egress[0];
  ASSERT_EQ(e.http.size(), 7u);
  EXPECT_EQ(e.http[0].method, "POST");
  EXPECT_EQ(e.http[0].path, "/v1/messages");
  EXPECT_EQ(e.http[0].key_path, "capabilities.egress[0].http[0]");
  EXPECT_EQ(e.http[0].mark, (Mark{17, 11}));
  EXPECT_EQ(e.http[1].path, "/v1/models/*");
  EXPECT_EQ(e.http[2].method, "*");
  EXPECT_EQ(e.http[2].path, "/v1/files/**");
  // Without `http`: empty, any request.
  EXPECT_TRUE(parse(kValid).manifest->capabilities.egress[0].http.empty());
}

TEST(ManifestHttpRules, BadMethods) {
  EXPECT_TRUE(HasError(parse(with_http("        - {method: get, path: /}\n")),
                       "capabilities.egress[0].http[0].method", 17, 20, "write \"GET\""));
  EXPECT_TRUE(HasError(parse(with_http("        - {method: \"GE T\", path: /}\n")),
                       "capabilities.egress[0].http[0].method", 17, 20, "must be an HTTP method token"));
  EXPECT_TRUE(HasError(parse(with_http("        - {method: \"\", path: /}\n")),
                       "capabilities.egress[0].http[0].method", 17, 20, "must not be empty"));
  EXPECT_TRUE(HasError(parse(with_http("        - {method: \"GET,POST\", path: /}\n")),
                       "capabilities.egress[0].http[0].method", 17, 20, "token"));
  EXPECT_TRUE(HasError(parse(with_http("        - {path: /}\n")), "capabilities.egress[0].http[0].method", 17, 11,
                       "required key is missing"));
}

TEST(ManifestHttpRules, BadPaths) {
  auto bad = [](const std::string& path, const std::string& fragment) {
    return HasError(parse(with_http("        - {method: GET, path: \"" + path + "\"}\n")),
                    "capabilities.egress[0].http[0].path", 17, 31, fragment);
  };
  EXPECT_TRUE(bad("v1/messages", "must start with '/'"));
  EXPECT_TRUE(bad("", "must start with '/'"));
  EXPECT_TRUE(bad("/v1/**/files", "must be the last segment"));
  EXPECT_TRUE(bad("/v1/mod*", "must be a whole segment"));
  EXPECT_TRUE(bad("/v1/*x*/a", "must be a whole segment"));
  EXPECT_TRUE(bad("/v1/***", "must be a whole segment"));
  EXPECT_TRUE(bad("/v1/models?limit=1", "query"));
  EXPECT_TRUE(bad("/v1#frag", "fragment"));
  EXPECT_TRUE(bad("/v1//models", "empty segment"));
  EXPECT_TRUE(bad("/v1/../admin", "segments"));
  EXPECT_TRUE(bad("/v1/./a", "segments"));
  EXPECT_TRUE(bad("/v1/a%2Fb", "encoded '/'"));
  EXPECT_TRUE(bad("/v1/a%2fb", "encoded '/'"));
  EXPECT_TRUE(bad("/v1/a%zz", "percent-escape"));
  EXPECT_TRUE(bad("/v1/a%4", "percent-escape"));
  EXPECT_TRUE(bad("/v1/a b", "not allowed in a URL path"));
  EXPECT_TRUE(HasError(parse(with_http("        - {method: GET}\n")), "capabilities.egress[0].http[0].path", 17, 11,
                       "required key is missing"));
}

TEST(ManifestHttpRules, BadListShapes) {
  EXPECT_TRUE(HasError(parse(with("      protocol: https\n", "      protocol: https\n      http: []\n")),
                       "capabilities.egress[0].http", 16, 13, "at least one"));
  EXPECT_TRUE(HasError(parse(with("      protocol: https\n", "      protocol: https\n      http: {method: GET}\n")),
                       "capabilities.egress[0].http", 16, 13, "must be a list"));
  EXPECT_TRUE(HasError(parse(with_http("        - GET /v1\n")), "capabilities.egress[0].http[0]", 17, 11,
                       "must be a mapping"));
  EXPECT_TRUE(HasError(parse(with_http("        - {method: GET, path: /, host: x}\n")),
                       "capabilities.egress[0].http[0].host", 17, 34, "unknown key"));
}

TEST(ManifestHttpRules, OnlyOnHttpsAndHttpEntries) {
  const std::string rules = "      http: [{method: GET, path: /}]\n";
  for (const char* proto : {"tcp", "udp"}) {
    SCOPED_TRACE(proto);
    auto r = parse(with("      protocol: https\n", std::string("      protocol: ") + proto + "\n" + rules));
    EXPECT_TRUE(HasError(r, "capabilities.egress[0].http", 16, 13, std::string("not ") + proto));
  }
  auto proxy = parse(with("    - host: api.example.com\n      port: 443\n      protocol: https\n",
                          "    - host: moon\n      port: 3128\n      protocol: moon-proxy\n" + rules));
  EXPECT_TRUE(HasError(proxy, "capabilities.egress[0].http", 16, 13, "not moon-proxy"));
  EXPECT_TRUE(IsValid(parse(with("      protocol: https\n", "      protocol: http\n" + rules))));
}

}  // namespace
}  // namespace soyaos::manifest::testing
