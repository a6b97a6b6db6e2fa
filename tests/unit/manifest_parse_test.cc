// parse_manifest: every SPEC.md §1 rule (M1-M6) with a positive and a negative case,
// checking the exact key path and line:column of each error.
#include <gtest/gtest.h>

#include "manifest/manifest.h"
#include "manifest_test_util.h"

namespace soyaos::manifest::testing {
namespace {

TEST(ManifestParse, ValidManifestIsTyped) {
  auto r = parse(kValid);
  ASSERT_TRUE(IsValid(r));
  const Manifest& m = *r.manifest;
  EXPECT_EQ(m.file, "soyapack.yaml");
  EXPECT_EQ(m.name, "demo");
  EXPECT_EQ(m.name_mark, (Mark{2, 7}));
  EXPECT_EQ(m.version, "1.2.3");
  EXPECT_EQ(m.version_mark, (Mark{3, 10}));
  EXPECT_EQ(m.agent.runtime, Runtime::python3);
  EXPECT_EQ(m.agent.entrypoint, "main.py");
  EXPECT_EQ(m.agent.entrypoint_mark, (Mark{6, 15}));
  ASSERT_EQ(m.tools.size(), 1u);
  const Tool& t = m.tools[0];
  EXPECT_EQ(t.name, "fetch");
  EXPECT_EQ(t.kind, ToolKind::http_get);
  EXPECT_EQ(t.key_path, "tools.fetch");
  EXPECT_EQ(t.mark, (Mark{9, 5}));
  EXPECT_EQ(t.url_mark, (Mark{10, 10}));
  ASSERT_TRUE(t.target);
  EXPECT_EQ(t.target->host, "api.example.com");
  EXPECT_EQ(t.target->port, 443);
  EXPECT_EQ(t.target->protocol, Protocol::https);
  ASSERT_EQ(m.capabilities.egress.size(), 1u);
  const EgressEntry& e = m.capabilities.egress[0];
  EXPECT_EQ(e.host, "api.example.com");
  EXPECT_EQ(e.port, 443);
  EXPECT_EQ(e.protocol, Protocol::https);
  EXPECT_EQ(e.key_path, "capabilities.egress[0]");
  EXPECT_EQ(e.mark, (Mark{13, 7}));
  EXPECT_FALSE(m.capabilities.egress_any);
  ASSERT_EQ(m.capabilities.fs_read.size(), 1u);
  EXPECT_EQ(m.capabilities.fs_read[0].path, "/workdir");
  EXPECT_EQ(m.capabilities.fs_read[0].key_path, "capabilities.fs.read[0]");
  EXPECT_EQ(m.capabilities.fs_read[0].mark, (Mark{17, 12}));
  ASSERT_EQ(m.capabilities.fs_write.size(), 1u);
  EXPECT_EQ(m.capabilities.fs_write[0].path, "/workdir/out");
  EXPECT_EQ(m.capabilities.tier, Tier::read_only);
  EXPECT_EQ(m.capabilities.tier_mark, (Mark{19, 21}));
  // C9 defaults.
  EXPECT_EQ(m.resources.memory_bytes, 1ULL << 30);
  EXPECT_EQ(m.resources.pids, 128u);
  EXPECT_EQ(m.resources.timeout_ms, 300'000u);
  EXPECT_EQ(m.resources.write_quota_bytes, 1ULL << 30);
}

TEST(ManifestParse, SpecExampleIsValid) {
  // The manifest of SPEC.md §1, verbatim apart from its tier (it declares a POST tool,
  // which read-only forbids: M6).
  const std::string spec = R"(soyapack: v0
name: issue-summarizer
version: 1.4.2
description: Summarizes issues
agent:
  runtime: python3
  entrypoint: main.py
  args: ["--fast"]
  env: {LOG_LEVEL: info}
tools:
  fetch:
    kind: builtin.http_get
    url: https://api.anthropic.com/v1/messages
  notify:
    kind: builtin.http_post
    url: https://hooks.slack.com/services/T000/B000
  save:
    kind: builtin.fs_write
    path: /workdir/out/report.md
capabilities:
  egress:
    - host: api.anthropic.com
      port: 443
      protocol: https
  fs:
    read:  [/workdir, /workdir/inputs]
    write: [/workdir/out]
  determinism_tier: side-effect
resources:
  memory: 512Mi
  pids: 64
  timeout: 60s
  write_quota: 100Mi
examples:
  - name: basic
    input: examples/basic.json
    args: []
    tools: [fetch, save]
    expect:
      exit_code: 0
      stdout_contains: "summary"
      outputs: [report.md]
)";
  auto r = parse(spec);
  ASSERT_TRUE(IsValid(r));
  const Manifest& m = *r.manifest;
  EXPECT_EQ(m.description, "Summarizes issues");
  EXPECT_EQ(m.agent.args, std::vector<std::string>{"--fast"});
  EXPECT_EQ(m.agent.env.at("LOG_LEVEL"), "info");
  ASSERT_EQ(m.tools.size(), 3u);
  EXPECT_EQ(m.tools[1].name, "notify");
  EXPECT_EQ(m.tools[2].path, "/workdir/out/report.md");
  EXPECT_EQ(m.resources.memory_bytes, 512ULL << 20);
  EXPECT_EQ(m.resources.pids, 64u);
  EXPECT_EQ(m.resources.timeout_ms, 60'000u);
  EXPECT_EQ(m.resources.write_quota_bytes, 100ULL << 20);
  ASSERT_EQ(m.examples.size(), 1u);
  const Example& ex = m.examples[0];
  EXPECT_EQ(ex.name, "basic");
  EXPECT_EQ(ex.input, "examples/basic.json");
  EXPECT_EQ(ex.tools, (std::vector<std::string>{"fetch", "save"}));
  EXPECT_EQ(ex.expect.exit_code, 0);
  EXPECT_EQ(ex.expect.stdout_contains, "summary");
  EXPECT_EQ(ex.expect.outputs, std::vector<std::string>{"report.md"});
  EXPECT_EQ(ex.key_path, "examples[0]");

  // Read-only: the POST tool is refused (M6).
  auto ro = parse(with("determinism_tier: side-effect", "determinism_tier: read-only", spec));
  EXPECT_TRUE(HasError(ro, "tools.notify", 15, 5, "read-only"));
}

// ---- Diagnostics -----------------------------------------------------------------

TEST(ManifestDiagnostic, Format) {
  EXPECT_EQ((Diagnostic{"x/soyapack.yaml", {14, 13}, "capabilities.egress[1].port", "must be an integer 1..65535"}
                 .format()),
            "x/soyapack.yaml:14:13: error: capabilities.egress[1].port: must be an integer 1..65535");
  EXPECT_EQ((Diagnostic{"f.yaml", {}, "", "manifest is empty"}.format()), "f.yaml: error: manifest is empty");
  EXPECT_EQ((Diagnostic{"f.yaml", {}, "name", "bad"}.format()), "f.yaml: error: name: bad");
  EXPECT_EQ((Diagnostic{"f.yaml", {2, 1}, "", "bad"}.format()), "f.yaml:2:1: error: bad");
  // The pack's own text is escaped for a terminal (E7): one line, no control character.
  EXPECT_EQ((Diagnostic{"f.yaml", {2, 1}, "k\x1B[2J\nx", "unknown key \"\xFF\""}.format()),
            "f.yaml:2:1: error: k\\x1B[2J\\nx: unknown key \"\\xFF\"");
}

TEST(ManifestDiagnostic, AllErrorsInOnePassInFileOrder) {
  std::string text = with("name: demo", "name: Demo");
  text = with("port: 443", "port: 0", text);
  text = with("runtime: python3", "runtime: ruby", text);
  auto r = parse(text);
  ASSERT_FALSE(r.manifest);
  ASSERT_EQ(r.errors.size(), 3u) << dump(r);
  EXPECT_EQ(r.errors[0].key_path, "name");
  EXPECT_EQ(r.errors[1].key_path, "agent.runtime");
  EXPECT_EQ(r.errors[2].key_path, "capabilities.egress[0].port");
  EXPECT_EQ(r.errors[2].format(), "soyapack.yaml:14:13: error: capabilities.egress[0].port: must be an integer 1..65535");
}

// ---- M1: unknown keys, required keys ----------------------------------------------

TEST(ManifestM1, UnknownTopLevelKey) {
  auto r = parse(kValid + "nmae: demo\n");
  EXPECT_TRUE(HasError(r, "nmae", 20, 1, "did you mean \"name\""));
}

TEST(ManifestM1, UnknownKeysAtEveryLevel) {
  EXPECT_TRUE(HasError(parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  entry: x\n")), "agent.entry", 7,
                       3, "unknown key"));
  EXPECT_TRUE(HasError(parse(with("    url: https://api.example.com/v1\n",
                                  "    url: https://api.example.com/v1\n    method: GET\n")),
                       "tools.fetch.method", 11, 5, "unknown key"));
  EXPECT_TRUE(HasError(parse(with("      protocol: https\n", "      protocol: https\n      proto: tcp\n")),
                       "capabilities.egress[0].proto", 16, 7, "did you mean \"protocol\""));
  EXPECT_TRUE(HasError(parse(with("    write: [/workdir/out]\n", "    write: [/workdir/out]\n    exec: [/bin]\n")),
                       "capabilities.fs.exec", 19, 5, "unknown key"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  cpu: 2\n"), "resources.cpu", 21, 3, "unknown key"));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n    expect: {exit: 0}\n"), "examples[0].expect.exit",
                       22, 14, "unknown key"));
}

TEST(ManifestM1, MissingRequiredKeysPointAtTheEnclosingMapping) {
  EXPECT_TRUE(HasError(parse(with("name: demo\n", "")), "name", 1, 1, "required"));
  EXPECT_TRUE(HasError(parse(with("soyapack: v0\n", "")), "soyapack", 1, 1, "required"));
  EXPECT_TRUE(HasError(parse(with("  runtime: python3\n", "")), "agent.runtime", 5, 3, "required"));
  EXPECT_TRUE(HasError(parse(with("  determinism_tier: read-only\n", "")), "capabilities.determinism_tier", 12, 3,
                       "required"));
  EXPECT_TRUE(HasError(parse(with("      port: 443\n", "")), "capabilities.egress[0].port", 13, 7, "required"));
  EXPECT_TRUE(HasError(parse(with("    - host: api.example.com\n      port: 443\n", "    - port: 443\n")),
                       "capabilities.egress[0].host", 13, 7, "required"));
  EXPECT_TRUE(HasError(parse(with("      protocol: https\n", "")), "capabilities.egress[0].protocol", 13, 7,
                       "required"));
}

TEST(ManifestM1, FormatVersionMustBeV0) {
  EXPECT_TRUE(HasError(parse(with("soyapack: v0", "soyapack: v1")), "soyapack", 1, 11, "\"v0\""));
}

TEST(ManifestM1, WrongTypes) {
  EXPECT_TRUE(HasError(parse(with("agent:\n  runtime: python3\n  entrypoint: main.py\n", "agent: [python3]\n")),
                       "agent", 4, 8, "must be a mapping"));
  EXPECT_TRUE(HasError(parse(with("    read: [/workdir]", "    read: /workdir")), "capabilities.fs.read", 17, 11,
                       "must be a list"));
  EXPECT_TRUE(HasError(parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  args: --fast\n")),
                       "agent.args", 7, 9, "list of strings"));
  EXPECT_TRUE(HasError(parse(with("name: demo", "name:")), "name", 2, 1, "must be a string"));
}

// ---- name, version, env -----------------------------------------------------------

TEST(ManifestFields, Name) {
  for (const char* ok : {"a", "issue-summarizer", "a0-9", "x23456789012345678901234567890123456789012345678901234567890123"}) {
    EXPECT_TRUE(IsValid(parse(with("name: demo", std::string("name: ") + ok)))) << ok;
  }
  for (const char* bad : {"Demo", "0demo", "-demo", "de_mo", "demo.x", "\"\"",
                          "x234567890123456789012345678901234567890123456789012345678901234"}) {
    EXPECT_TRUE(HasError(parse(with("name: demo", std::string("name: ") + bad)), "name", 2, 7, "must match")) << bad;
  }
}

TEST(ManifestFields, SemverFullGrammar) {
  for (const char* ok : {"0.0.0", "1.2.3", "10.20.30", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-0.3.7",
                         "1.0.0-x.7.z.92", "1.0.0-alpha+001", "1.0.0+20130313144700", "1.0.0-beta+exp.sha.5114f85",
                         "1.0.0+21AF26D3----117B344092BD", "1.0.0-x-y-z.--"}) {
    EXPECT_TRUE(IsValid(parse(with("version: 1.2.3", std::string("version: \"") + ok + "\"")))) << ok;
  }
  for (const char* bad : {"1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "1.2.3-", "1.2.3+", "1.2.3-01",
                          "1.2.3-a..b", "1.2.3+a..b", "v1.2.3", "1.2.3-a_b", "1.2.-3", " 1.2.3x"}) {
    EXPECT_TRUE(HasError(parse(with("version: 1.2.3", std::string("version: \"") + bad + "\"")), "version", 3, 10,
                         "semantic version"))
        << bad;
  }
}

TEST(ManifestFields, EnvNames) {
  auto ok = parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  env:\n    LOG_LEVEL: info\n    _X1: 2\n"));
  ASSERT_TRUE(IsValid(ok));
  EXPECT_EQ(ok.manifest->agent.env.at("_X1"), "2");
  EXPECT_TRUE(HasError(parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  env:\n    log_level: info\n")),
                       "agent.env.log_level", 8, 16, "^[A-Z_][A-Z0-9_]*$"));
  EXPECT_TRUE(HasError(parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  env:\n    1X: a\n")),
                       "agent.env.1X", 8, 9));
  EXPECT_TRUE(HasError(parse(with("  entrypoint: main.py\n", "  entrypoint: main.py\n  env:\n    X: [a]\n")),
                       "agent.env.X", 8, 8, "must be a string"));
}

TEST(ManifestFields, RuntimeAndEntrypoint) {
  for (const char* rt : {"python3", "node", "native"}) {
    EXPECT_TRUE(IsValid(parse(with("runtime: python3", std::string("runtime: ") + rt)))) << rt;
  }
  EXPECT_TRUE(HasError(parse(with("runtime: python3", "runtime: python")), "agent.runtime", 5, 12, "unknown runtime"));
  EXPECT_TRUE(IsValid(parse(with("entrypoint: main.py", "entrypoint: src/app/main.py"))));
  for (const char* bad : {"/main.py", "../main.py", "./main.py", "src/../main.py", "src/", "src//main.py"}) {
    EXPECT_TRUE(HasError(parse(with("entrypoint: main.py", std::string("entrypoint: ") + bad)), "agent.entrypoint",
                         6, 15, "relative path"))
        << bad;
  }
}

// ---- M2: egress -------------------------------------------------------------------

TEST(ManifestM2, PortRange) {
  for (const char* ok : {"1", "80", "65535"}) {
    EXPECT_TRUE(IsValid(parse(with("port: 443", std::string("port: ") + ok)))) << ok;
  }
  for (const char* bad : {"0", "65536", "99999", "-1", "https", "\"443\"", "4.5", "[443]"}) {
    EXPECT_TRUE(HasError(parse(with("port: 443", std::string("port: ") + bad)), "capabilities.egress[0].port", 14, 13,
                         "must be an integer 1..65535"))
        << bad;
  }
}

TEST(ManifestM2, Protocols) {
  for (const char* ok : {"https", "http", "tcp", "udp"}) {
    EXPECT_TRUE(IsValid(parse(with("protocol: https", std::string("protocol: ") + ok)))) << ok;
  }
  EXPECT_TRUE(HasError(parse(with("protocol: https", "protocol: HTTPS")), "capabilities.egress[0].protocol", 15, 17,
                       "unknown protocol"));
  EXPECT_TRUE(HasError(parse(with("protocol: https", "protocol: quic")), "capabilities.egress[0].protocol", 15, 17));
}

TEST(ManifestM2, Hosts) {
  auto upper = parse(with("host: api.example.com", "host: API.Example.COM"));
  ASSERT_TRUE(IsValid(upper));
  EXPECT_EQ(upper.manifest->capabilities.egress[0].host, "api.example.com");

  const std::pair<const char*, const char*> good[] = {
      {"\"*.example.com\"", "*.example.com"}, {"10.0.0.1", "10.0.0.1"}, {"\"::1\"", "::1"},
      {"\"[2001:DB8::1]\"", "2001:db8::1"},    {"localhost", "localhost"}, {"a-b.c9.io", "a-b.c9.io"}};
  for (const auto& [in, want] : good) {
    auto r = parse(with("host: api.example.com", std::string("host: ") + in));
    ASSERT_TRUE(IsValid(r)) << in;
    EXPECT_EQ(r.manifest->capabilities.egress[0].host, want);
  }
  for (const char* bad : {"\"*\"", "\"a.*.com\"", "\"example.*\"", "\"*example.com\"", "\"**.example.com\"",
                          "\"*.com\"", "-a.com", "a-.com", "a..com", "a.com.", "\"a b.com\"", "a_b.com",
                          "\"https://a.com\"", "\"a.com:443\"", "1.2.3", "256.1.1.1", "\"\"", "[a.com]"}) {
    EXPECT_TRUE(HasError(parse(with("host: api.example.com", std::string("host: ") + bad)),
                         "capabilities.egress[0].host", 13, 13))
        << bad;
  }
}

TEST(ManifestM2, AnyEgressNeedsUnrestricted) {
  const std::string list = "  egress:\n    - host: api.example.com\n      port: 443\n      protocol: https\n";
  const std::pair<const char*, Mark> anys[] = {{"  egress: \"*\"\n", {12, 11}},
                                               {"  egress: [\"*\"]\n", {12, 11}},
                                               {"  egress:\n    - \"*\"\n", {13, 5}}};
  for (const auto& [any, at] : anys) {
    auto ok = parse(with("determinism_tier: read-only", "determinism_tier: unrestricted", with(list, any)));
    ASSERT_TRUE(IsValid(ok)) << any;
    EXPECT_TRUE(ok.manifest->capabilities.egress_any);
    EXPECT_TRUE(ok.manifest->capabilities.egress.empty());
    EXPECT_TRUE(HasError(parse(with(list, any)), "capabilities.egress", at.line, at.column,
                         "requires determinism_tier: unrestricted"))
        << any;
    EXPECT_TRUE(HasError(parse(with("determinism_tier: read-only", "determinism_tier: side-effect", with(list, any))),
                         "capabilities.egress", at.line, at.column, "unrestricted"));
  }
  // "*" mixed with entries, or another scalar.
  EXPECT_TRUE(HasError(parse(with("  egress:\n", "  egress:\n    - \"*\"\n")), "capabilities.egress[0]", 13, 7,
                       "only egress entry"));
  EXPECT_TRUE(HasError(parse(with(list, "  egress: any\n")), "capabilities.egress", 12, 11, "list of"));
  // Empty egress is fine.
  EXPECT_TRUE(IsValid(parse(with("tools:\n  fetch:\n    kind: builtin.http_get\n    url: https://api.example.com/v1\n",
                                 "", with(list, "  egress: []\n")))));
}

TEST(ManifestM2, MoonProxy) {
  const std::string entry = "    - host: api.example.com\n      port: 443\n      protocol: https\n";
  EXPECT_TRUE(IsValid(parse(with(entry, entry + "    - {host: moon, port: 3128, protocol: moon-proxy}\n"))));
  EXPECT_TRUE(HasError(parse(with(entry, entry + "    - {host: proxy, port: 3128, protocol: moon-proxy}\n")),
                       "capabilities.egress[1]", 16, 7, "host \"moon\" and port 3128"));
  EXPECT_TRUE(HasError(parse(with(entry, entry + "    - {host: moon, port: 8080, protocol: moon-proxy}\n")),
                       "capabilities.egress[1]", 16, 7, "3128"));
}

// ---- M3: tools --------------------------------------------------------------------

TEST(ManifestM3, UrlParsing) {
  struct Case {
    const char* url;
    const char* host;
    int port;
    Protocol proto;
  };
  const Case cases[] = {
      {"https://api.example.com/v1", "api.example.com", 443, Protocol::https},
      {"http://api.example.com", "api.example.com", 80, Protocol::http},
      {"wss://api.example.com/socket", "api.example.com", 443, Protocol::https},
      {"ws://api.example.com", "api.example.com", 80, Protocol::http},
      {"HTTPS://API.Example.com:8443/x?y=1#z", "api.example.com", 8443, Protocol::https},
      {"https://[2001:db8::1]:8443/x", "2001:db8::1", 8443, Protocol::https},
      {"http://[::1]/", "::1", 80, Protocol::http},
      {"http://10.1.2.3:8080", "10.1.2.3", 8080, Protocol::http},
  };
  for (const Case& c : cases) {
    auto r = parse(with("url: https://api.example.com/v1", std::string("url: \"") + c.url + "\""));
    ASSERT_TRUE(IsValid(r)) << c.url;
    const Tool& t = r.manifest->tools[0];
    EXPECT_EQ(t.url, c.url);
    ASSERT_TRUE(t.target) << c.url;
    EXPECT_EQ(t.target->host, c.host) << c.url;
    EXPECT_EQ(t.target->port, c.port) << c.url;
    EXPECT_EQ(t.target->protocol, c.proto) << c.url;
  }
  for (const char* bad : {"ftp://a.com/x", "api.example.com/v1", "https://", "https:///x", "https://a.com:0/",
                          "https://a.com:65536/", "https://a.com:/", "https://a.com:x/", "https://user:pw@a.com/",
                          "https://[::1/", "https://::1/", "https://*.a.com/", "https://a b.com/", "https://[::1]x/"}) {
    EXPECT_TRUE(HasError(parse(with("url: https://api.example.com/v1", std::string("url: \"") + bad + "\"")),
                         "tools.fetch.url", 10, 10))
        << bad;
  }
}

TEST(ManifestM3, KindsAndTheirFields) {
  const std::string fetch = "  fetch:\n    kind: builtin.http_get\n    url: https://api.example.com/v1\n";
  // Every http kind needs url.
  for (const char* kind : {"builtin.http_get", "builtin.llm"}) {
    EXPECT_TRUE(IsValid(parse(with("builtin.http_get", kind)))) << kind;
    EXPECT_TRUE(HasError(parse(with(fetch, std::string("  fetch:\n    kind: ") + kind + "\n")), "tools.fetch.url", 9, 5,
                         "required"))
        << kind;
  }
  EXPECT_TRUE(HasError(parse(with("builtin.http_get", "builtin.http_fetch")), "tools.fetch.kind", 9, 11,
                       "unknown tool kind"));
  EXPECT_TRUE(HasError(parse(with("tools:\n  fetch:\n", "tools:\n  fetch:\n    path: /workdir\n")), "tools.fetch.path",
                       9, 11, "not allowed"));
  // fs kinds need path; url is refused.
  EXPECT_TRUE(IsValid(parse(with(fetch, fetch + "  load:\n    kind: builtin.fs_read\n    path: /workdir/inputs/a.json\n"))));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  load:\n    kind: builtin.fs_read\n")), "tools.load.path", 12, 5,
                       "required"));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  load:\n    kind: builtin.fs_read\n    path: inputs/a\n")),
                       "tools.load.path", 13, 11, "absolute"));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  load:\n    kind: builtin.fs_read\n    path: /workdir/../etc\n")),
                       "tools.load.path", 13, 11, "normalised"));
  EXPECT_TRUE(HasError(
      parse(with(fetch, fetch + "  load:\n    kind: builtin.fs_read\n    path: /a\n    url: https://a.com\n")),
      "tools.load.url", 14, 10, "not allowed"));
  // custom needs side_effect.
  EXPECT_TRUE(IsValid(parse(with(fetch, fetch + "  think:\n    kind: custom\n    side_effect: false\n"))));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  think:\n    kind: custom\n")), "tools.think.side_effect", 12, 5,
                       "required for custom"));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  think:\n    kind: custom\n    side_effect: \"no\"\n")),
                       "tools.think.side_effect", 13, 18, "true or false"));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  think:\n    kind: custom\n    side_effect: yes\n")),
                       "tools.think.side_effect", 13, 18, "true or false"));
  EXPECT_TRUE(HasError(parse(with("    url: https://api.example.com/v1\n",
                                  "    url: https://api.example.com/v1\n    side_effect: false\n")),
                       "tools.fetch.side_effect", 11, 18, "only allowed for custom"));
  // Tool names.
  EXPECT_TRUE(HasError(parse(with("  fetch:\n", "  Fetch:\n")), "tools.Fetch", 8, 3, "tool name"));
  EXPECT_TRUE(HasError(parse(with("tools:\n", "tools: [fetch]\n", with(fetch, ""))), "tools", 7, 8, "mapping"));
}

// ---- M4: paths --------------------------------------------------------------------

TEST(ManifestM4, NormalisedAbsolute) {
  for (const char* ok : {"/", "/workdir", "/workdir/out", "/a/b.c/d..e/...x"}) EXPECT_TRUE(is_normalised_absolute(ok)) << ok;
  for (const char* bad : {"", "workdir", "/workdir/", "//workdir", "/workdir//out", "/workdir/./out",
                          "/workdir/../etc", "/..", "/.", "./x"}) {
    EXPECT_FALSE(is_normalised_absolute(bad)) << bad;
  }
}

TEST(ManifestM4, PathCoversByComponent) {
  EXPECT_TRUE(path_covers("/workdir/out", "/workdir/out"));
  EXPECT_TRUE(path_covers("/workdir/out", "/workdir/out/a.json"));
  EXPECT_TRUE(path_covers("/workdir/out", "/workdir/out/a/b"));
  EXPECT_FALSE(path_covers("/workdir/out", "/workdir/outbox"));
  EXPECT_FALSE(path_covers("/workdir/out", "/workdir"));
  EXPECT_FALSE(path_covers("/workdir/out/a", "/workdir/out"));
  EXPECT_TRUE(path_covers("/", "/anything"));
}

TEST(ManifestM4, FsPathsInTheManifest) {
  for (const char* bad : {"workdir", "/workdir/", "/workdir/../etc", "/workdir/./x", "//workdir"}) {
    EXPECT_TRUE(HasError(parse(with("read: [/workdir]", std::string("read: [\"") + bad + "\"]")),
                         "capabilities.fs.read[0]", 17, 12, "absolute, normalised"))
        << bad;
  }
  EXPECT_TRUE(HasError(parse(with("read: [/workdir]", "read: [/workdir, 3, x]")), "capabilities.fs.read[2]", 17, 25));
}

TEST(ManifestM5, WorkdirIsNeverWritable) {
  EXPECT_TRUE(HasError(parse(with("write: [/workdir/out]", "write: [/workdir]")), "capabilities.fs.write[0]", 18, 13,
                       "never writable"));
  EXPECT_TRUE(HasError(parse(with("write: [/workdir/out]", "write: [/]")), "capabilities.fs.write[0]", 18, 13,
                       "never writable"));
}

// ---- host_matches (M2) --------------------------------------------------------------

TEST(ManifestM2, HostMatches) {
  EXPECT_TRUE(host_matches("api.example.com", "api.example.com"));
  EXPECT_TRUE(host_matches("API.example.com", "api.EXAMPLE.com"));
  EXPECT_FALSE(host_matches("api.example.com", "example.com"));
  EXPECT_TRUE(host_matches("*.example.com", "a.example.com"));
  EXPECT_TRUE(host_matches("*.example.com", "a.b.example.com"));
  EXPECT_FALSE(host_matches("*.example.com", "example.com"));
  EXPECT_FALSE(host_matches("*.example.com", "badexample.com"));
  EXPECT_FALSE(host_matches("*.example.com", ".example.com"));
  EXPECT_FALSE(host_matches("*.example.com", "a.example.com.evil.net"));
}

// ---- M6: tier coherence -----------------------------------------------------------

TEST(ManifestM6, ReadOnlyRefusesSideEffectTools) {
  const std::string fetch = "  fetch:\n    kind: builtin.http_get\n    url: https://api.example.com/v1\n";
  for (const char* kind : {"builtin.http_post", "builtin.http_put", "builtin.http_patch", "builtin.http_delete"}) {
    auto r = parse(with("builtin.http_get", kind));
    EXPECT_TRUE(HasError(r, "tools.fetch", 9, 5, "side-effect tool")) << kind;
    EXPECT_TRUE(IsValid(parse(with("determinism_tier: read-only", "determinism_tier: side-effect",
                                   with("builtin.http_get", kind)))))
        << kind;
  }
  EXPECT_TRUE(IsValid(parse(with("builtin.http_get", "builtin.llm"))));  // llm: no side effect
  // fs_write: fine under /workdir/out, a side effect elsewhere.
  EXPECT_TRUE(IsValid(parse(with(fetch, fetch + "  save:\n    kind: builtin.fs_write\n    path: /workdir/out/r.md\n"))));
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  save:\n    kind: builtin.fs_write\n    path: /var/cache/r\n")),
                       "tools.save", 12, 5, "outside /workdir/out"));
  // custom side_effect: true.
  EXPECT_TRUE(HasError(parse(with(fetch, fetch + "  act:\n    kind: custom\n    side_effect: true\n")), "tools.act", 12,
                       5, "side_effect: true"));
  EXPECT_TRUE(IsValid(parse(with("determinism_tier: read-only", "determinism_tier: unrestricted",
                                 with(fetch, fetch + "  act:\n    kind: custom\n    side_effect: true\n")))));
}

TEST(ManifestM6, ReadOnlyWritesOnlyUnderOutOrToPrivateScratch) {
  EXPECT_TRUE(IsValid(parse(with("write: [/workdir/out]", "write: [/workdir/out/cache]"))));
  // Inside /workdir but not /workdir/out: not scratch, refused for read-only.
  EXPECT_TRUE(HasError(parse(with("write: [/workdir/out]", "write: [/workdir/out, /workdir/cache]")),
                       "capabilities.fs.write[1]", 18, 27, "only write under /workdir/out"));
  EXPECT_TRUE(IsValid(parse(with("determinism_tier: read-only", "determinism_tier: side-effect",
                                 with("write: [/workdir/out]", "write: [/workdir/out, /workdir/cache]")))));
  // M6: private scratch paths (the Comet's own tmpfs) are allowed in every tier.
  EXPECT_TRUE(IsValid(parse(with("write: [/workdir/out]", "write: [/workdir/out, /tmp, /home/agent, /var/tmp/x]"))));
  EXPECT_TRUE(IsValid(parse(with("write: [/workdir/out]", "write: [/tmp]"))));
}

TEST(ManifestM6, PrivateScratchPaths) {
  for (const char* p : {"/tmp", "/tmp/scratch", "/home/agent", "/var/tmp", "/scratch"}) {
    EXPECT_TRUE(is_private_scratch(p)) << p;
  }
  for (const char* p : {"/", "/workdir", "/workdir/out", "/workdir/cache", "/usr/local", "/etc/x", "/proc/self",
                        "/dev/shm", "/lib64", "tmp", "/tmp/", "/tmp/../etc"}) {
    EXPECT_FALSE(is_private_scratch(p)) << p;
  }
}

TEST(ManifestM6, TierValues) {
  EXPECT_TRUE(HasError(parse(with("determinism_tier: read-only", "determinism_tier: readonly")),
                       "capabilities.determinism_tier", 19, 21, "unknown tier"));
}

// ---- resources ----------------------------------------------------------------------

TEST(ManifestResources, Values) {
  auto r = parse(kValid + "resources:\n  memory: 1Gi\n  pids: 1\n  timeout: 1500ms\n  write_quota: 100M\n");
  ASSERT_TRUE(IsValid(r));
  EXPECT_EQ(r.manifest->resources.memory_bytes, 1ULL << 30);
  EXPECT_EQ(r.manifest->resources.pids, 1u);
  EXPECT_EQ(r.manifest->resources.timeout_ms, 1500u);
  EXPECT_EQ(r.manifest->resources.write_quota_bytes, 100'000'000u);
  auto r2 = parse(kValid + "resources:\n  memory: 268435456\n  timeout: 5m\n  write_quota: 0\n");
  ASSERT_TRUE(IsValid(r2));
  EXPECT_EQ(r2.manifest->resources.memory_bytes, 256ULL << 20);
  EXPECT_EQ(r2.manifest->resources.timeout_ms, 300'000u);
  EXPECT_EQ(r2.manifest->resources.write_quota_bytes, 0u);
  EXPECT_EQ(r2.manifest->resources.pids, 128u);  // default kept

  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  memory: lots\n"), "resources.memory", 21, 11, "size like"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  memory: 512MB\n"), "resources.memory", 21, 11, "size like"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  memory: 1Ki\n"), "resources.memory", 21, 11, "at least"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  memory: 99999999999999999999999Gi\n"), "resources.memory", 21, 11));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  pids: 0\n"), "resources.pids", 21, 9, "integer"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  timeout: 60\n"), "resources.timeout", 21, 12, "duration"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  timeout: 0s\n"), "resources.timeout", 21, 12, "positive"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  timeout: 1d\n"), "resources.timeout", 21, 12, "duration"));
  EXPECT_TRUE(HasError(parse(kValid + "resources: 1Gi\n"), "resources", 20, 12, "mapping"));
}

TEST(ManifestResources, Grace) {
  EXPECT_EQ(parse(kValid).manifest->resources.grace_ms, 5'000u);  // C9 default
  auto r = parse(kValid + "resources:\n  grace: 1500ms\n");
  ASSERT_TRUE(IsValid(r));
  EXPECT_EQ(r.manifest->resources.grace_ms, 1500u);
  auto zero = parse(kValid + "resources:\n  grace: 0s\n");
  ASSERT_TRUE(IsValid(zero));
  EXPECT_EQ(zero.manifest->resources.grace_ms, 0u);
  EXPECT_EQ(parse(kValid + "resources:\n  grace: 1h\n").manifest->resources.grace_ms, 3'600'000u);
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  grace: 5\n"), "resources.grace", 21, 10, "duration"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  grace: -1s\n"), "resources.grace", 21, 10, "duration"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  grace: 2h\n"), "resources.grace", 21, 10, "at most 1h"));
  EXPECT_TRUE(HasError(parse(kValid + "resources:\n  grace: [5s]\n"), "resources.grace", 21, 10));
}

// ---- examples -----------------------------------------------------------------------

TEST(ManifestExamples, Fields) {
  auto ok = parse(kValid +
                  "examples:\n  - name: basic\n    input: examples/in.json\n    args: [-v]\n    tools: [fetch]\n"
                  "    expect: {exit_code: 3, stdout_contains: done, outputs: [a/b.md]}\n  - name: bare\n");
  ASSERT_TRUE(IsValid(ok));
  ASSERT_EQ(ok.manifest->examples.size(), 2u);
  EXPECT_EQ(ok.manifest->examples[0].input_mark, (Mark{22, 12}));
  EXPECT_EQ(ok.manifest->examples[0].expect.exit_code, 3);
  EXPECT_EQ(ok.manifest->examples[1].key_path, "examples[1]");
  EXPECT_FALSE(ok.manifest->examples[1].expect.exit_code);

  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - input: x\n"), "examples[0].name", 21, 5, "required"));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n    tools: [fetch, nope]\n"), "examples[0].tools[1]", 22,
                       20, "nope"));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n    input: /etc/passwd\n"), "examples[0].input", 22, 12,
                       "relative path"));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n    input: ../secret\n"), "examples[0].input", 22, 12));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n    expect: {exit_code: 256}\n"),
                       "examples[0].expect.exit_code", 22, 25, "0..255"));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n    expect: {outputs: [../x]}\n"),
                       "examples[0].expect.outputs[0]", 22, 24, "relative"));
  EXPECT_TRUE(HasError(parse(kValid + "examples:\n  - name: a\n  - name: a\n"), "examples[1].name", 22, 11, "duplicate"));
  EXPECT_TRUE(HasError(parse(kValid + "examples: {name: a}\n"), "examples", 20, 11, "must be a list"));
}

}  // namespace
}  // namespace soyaos::manifest::testing

namespace soyaos::manifest::testing {
namespace {

TEST(ManifestM3, ToolHasSideEffect) {
  auto tool = [](ToolKind k, std::string path = "", std::optional<bool> side = std::nullopt) {
    Tool t;
    t.kind = k;
    t.path = std::move(path);
    t.side_effect = side;
    return t;
  };
  EXPECT_FALSE(tool_has_side_effect(tool(ToolKind::http_get)));
  EXPECT_FALSE(tool_has_side_effect(tool(ToolKind::llm)));
  EXPECT_FALSE(tool_has_side_effect(tool(ToolKind::fs_read, "/etc")));
  for (ToolKind k : {ToolKind::http_post, ToolKind::http_put, ToolKind::http_patch, ToolKind::http_delete}) {
    EXPECT_TRUE(tool_has_side_effect(tool(k))) << to_string(k);
  }
  EXPECT_FALSE(tool_has_side_effect(tool(ToolKind::fs_write, "/workdir/out")));
  EXPECT_FALSE(tool_has_side_effect(tool(ToolKind::fs_write, "/workdir/out/a/b")));
  EXPECT_TRUE(tool_has_side_effect(tool(ToolKind::fs_write, "/workdir/outbox")));
  EXPECT_TRUE(tool_has_side_effect(tool(ToolKind::fs_write, "/tmp/x")));
  EXPECT_TRUE(tool_has_side_effect(tool(ToolKind::custom, "", true)));
  EXPECT_FALSE(tool_has_side_effect(tool(ToolKind::custom, "", false)));
}

}  // namespace
}  // namespace soyaos::manifest::testing
