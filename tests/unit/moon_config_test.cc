// The Moon's configuration, moon.yaml (src/moon/config.h, SPEC.md C6a): every key, every
// error with its line:column, the defaults, and where the file is looked for.
#include "moon/config.h"

#include <stdlib.h>  // setenv, unsetenv
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace soyaos::moon {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> errors_of(const std::string& text) {
  const MoonConfigLoad r = parse_moon_config(text, "moon.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.errors) out.push_back(d.format());
  EXPECT_EQ(r.config.has_value(), r.errors.empty());
  return out;
}

MoonConfig parsed(const std::string& text) {
  MoonConfigLoad r = parse_moon_config(text, "moon.yaml");
  for (const auto& d : r.errors) ADD_FAILURE() << d.format();
  return r.config.value_or(MoonConfig{});
}

std::vector<std::string> ips(const std::vector<policy::IpAddress>& addrs) {
  std::vector<std::string> out;
  for (const auto& a : addrs) out.push_back(policy::to_string(a));
  return out;
}

TEST(MoonConfig, EveryKey) {
  const MoonConfig c = parsed(R"(# the operator's policy
dns:
  hosts:
    echo.test: 127.0.0.1
    Both.Test: [127.0.0.2, "::1"]
    v6.test: "[2001:db8::5]"
  upstream: 192.0.2.53:5353
egress:
  deny: [evil.example.com, "*.Bad.Example", 203.0.113.7, "[2001:db8::66]", evil.example.com]
  allow_private: [10.0.0.0/8, "fd00::/8", 192.168.1.7]
proxy:
  allow:
    - {host: api.example.com, port: 443, protocol: https}
    - host: "*.corp.example"
      port: 8080
      protocol: http
    - {host: 192.0.2.10, port: 5432, protocol: tcp}
)");
  EXPECT_TRUE(c.path.empty());
  ASSERT_EQ(c.network.dns_hosts.size(), 3u);
  EXPECT_EQ(ips(c.network.dns_hosts.at("echo.test")), (std::vector<std::string>{"127.0.0.1"}));
  EXPECT_EQ(ips(c.network.dns_hosts.at("both.test")), (std::vector<std::string>{"127.0.0.2", "::1"}));
  EXPECT_EQ(ips(c.network.dns_hosts.at("v6.test")), (std::vector<std::string>{"2001:db8::5"}));
  ASSERT_TRUE(c.network.dns_upstream.has_value());
  EXPECT_EQ(policy::to_string(c.network.dns_upstream->server), "192.0.2.53");
  EXPECT_EQ(c.network.dns_upstream->port, 5353);
  EXPECT_EQ(c.network.egress_deny,
            (std::vector<std::string>{"evil.example.com", "*.bad.example", "203.0.113.7", "2001:db8::66"}));
  ASSERT_EQ(c.network.allow_private.size(), 3u);
  EXPECT_EQ(policy::to_string(c.network.allow_private[0]), "10.0.0.0/8");
  EXPECT_EQ(policy::to_string(c.network.allow_private[1]), "fd00::/8");
  EXPECT_EQ(policy::to_string(c.network.allow_private[2]), "192.168.1.7/32");
  ASSERT_EQ(c.proxy_allow.size(), 3u);
  EXPECT_EQ(c.proxy_allow[0].host, "api.example.com");
  EXPECT_EQ(c.proxy_allow[0].port, 443);
  EXPECT_EQ(c.proxy_allow[0].protocol, manifest::Protocol::https);
  EXPECT_EQ(c.proxy_allow[0].key_path, "proxy.allow[0]");
  EXPECT_EQ(c.proxy_allow[0].mark, (manifest::Mark{13, 7}));
  EXPECT_EQ(c.proxy_allow[1].host, "*.corp.example");
  EXPECT_EQ(c.proxy_allow[1].protocol, manifest::Protocol::http);
  EXPECT_EQ(c.proxy_allow[1].key_path, "proxy.allow[1]");
  EXPECT_EQ(c.proxy_allow[2].host, "192.0.2.10");
  EXPECT_EQ(c.proxy_allow[2].protocol, manifest::Protocol::tcp);
}

TEST(MoonConfig, ConnectToMapsDestinationsToAddressesAndPorts) {
  const MoonConfig c = parsed(R"(egress:
  connect_to:
    "api.example.com:443": "127.0.0.1:8443"
    "API.Example.com.:80": "127.0.0.1:8080"
    "192.0.2.10:5432": "[::1]:15432"
    "[2001:DB8::1]:53": "127.0.0.53:5353"
)");
  const auto& net = c.network;
  ASSERT_EQ(net.connect_to.size(), 4u);
  auto t = net.connect_target("api.example.com", 443);
  ASSERT_TRUE(t);
  EXPECT_EQ(policy::to_string(t->addr), "127.0.0.1");
  EXPECT_EQ(t->port, 8443);
  t = net.connect_target("API.EXAMPLE.COM.", 80);  // the lookup normalises the name too
  ASSERT_TRUE(t);
  EXPECT_EQ(t->port, 8080);
  EXPECT_FALSE(net.connect_target("api.example.com", 8443));  // per port: only the ports named
  EXPECT_FALSE(net.connect_target("other.example.com", 443));
  t = net.connect_target("192.0.2.10", 5432);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->addr.v6);
  EXPECT_EQ(t->port, 15432);
  t = net.connect_target("2001:db8:0::1", 53);  // any spelling of the address
  ASSERT_TRUE(t);
  EXPECT_EQ(policy::to_string(t->addr), "127.0.0.53");
}

TEST(MoonConfig, ConnectToErrorsSayWhatTheFormIs) {
  const auto errors = errors_of(R"(egress:
  connect_to:
    "api.example.com": "127.0.0.1:8443"
    "*.example.com:443": "127.0.0.1:8443"
    "a.example.com:0": "127.0.0.1:8443"
    "2001:db8::1:443": "127.0.0.1:8443"
    "b.example.com:443": "localhost:8443"
    "c.example.com:443": "127.0.0.1"
    "d.example.com:443": "::1:8443"
    "e.example.com:443": [127.0.0.1]
    "f.example.com:443": "127.0.0.1:8443"
    "F.example.com:443": "127.0.0.1:9443"
)");
  ASSERT_EQ(errors.size(), 9u) << ::testing::PrintToString(errors);
  const std::string key = "must be HOST:PORT: a DNS name or IP literal (IPv6 in brackets), no wildcard, and a port "
                          "1..65535 (\"api.example.com:443\", \"[2001:db8::1]:443\")";
  const std::string value = "must be ADDR:PORT: an IPv4 or IPv6 address (IPv6 in brackets) and a port 1..65535 "
                            "(\"127.0.0.1:8443\", \"[::1]:8443\"); names are not resolved here";
  EXPECT_EQ(errors[0], "moon.yaml:3:5: error: egress.connect_to.api.example.com: \"api.example.com\" " + key);
  EXPECT_EQ(errors[1], "moon.yaml:4:5: error: egress.connect_to.*.example.com:443: \"*.example.com:443\" " + key);
  EXPECT_EQ(errors[2], "moon.yaml:5:5: error: egress.connect_to.a.example.com:0: \"a.example.com:0\" " + key);
  EXPECT_EQ(errors[3], "moon.yaml:6:5: error: egress.connect_to.2001:db8::1:443: \"2001:db8::1:443\" " + key);
  EXPECT_EQ(errors[4], "moon.yaml:7:26: error: egress.connect_to.b.example.com:443: \"localhost:8443\" " + value);
  EXPECT_EQ(errors[5], "moon.yaml:8:26: error: egress.connect_to.c.example.com:443: \"127.0.0.1\" " + value);
  EXPECT_EQ(errors[6], "moon.yaml:9:26: error: egress.connect_to.d.example.com:443: \"::1:8443\" " + value);
  EXPECT_EQ(errors[7], "moon.yaml:10:26: error: egress.connect_to.e.example.com:443: must be a string, got a list");
  EXPECT_EQ(errors[8],
            "moon.yaml:12:5: error: egress.connect_to.F.example.com:443: duplicate destination (first defined at 11:5)");
}

TEST(MoonConfig, InsecureRegistriesAreHostPort) {
  const MoonConfig c = parsed("registries:\n  insecure: [\"127.0.0.1:5000\", \"registry.lan:80\"]\n");
  EXPECT_EQ(c.insecure_registries, (std::vector<std::string>{"127.0.0.1:5000", "registry.lan:80"}));
  EXPECT_EQ(errors_of("registries:\n  insecure: [registry.lan, \"a:0\", \"h/x:1\"]\n"),
            (std::vector<std::string>{
                "moon.yaml:2:14: error: registries.insecure[0]: \"registry.lan\" must be HOST:PORT (the registry as references name it)",
                "moon.yaml:2:28: error: registries.insecure[1]: \"a:0\" must be HOST:PORT (the registry as references name it)",
                "moon.yaml:2:35: error: registries.insecure[2]: \"h/x:1\" must be HOST:PORT (the registry as references name it)"}));
}

TEST(MoonConfig, TlsCaFilesAreListedAsWritten) {
  const MoonConfig c = parsed("tls:\n  ca_files: [/etc/ssl/test-ca.pem, certs/dev.pem]\n");
  ASSERT_EQ(c.ca_files.size(), 2u);
  EXPECT_EQ(c.ca_files[0].path, "/etc/ssl/test-ca.pem");
  EXPECT_EQ(c.ca_files[1].key_path, "tls.ca_files[1]");
  EXPECT_EQ(c.network.tls_ca_files, (std::vector<std::string>{"/etc/ssl/test-ca.pem", "certs/dev.pem"}));
  EXPECT_EQ(errors_of("tls:\n  ca_files: /etc/ssl/test-ca.pem\n"),
            (std::vector<std::string>{
                "moon.yaml:2:13: error: tls.ca_files: must be a list of paths of PEM certificate files, got a scalar"}));
  EXPECT_EQ(errors_of("tls:\n  ca_file: [a.pem]\n"),
            (std::vector<std::string>{"moon.yaml:2:3: error: tls.ca_file: unknown key (allowed: ca_files)"}));
}

TEST(MoonConfig, UpstreamForms) {
  auto up = [](const std::string& v) { return parsed("dns:\n  upstream: " + v + "\n").network.dns_upstream; };
  EXPECT_FALSE(up("system").has_value());
  auto a = up("192.0.2.53");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->port, 53);
  auto b = up("\"[2001:db8::53]:5353\"");
  ASSERT_TRUE(b);
  EXPECT_EQ(policy::to_string(b->server), "2001:db8::53");
  EXPECT_EQ(b->port, 5353);
  auto c = up("2001:db8::53");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->server.v6);
  EXPECT_EQ(c->port, 53);
  auto d = up("\"[2001:db8::53]\"");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->port, 53);
}

TEST(MoonConfig, DefaultsForEmptyOrCommentOnlyText) {
  for (const std::string text : {"", "\n", "# nothing configured yet\n", "---\n"}) {
    const MoonConfigLoad r = parse_moon_config(text, "moon.yaml");
    ASSERT_TRUE(r.config.has_value()) << text << (r.errors.empty() ? "" : r.errors[0].format());
    EXPECT_TRUE(r.config->network.dns_hosts.empty());
    EXPECT_FALSE(r.config->network.dns_upstream.has_value());
    EXPECT_TRUE(r.config->network.egress_deny.empty());
    EXPECT_TRUE(r.config->network.allow_private.empty());
    EXPECT_TRUE(r.config->proxy_allow.empty());
  }
}

TEST(MoonConfig, EveryErrorWithItsPositionInOnePass) {
  const std::string text = R"(dns:
  hosts:
    "*.wild.test": 127.0.0.1
    192.0.2.1: 127.0.0.1
    bad.test: 127.1
    list.test: [127.0.0.1, nope]
    empty.test: []
    map.test: {a: 1}
    Echo.test: 127.0.0.1
    echo.test: 127.0.0.2
  upstream: 192.0.2.53:99999
  upstreem: system
egress:
  deny: [ok.example, "*.com.", "-bad-", "*"]
  allow_private: [10.0.0.1/8, 10.0.0.0/33, example.com/8]
  allow_private: []
proxy:
  allow:
    - {host: api.example.com, port: 443, protocol: udp}
    - {host: api.example.com, port: "443", protocol: moon-proxy}
    - {host: "bad host", port: 0, protocol: https, extra: 1}
    - {port: 443}
    - just-a-string
colour: blue
)";
  const std::vector<std::string> want = {
      "moon.yaml:3:5: error: dns.hosts.*.wild.test: \"*.wild.test\" must be a DNS name (no wildcards, no IP literals)",
      "moon.yaml:4:5: error: dns.hosts.192.0.2.1: \"192.0.2.1\" must be a DNS name (no wildcards, no IP literals)",
      "moon.yaml:5:15: error: dns.hosts.bad.test: \"127.1\" is not an IPv4 or IPv6 address",
      "moon.yaml:6:28: error: dns.hosts.list.test[1]: \"nope\" is not an IPv4 or IPv6 address",
      "moon.yaml:7:17: error: dns.hosts.empty.test: must list at least one address",
      "moon.yaml:8:15: error: dns.hosts.map.test: must be an address or a list of addresses, got a mapping",
      "moon.yaml:10:5: error: dns.hosts.echo.test: duplicate name (first defined at 9:5)",
      "moon.yaml:11:13: error: dns.upstream: \"192.0.2.53:99999\": the port must be an integer 1..65535",
      "moon.yaml:12:3: error: dns.upstreem: unknown key (allowed: hosts upstream)",
      "moon.yaml:14:22: error: egress.deny[1]: \"*.com.\" must be a DNS name, a leading *. wildcard (*.example.com) or "
      "an IP literal",
      "moon.yaml:14:32: error: egress.deny[2]: \"-bad-\" must be a DNS name, a leading *. wildcard (*.example.com) or "
      "an IP literal",
      "moon.yaml:14:41: error: egress.deny[3]: \"*\" must be a DNS name, a leading *. wildcard (*.example.com) or an IP "
      "literal",
      "moon.yaml:15:19: error: egress.allow_private[0]: \"10.0.0.1/8\" has host bits set below the prefix (did you "
      "mean 10.0.0.0/8?)",
      "moon.yaml:15:31: error: egress.allow_private[1]: \"10.0.0.0/33\" must be an address range in CIDR form: "
      "10.0.0.0/8, fd00::/8 (or a single address)",
      "moon.yaml:15:44: error: egress.allow_private[2]: \"example.com/8\" must be an address range in CIDR form: "
      "10.0.0.0/8, fd00::/8 (or a single address)",
      "moon.yaml:16:3: error: egress.allow_private: duplicate key (first defined at 15:3)",
      "moon.yaml:19:52: error: proxy.allow[0].protocol: protocol \"udp\" is not one the Moon proxy can allow (https, "
      "http or tcp)",
      "moon.yaml:20:37: error: proxy.allow[1].port: must be an integer 1..65535",
      "moon.yaml:20:54: error: proxy.allow[1].protocol: protocol \"moon-proxy\" is not one the Moon proxy can allow "
      "(https, http or tcp)",
      "moon.yaml:21:14: error: proxy.allow[2].host: \"bad host\" must be a DNS name, a leading *. wildcard "
      "(*.example.com) or an IP literal",
      "moon.yaml:21:32: error: proxy.allow[2].port: must be an integer 1..65535",
      "moon.yaml:21:52: error: proxy.allow[2].extra: unknown key (allowed: host port protocol)",
      "moon.yaml:22:7: error: proxy.allow[3].host: required key is missing",
      "moon.yaml:22:7: error: proxy.allow[3].protocol: required key is missing",
      "moon.yaml:23:7: error: proxy.allow[4]: must be a mapping, got a scalar",
      "moon.yaml:24:1: error: colour: unknown key (allowed: dns egress proxy registries tls trust)",
  };
  EXPECT_EQ(errors_of(text), want);
}

TEST(MoonConfig, ShapeErrors) {
  EXPECT_EQ(errors_of("- a\n- b\n"), (std::vector<std::string>{"moon.yaml:1:1: error: must be a mapping, got a list"}));
  EXPECT_EQ(errors_of("dns: 3\n"), (std::vector<std::string>{"moon.yaml:1:6: error: dns: must be a mapping, got a scalar"}));
  EXPECT_EQ(errors_of("egress:\n  deny: evil.example.com\n"),
            (std::vector<std::string>{"moon.yaml:2:9: error: egress.deny: must be a list of hosts, got a scalar"}));
  EXPECT_EQ(errors_of("proxy:\n  allow: {host: a.example, port: 1, protocol: tcp}\n"),
            (std::vector<std::string>{
                "moon.yaml:2:10: error: proxy.allow: must be a list of {host, port, protocol} entries, got a mapping"}));
  EXPECT_EQ(errors_of("dns:\n  upstream: [2001:db8::53]:53\n"),
            (std::vector<std::string>{"moon.yaml:2:27: error: invalid YAML: end of map not found"}));
  EXPECT_EQ(errors_of("dns:\n  upstream: [2001:db8::53]\n"),
            (std::vector<std::string>{"moon.yaml:2:13: error: dns.upstream: must be \"system\" or an address; quote a "
                                      "bracketed IPv6 address: \"[2001:db8::53]:53\""}));
  EXPECT_EQ(errors_of("dns:\n  upstream: resolver.example\n"),
            (std::vector<std::string>{
                "moon.yaml:2:13: error: dns.upstream: \"resolver.example\" must be \"system\" or a DNS server address: "
                "192.0.2.53, 192.0.2.53:5353, 2001:db8::53 or [2001:db8::53]:53"}));
  EXPECT_EQ(errors_of("dns:\n  hosts:\n    a.test: 1.2.3.4\n    a.test: 1.2.3.5\n"),
            (std::vector<std::string>{"moon.yaml:4:5: error: dns.hosts.a.test: duplicate key (first defined at 3:5)"}));
}

TEST(MoonConfig, YamlLevelErrorsComeFromTheBoundedTree) {
  auto e = errors_of("dns: &a {hosts: {}}\negress: *a\n");
  ASSERT_FALSE(e.empty());
  EXPECT_NE(e[0].find("moon.yaml:"), std::string::npos);
  e = errors_of("dns:\n  hosts: {a.test: 1.2.3.4\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("invalid YAML"), std::string::npos) << e[0];
  e = errors_of(std::string("dns:\0\n", 6));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("NUL"), std::string::npos) << e[0];
  e = errors_of(std::string(kMaxMoonConfigBytes + 1, '#'));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("larger than 4194304 bytes"), std::string::npos) << e[0];
}

class MoonConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/soyaos-moon-config-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    home_ = tmpl;
    ::unsetenv("SOYAOS_MOON_CONFIG");
  }
  void TearDown() override {
    ::unsetenv("SOYAOS_MOON_CONFIG");
    std::error_code ec;
    fs::remove_all(home_, ec);
  }
  void write(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
  }
  fs::path home_;
};

TEST_F(MoonConfigFiles, AbsentMeansDefaults) {
  const MoonConfigLoad r = load_moon_config(home_);
  ASSERT_TRUE(r.config.has_value());
  EXPECT_TRUE(r.errors.empty());
  EXPECT_TRUE(r.config->path.empty());
  EXPECT_FALSE(r.config->network.dns_upstream.has_value());
}

TEST_F(MoonConfigFiles, ReadsHomeMoonYaml) {
  write(home_ / "moon.yaml", "egress:\n  deny: [evil.example.com]\n");
  const MoonConfigLoad r = load_moon_config(home_);
  ASSERT_TRUE(r.config.has_value());
  EXPECT_EQ(r.config->path, home_ / "moon.yaml");
  EXPECT_TRUE(r.config->network.denies("evil.example.com"));
}

TEST_F(MoonConfigFiles, ErrorsNameTheFile) {
  write(home_ / "moon.yaml", "egress:\n  deny: [\"bad host\"]\n");
  const MoonConfigLoad r = load_moon_config(home_);
  ASSERT_FALSE(r.config.has_value());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].format(), (home_ / "moon.yaml").string() +
                                      ":2:10: error: egress.deny[0]: \"bad host\" must be a DNS name, a leading *. "
                                      "wildcard (*.example.com) or an IP literal");
}

TEST_F(MoonConfigFiles, EnvironmentVariableWinsAndMustExist) {
  write(home_ / "moon.yaml", "egress:\n  deny: [home.example]\n");
  write(home_ / "other.yaml", "egress:\n  deny: [other.example]\n");
  ::setenv("SOYAOS_MOON_CONFIG", (home_ / "other.yaml").c_str(), 1);
  MoonConfigLoad r = load_moon_config(home_);
  ASSERT_TRUE(r.config.has_value());
  EXPECT_EQ(r.config->path, home_ / "other.yaml");
  EXPECT_TRUE(r.config->network.denies("other.example"));
  EXPECT_FALSE(r.config->network.denies("home.example"));

  ::setenv("SOYAOS_MOON_CONFIG", (home_ / "missing.yaml").c_str(), 1);
  r = load_moon_config(home_);
  ASSERT_FALSE(r.config.has_value());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].format(), (home_ / "missing.yaml").string() +
                                      ": error: cannot open (named by SOYAOS_MOON_CONFIG): No such file or directory");

  ::setenv("SOYAOS_MOON_CONFIG", "", 1);  // empty: as if unset
  r = load_moon_config(home_);
  ASSERT_TRUE(r.config.has_value());
  EXPECT_TRUE(r.config->network.denies("home.example"));
}

TEST_F(MoonConfigFiles, SymlinkIsFollowedFifoAndDirectoryRefused) {
  write(home_ / "real.yaml", "egress:\n  deny: [linked.example]\n");
  fs::create_symlink(home_ / "real.yaml", home_ / "moon.yaml");
  MoonConfigLoad r = load_moon_config(home_);
  ASSERT_TRUE(r.config.has_value());
  EXPECT_TRUE(r.config->network.denies("linked.example"));

  fs::remove(home_ / "moon.yaml");
  ASSERT_EQ(::mkfifo((home_ / "moon.yaml").c_str(), 0600), 0);
  r = load_moon_config(home_);  // must not hang on the FIFO
  ASSERT_FALSE(r.config.has_value());
  EXPECT_EQ(r.errors.at(0).format(), (home_ / "moon.yaml").string() + ": error: is not a regular file");

  fs::remove(home_ / "moon.yaml");
  fs::create_directory(home_ / "moon.yaml");
  r = load_moon_config(home_);
  ASSERT_FALSE(r.config.has_value());
  EXPECT_NE(r.errors.at(0).message.find("regular file"), std::string::npos);
}

TEST_F(MoonConfigFiles, OversizedFileRefusedBeforeReading) {
  {
    std::ofstream out(home_ / "moon.yaml", std::ios::binary);
    out.seekp(static_cast<std::streamoff>(kMaxMoonConfigBytes));
    out.put('\n');
  }
  const MoonConfigLoad r = load_moon_config(home_);
  ASSERT_FALSE(r.config.has_value());
  EXPECT_NE(r.errors.at(0).message.find("larger than"), std::string::npos);
}

// A self-signed CA certificate (openssl req -x509 -newkey ec, CN "soyaos test CA").
constexpr const char* kTestCaPem = R"(-----BEGIN CERTIFICATE-----
MIIBiTCCAS+gAwIBAgIUXnMc4mXAXp8ZU1xYa65hCyfukyEwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOc295YW9zIHRlc3QgQ0EwIBcNMjYxMjAxMDg1MjE5WhgPMjEy
NjExMDcwODUyMTlaMBkxFzAVBgNVBAMMDnNveWFvcyB0ZXN0IENBMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAETA+rVyFioC6mOMDTG5GL8Tc/UADBV6Dx/Urozry8
aFtj1spsofFfT9luB42Rx0AeTfCYgU073Ziw/PYWW5CLYaNTMFEwHQYDVR0OBBYE
FF22l8jcmuIR2PXbvW/ZDjcVJ0RmMB8GA1UdIwQYMBaAFF22l8jcmuIR2PXbvW/Z
DjcVJ0RmMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgeDGx2t9l
AT6AQPuXfU8lVjiO37a61yChUeVtmotbA+YCIQCW8NP7BKGCyt67ckQWGCLPNlwv
p6RGtGNaGuZGKXUO9Q==
-----END CERTIFICATE-----
)";

TEST_F(MoonConfigFiles, CaFilesAreResolvedFromMoonYamlsDirectoryAndChecked) {
  fs::create_directories(home_ / "certs");
  write(home_ / "certs" / "dev.pem", kTestCaPem);
  write(home_ / "bundle.pem", std::string(kTestCaPem) + "# a comment between certificates\n" + kTestCaPem);
  write(home_ / "moon.yaml", "tls:\n  ca_files: [certs/dev.pem, " + (home_ / "bundle.pem").string() + "]\n");
  const MoonConfigLoad r = load_moon_config(home_);
  ASSERT_TRUE(r.config.has_value()) << (r.errors.empty() ? "" : r.errors[0].format());
  EXPECT_EQ(r.config->network.tls_ca_files,
            (std::vector<std::string>{(home_ / "certs" / "dev.pem").string(), (home_ / "bundle.pem").string()}));
}

TEST_F(MoonConfigFiles, BadCaFilesAreErrorsWithTheirPosition) {
  const std::string pem(kTestCaPem);
  write(home_ / "key.pem", "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n");
  // The second certificate lost a line in a copy and paste.
  const auto cut = pem.find('\n', pem.find('\n') + 1);
  write(home_ / "broken.pem", pem + pem.substr(0, cut) + pem.substr(pem.find('\n', cut + 1)));
  fs::create_directory(home_ / "dir.pem");
  write(home_ / "moon.yaml", "tls:\n  ca_files:\n    - missing.pem\n    - key.pem\n    - broken.pem\n    - dir.pem\n");
  const MoonConfigLoad r = load_moon_config(home_);
  ASSERT_FALSE(r.config.has_value());
  ASSERT_EQ(r.errors.size(), 4u);
  const std::string file = (home_ / "moon.yaml").string();
  EXPECT_EQ(r.errors[0].format(), file + ":3:7: error: tls.ca_files[0]: \"" + (home_ / "missing.pem").string() +
                                      "\": cannot open: No such file or directory");
  EXPECT_EQ(r.errors[1].format(), file + ":4:7: error: tls.ca_files[1]: \"" + (home_ / "key.pem").string() +
                                      "\": holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  EXPECT_EQ(r.errors[2].format(), file + ":5:7: error: tls.ca_files[2]: \"" + (home_ / "broken.pem").string() +
                                      "\": certificate 2 of 2 is not a valid PEM X.509 certificate");
  EXPECT_EQ(r.errors[3].format(), file + ":6:7: error: tls.ca_files[3]: \"" + (home_ / "dir.pem").string() +
                                      "\": is not a regular file");
}

}  // namespace
}  // namespace soyaos::moon
