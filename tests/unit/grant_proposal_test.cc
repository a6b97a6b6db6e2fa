// policy::propose_grants: denied attempts → the manifest lines that would allow them
// (issue #13). Pure: every case is a list of attempts as the violation events name them.
#include "policy/grant_proposal.h"
#include "policy/learn_proposal.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <string>
#include <vector>

namespace soyaos::policy {
namespace {

DeniedAttempt fs_read(const std::string& path, uint64_t n = 1) { return {"fs", "read", path, "ENOENT", "", n}; }
DeniedAttempt fs_write(const std::string& path, uint64_t n = 1) { return {"fs", "write", path, "EACCES", "", n}; }
DeniedAttempt net(const std::string& resource, const std::string& err = "ECONNREFUSED", const std::string& detail = "") {
  return {"network", "", resource, err, detail, 1};
}

std::vector<std::string> hints(const std::vector<DeniedAttempt>& attempts) {
  std::vector<std::string> out;
  for (const auto& p : propose_grants(attempts).items) out.push_back(hint_line(p));
  return out;
}

TEST(GrantProposal, OneReadIsThePathItself) {
  auto r = propose_grants(std::vector{fs_read("/data/config.json")});
  ASSERT_EQ(r.items.size(), 1U);
  const auto& p = r.items[0];
  EXPECT_TRUE(p.grantable);
  EXPECT_EQ(p.section, "capabilities.fs.read");
  EXPECT_EQ(p.entry, "- /data/config.json");
  EXPECT_EQ(p.path, "/data/config.json");
  EXPECT_EQ(p.covers, "/data/config.json: 1 read");
  EXPECT_EQ(hint_line(p), "to allow: add  - /data/config.json  under capabilities.fs.read  (/data/config.json: 1 read)");
}

TEST(GrantProposal, ReadsInOneDirectoryAreThatDirectory) {
  auto r = propose_grants(std::vector{fs_read("/data/a.json", 2), fs_read("/data/b.json"), fs_read("/srv/x")});
  ASSERT_EQ(r.items.size(), 2U);
  EXPECT_EQ(r.items[0].entry, "- /data");
  EXPECT_EQ(r.items[0].covers, "/data/*: 3 reads");
  EXPECT_EQ(r.items[0].count, 3U);
  EXPECT_EQ(r.items[1].entry, "- /srv/x");
}

TEST(GrantProposal, ADirectoryAndWhatIsUnderItAreOneProposal) {
  auto r = propose_grants(std::vector{fs_read("/data"), fs_read("/data/deep/x.json"), fs_read("/data-2")});
  ASSERT_EQ(r.items.size(), 2U);
  EXPECT_EQ(r.items[0].entry, "- /data");
  EXPECT_EQ(r.items[0].covers, "/data/*: 2 reads");
  EXPECT_EQ(r.items[1].entry, "- /data-2");  // whole components: /data does not cover /data-2
}

TEST(GrantProposal, WritesAreTheDirectoryTheyCreateIn) {
  std::vector<DeniedAttempt> a;
  for (int i = 0; i < 12; ++i) a.push_back(fs_write("/tmp/f" + std::to_string(i)));
  a.push_back(fs_write("/tmp/sub/deeper"));
  a.push_back(fs_write("/workdir/out/report.md"));
  a.push_back(fs_write("/workdir/out/sub/x"));
  a.push_back(fs_write("/scratch"));  // mkdir of a top-level directory: that directory
  auto h = hints(a);
  ASSERT_EQ(h.size(), 3U);
  EXPECT_EQ(h[0], "to allow: add  - /scratch  under capabilities.fs.write  (/scratch: 1 write)");
  EXPECT_EQ(h[1], "to allow: add  - /tmp  under capabilities.fs.write  (/tmp/*: 13 writes)");
  EXPECT_EQ(h[2], "to allow: add  - /workdir/out  under capabilities.fs.write  (/workdir/out/*: 2 writes)");
}

TEST(GrantProposal, NeverTheRootNorTheRuntimeLayerNorThePack) {
  // Two top-level paths: their directory would be "/", never proposed.
  auto r = propose_grants(std::vector{fs_read("/a"), fs_read("/b")});
  ASSERT_EQ(r.items.size(), 2U);
  EXPECT_EQ(r.items[0].entry, "- /a");
  EXPECT_EQ(r.items[1].entry, "- /b");
  // The runtime layer: not grantable, and never grouped into.
  r = propose_grants(std::vector{fs_read("/etc/shadow"), fs_read("/etc/machine-id"), fs_write("/usr/lib/x"),
                                 fs_read("/proc/kallsyms"), fs_read("/sys/kernel/x"), fs_write("/var/lib/libuuid/x")});
  for (const auto& p : r.items) {
    EXPECT_FALSE(p.grantable) << p.covers;
    EXPECT_TRUE(p.entry.empty());
  }
  auto h = hints(std::vector{fs_read("/etc/shadow"), fs_read("/etc/machine-id")});
  ASSERT_EQ(h.size(), 1U);
  EXPECT_EQ(h[0],
            "not grantable: read (2 distinct: /etc/machine-id, …): 2 attempts  (/etc belongs to the Comet (its runtime "
            "layer or kernel interfaces): a pack cannot add host files there; ship the file in the pack or pass it "
            "with --input)");
  // The pack and its inputs are never writable.
  r = propose_grants(std::vector{fs_write("/workdir/x.txt"), fs_write("/workdir/inputs/a")});
  ASSERT_EQ(r.items.size(), 2U);
  EXPECT_FALSE(r.items[0].grantable);
  EXPECT_NE(r.items[0].note.find("never writable"), std::string::npos);
  EXPECT_NE(r.items[1].note.find("inputs are read-only"), std::string::npos);
  // A path the Comet could not name.
  r = propose_grants(std::vector{fs_read("<unresolved>")});
  ASSERT_EQ(r.items.size(), 1U);
  EXPECT_FALSE(r.items[0].grantable);
}

TEST(GrantProposal, GroupingDoesNotClimbIntoARuntimeLayerDirectory) {
  // /var would cover the runtime layer's /var/lib/libuuid row: /var/a and /var/b stay apart.
  auto r = propose_grants(std::vector{fs_write("/var/a/x"), fs_write("/var/b/y")});
  ASSERT_EQ(r.items.size(), 2U);
  EXPECT_EQ(r.items[0].entry, "- /var/a");
  EXPECT_EQ(r.items[1].entry, "- /var/b");
}

TEST(GrantProposal, AConnectionIsTheTripleAsSeen) {
  auto h = hints(std::vector{net("dns:api.example.com", "NXDOMAIN"),
                             net("api.example.com:443/https", "ECONNRESET", "TLS on an entry that is not https"),
                             net("10.1.2.3:5432/tcp"), net("[fd00::1]:53/udp", "EPERM")});
  ASSERT_EQ(h.size(), 3U);
  EXPECT_EQ(h[0], "to allow: add  - {host: 10.1.2.3, port: 5432, protocol: tcp}  under capabilities.egress  "
                  "(10.1.2.3:5432/tcp: 1 attempt)");
  EXPECT_EQ(h[1], "to allow: add  - {host: api.example.com, port: 443, protocol: https}  under capabilities.egress  "
                  "(api.example.com:443/https: 2 attempts)");
  EXPECT_EQ(h[2], "to allow: add  - {host: \"fd00::1\", port: 53, protocol: udp}  under capabilities.egress  "
                  "([fd00::1]:53/udp: 1 attempt)");
}

TEST(GrantProposal, TheGatewaysReadingDecidesTheProtocol) {
  auto r = propose_grants(std::vector{
      net("a.example:80/https", "ECONNRESET", "plaintext HTTP on an https entry"),
      net("b.example:7000/https", "ECONNRESET", "not a TLS ClientHello on an https entry: bad record"),
      net("c.example:8080/tcp", "ECONNRESET", "no entry allows this destination")});
  ASSERT_EQ(r.items.size(), 3U);
  EXPECT_EQ(r.items[0].protocol, "http");
  EXPECT_EQ(r.items[1].protocol, "tcp");
  EXPECT_EQ(r.items[2].protocol, "tcp");
  EXPECT_EQ(r.items[2].port, 8080);
}

TEST(GrantProposal, ADnsDenialAloneSaysWhatIsKnown) {
  auto r = propose_grants(std::vector{net("dns:api.example.com", "NXDOMAIN"), net("dns:api.example.com", "NXDOMAIN")});
  ASSERT_EQ(r.items.size(), 1U);
  const auto& p = r.items[0];
  EXPECT_TRUE(p.grantable);
  EXPECT_FALSE(p.complete);
  EXPECT_EQ(p.host, "api.example.com");
  EXPECT_EQ(p.port, 0);
  EXPECT_EQ(p.protocol, "");
  EXPECT_EQ(hint_line(p),
            "to allow: add  - {host: api.example.com, port: PORT, protocol: PROTOCOL}  under capabilities.egress  "
            "(dns:api.example.com: 2 attempts; the name was refused before any connection, so its port and protocol "
            "are unknown (`soyaos pack learn` finds them))");
}

TEST(GrantProposal, OperatorPolicyAndBrokenTrafficAreNotGrantable) {
  auto r = propose_grants(std::vector{
      net("dns:evil.example", "NXDOMAIN", "denied by the operator (egress.deny)"),
      net("dns:a.example", "REFUSED", "query type TXT (only A and AAAA are answered)"),
      net("dns:bad\\x07name", "NXDOMAIN", "not a host name (a label holds a byte outside letters, digits and '-')"),
      net("a.example:443/https", "ECONNRESET", "SNI `b.example` does not match `a.example`"),
      net("db.example[10.0.0.5]:5432/tcp", "ECONNRESET", "a private, loopback or link-local address (rebinding)"),
      net("x.example:443/https", "EACCES", "Moon proxy: proxy.allow does not list it")});
  ASSERT_EQ(r.items.size(), 6U);
  for (const auto& p : r.items) EXPECT_FALSE(p.grantable) << p.covers;
  EXPECT_NE(r.items[0].note.find("egress.deny"), std::string::npos);
  EXPECT_NE(r.items[1].note.find("only A and AAAA"), std::string::npos);
  EXPECT_NE(r.items[3].note.find("SNI"), std::string::npos);
  EXPECT_NE(r.items[4].note.find("egress.allow_private"), std::string::npos);
  EXPECT_NE(r.items[5].note.find("proxy.allow"), std::string::npos);
}

TEST(GrantProposal, AnHttpRuleRefusalIsARuleOfThatEntry) {
  auto r = propose_grants(std::vector{net("DELETE https://api.example.com/v1/items/7", "EACCES",
                                          "no http rule of capabilities.egress[2] allows DELETE /v1/items/7")});
  ASSERT_EQ(r.items.size(), 1U);
  EXPECT_TRUE(r.items[0].grantable);
  EXPECT_EQ(hint_line(r.items[0]), "to allow: add  - {method: DELETE, path: /v1/items/7}  under "
                                   "capabilities.egress[2].http  (DELETE /v1/items/7: 1 request)");
}

TEST(GrantProposal, ExecForkAndClocksAreNeverGrantable) {
  auto h = hints(std::vector<DeniedAttempt>{{"exec", "", "/usr/bin/sh", "EACCES", "", 2},
                                            {"exec", "", "process", "EPERM", "", 1},
                                            {"time", "", "clock:CLOCK_REALTIME", "EPERM", "", 1}});
  ASSERT_EQ(h.size(), 3U);
  EXPECT_EQ(h[0], "not grantable: exec /usr/bin/sh: 2 attempts  (a Comet executes its runtime's interpreter once: exec "
                  "is never granted (C3); do the work in-process (a library instead of a program))");
  EXPECT_EQ(h[1].rfind("not grantable: fork or clone of a new process: 1 attempt  (", 0), 0U) << h[1];
  EXPECT_EQ(h[2].rfind("not grantable: set clock:CLOCK_REALTIME: 1 attempt  (setting clocks is never granted", 0), 0U)
      << h[2];
}

TEST(GrantProposal, AHostileFloodGivesABoundedProposal) {
  std::vector<DeniedAttempt> a;
  for (int d = 0; d < 400; ++d) {
    for (int f = 0; f < 5; ++f) a.push_back(fs_read("/d" + std::to_string(d) + "/sub/f" + std::to_string(f)));
  }
  for (int i = 0; i < 3000; ++i) a.push_back(fs_write("/w" + std::to_string(i) + "/x"));
  for (int i = 0; i < 2000; ++i) a.push_back(net("dns:n" + std::to_string(i) + ".example", "NXDOMAIN"));
  for (int i = 0; i < 100; ++i) {
    a.push_back({"fs", "read", "<unresolvable>/" + std::to_string(i), "ENOENT", "", 1});
    a.push_back(net("dns:x", "REFUSED", "query type TXT " + std::to_string(i)));  // distinct details, one note
  }
  auto r = propose_grants(a);
  size_t reads = 0, writes = 0, egress = 0, refused = 0;
  for (const auto& p : r.items) {
    EXPECT_NE(p.path, "/");
    reads += p.section == "capabilities.fs.read" ? 1 : 0;
    writes += p.section == "capabilities.fs.write" ? 1 : 0;
    egress += p.section == "capabilities.egress" ? 1 : 0;
    refused += p.grantable ? 0 : 1;
    EXPECT_LE(p.examples.size(), kMaxProposalExamples);
  }
  EXPECT_LE(reads, kMaxFsProposals);
  EXPECT_LE(writes, kMaxFsProposals);
  EXPECT_EQ(egress, kMaxEgressProposals);
  EXPECT_LE(refused, kMaxNotGrantable);
  // Nothing silently lost: what is not proposed is counted.
  EXPECT_GT(r.omitted, 0U);
  EXPECT_EQ(r.omitted, 3000U - writes + 2000U - kMaxEgressProposals + (400U - reads) * 5U);
}

TEST(GrantProposal, AMkdirMakesThatDirectoryTheWritablePath) {
  DeniedAttempt made = fs_write("/var/cache/app");
  made.syscall = "mkdirat";
  auto h = hints({made, fs_write("/var/spool/x/file")});
  ASSERT_EQ(h.size(), 2U);
  EXPECT_EQ(h[0], "to allow: add  - /var/cache/app  under capabilities.fs.write  (/var/cache/app: 1 write)");
  EXPECT_EQ(h[1], "to allow: add  - /var/spool/x  under capabilities.fs.write  (/var/spool/x/*: 1 write)");
}

// One rule set (issue #13): pack learn's proposal is made of the entries the hints propose
// for the same attempts; learning only adds which observations are attempts (a learned
// lookup, a classified connection) and says what used each entry.
TEST(GrantProposal, LearnProposesTheEntriesTheHintsPropose) {
  const std::vector<Observation> seen = {
      {"fs", "read", "/data/a.json", "openat", "EACCES", ""},
      {"fs", "read", "/data/b.json", "openat", "EACCES", ""},
      {"fs", "write", "/var/cache/app", "mkdirat", "EACCES", ""},
      {"fs", "write", "/tmp/x", "openat", "EACCES", ""},
      {"fs", "write", "/workdir/out/r.txt", "openat", "EACCES", ""},
      {"network", "", "dns:api.example.com", "", "NOERROR", "learn: answered with a learning address"},
      {"network", "", "api.example.com:443/https", "connect", "ECONNRESET", "learn: TLS ClientHello, SNI api.example.com"},
      {"network", "", "dns:only.example.com", "", "NOERROR", "learn: answered with a learning address"},
      {"exec", "", "/usr/bin/true", "execve", "EPERM", ""},
      {"fs", "read", "/etc/shadow", "openat", "ENOENT", ""}};
  Learner learner;
  std::vector<DeniedAttempt> attempts;
  for (const auto& o : seen) {
    learner.add(o, "example basic");
    const bool learned = o.detail.rfind("learn: ", 0) == 0;
    attempts.push_back({o.surface, o.access, o.resource, o.errno_name, learned ? "" : o.detail, 1, o.syscall});
  }
  const Proposal p = learner.propose(manifest::Manifest{});
  const GrantProposals g = propose_grants(attempts);
  std::vector<std::string> from_hints, from_learn;
  for (const auto& item : g.items) {
    if (!item.grantable) continue;
    from_hints.push_back(item.section + " " + (item.path.empty() ? item.host + ":" + std::to_string(item.port) + "/" +
                                                                       item.protocol
                                                                 : item.path));
  }
  for (const auto& r : p.fs_read) from_learn.push_back("capabilities.fs.read " + r.path);
  for (const auto& w : p.fs_write) from_learn.push_back("capabilities.fs.write " + w.path);
  for (const auto& e : p.egress) {
    from_learn.push_back("capabilities.egress " + e.entry.host + ":" + std::to_string(e.entry.port) + "/" +
                         manifest::to_string(e.entry.protocol));
  }
  for (const auto& n : p.names_only) from_learn.push_back("capabilities.egress " + n.substr(0, n.find(' ')) + ":0/");
  std::sort(from_hints.begin(), from_hints.end());
  std::sort(from_learn.begin(), from_learn.end());
  EXPECT_EQ(from_learn, from_hints);
  EXPECT_EQ(from_learn, (std::vector<std::string>{"capabilities.egress api.example.com:443/https",
                                                  "capabilities.egress only.example.com:0/",
                                                  "capabilities.fs.read /data", "capabilities.fs.write /tmp",
                                                  "capabilities.fs.write /var/cache/app",
                                                  "capabilities.fs.write /workdir/out"}));
  // What used each entry, and what cannot be granted.
  ASSERT_EQ(p.egress.size(), 1U);
  EXPECT_EQ(p.egress[0].why, "example basic: TLS ClientHello, SNI api.example.com");
  ASSERT_EQ(p.fs_read.size(), 1U);
  EXPECT_EQ(p.fs_read[0].why, "example basic: read /data/a.json; /data/*: 2 reads");
  ASSERT_EQ(p.names_only.size(), 1U);
  EXPECT_EQ(p.names_only[0], "only.example.com [example basic]");
  ASSERT_EQ(p.not_grantable.size(), 2U);
  EXPECT_EQ(p.not_grantable[0].rfind("exec /usr/bin/true: 1 attempt [example basic]: ", 0), 0U) << p.not_grantable[0];
  EXPECT_EQ(p.not_grantable[1].rfind("fs read /etc/shadow: 1 attempt [example basic]: /etc belongs", 0), 0U)
      << p.not_grantable[1];
  // A manifest that allows some of it: only the rest is proposed.
  manifest::Manifest m;
  m.capabilities.fs_write.push_back({"/tmp", "capabilities.fs.write[0]", {}});
  m.capabilities.fs_read.push_back({"/data", "capabilities.fs.read[0]", {}});
  const Proposal rest = learner.propose(m);
  EXPECT_TRUE(rest.fs_read.empty());
  ASSERT_EQ(rest.fs_write.size(), 2U);
  EXPECT_EQ(rest.fs_write[0].path, "/var/cache/app");
}

// A hostile agent through the learner (issue #13's hostile cases): tens of thousands of
// distinct paths and names, names and paths with control characters, the runs' own dropped
// counts — a bounded proposal, each list capped with what was left out counted.
TEST(GrantProposal, LearnerBoundsAHostileFlood) {
  Learner learner;
  learner.add({"network", "", "dns:bad\x01name.test", "", "REFUSED", "not a canonical name"}, "the run");
  learner.add({"fs", "read", std::string("/srv/ctl\x1b[2J/f"), "openat", "ENOENT", ""}, "the run");
  for (int i = 0; i < 15000; ++i) {
    learner.add({"fs", "read", "/srv/flood/d" + std::to_string(i) + "/f", "openat", "ENOENT", ""}, "the run");
  }
  for (int i = 0; i < 4000; ++i) {
    const std::string host = "n" + std::to_string(i) + ".flood.test";
    learner.add({"network", "", "dns:" + host, "", "NOERROR", "learn: answered with a learning address"}, "the run");
    learner.add({"network", "", host + ":80/http", "connect", "ECONNRESET", "learn: HTTP GET, Host " + host},
                "the run");
  }
  for (int i = 0; i < 3000; ++i) {  // past kMaxObservations: counted, not kept
    learner.add({"fs", "write", "/var/w" + std::to_string(i) + "/x", "openat", "EACCES", ""}, "the run");
  }
  learner.add_dropped(7);
  EXPECT_EQ(learner.size(), kMaxObservations);
  const Proposal p = learner.propose(manifest::Manifest{});
  EXPECT_LE(p.fs_read.size(), kMaxProposed);
  EXPECT_EQ(p.egress.size(), kMaxProposed);
  EXPECT_GT(p.more_egress, 0U);
  for (const auto& e : p.egress) {
    EXPECT_EQ(e.entry.port, 80);
    EXPECT_EQ(e.entry.protocol, manifest::Protocol::http);
  }
  for (const auto& r : p.fs_read) EXPECT_NE(r.path, "/");
  EXPECT_LE(p.notes.size(), kMaxListed);
  EXPECT_LE(p.not_grantable.size(), kMaxListed);
  // The refused name is a note (kept raw here; every output escapes it).
  EXPECT_TRUE(std::any_of(p.notes.begin(), p.notes.end(),
                          [](const std::string& n) { return n.rfind("dns bad\x01name.test refused", 0) == 0; }));
  // 2 + 15000 + 8000 + 3000 observations, 20000 kept: the rest and the runs' 7 counted.
  EXPECT_EQ(p.observations_dropped, 15000U + 8000U + 3000U + 2U - kMaxObservations + 7U);
  // Every string is bounded.
  for (const auto& e : p.egress) EXPECT_LE(e.why.size(), 200U);
  for (const auto& r : p.fs_read) EXPECT_LE(r.why.size(), 200U);
}

TEST(GrantProposal, YamlScalarsReadBackExactly) {
  const std::vector<std::string> cases = {"/tmp", "api.example.com", "/a b", "/x: y", "/#c", "/q\"uote", "/back\\slash",
                              std::string("/ctl\x1b[2J\x07", 9), "/é", "/bidi\u202e", "true", "123", "-x", "fd00::1",
                              "*.example.com", "~", "/it's"};
  for (const std::string& s : cases) {
    const std::string y = yaml_scalar(s);
    for (char c : y) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << y;
    YAML::Node n = YAML::Load("- " + y);
    ASSERT_TRUE(n.IsSequence()) << y;
    EXPECT_EQ(n[0].as<std::string>(), s) << y;
    EXPECT_EQ(n[0].Tag() == "!" || n[0].Tag() == "?", true) << y;
  }
  EXPECT_EQ(yaml_scalar("/tmp"), "/tmp");
  EXPECT_EQ(yaml_scalar("/a b"), "\"/a b\"");
  EXPECT_EQ(yaml_scalar(std::string("/x\x1b", 3)), "\"/x\\x1B\"");
}

TEST(GrantProposal, TheProposedEntriesParseAsTheManifestSectionWants) {
  auto r = propose_grants(std::vector{net("api.example.com:443/https", "ECONNRESET", "TLS on an entry that is not https"),
                                      fs_write("/tmp/a b/c")});
  ASSERT_EQ(r.items.size(), 2U);
  YAML::Node w = YAML::Load(r.items[0].entry);
  EXPECT_EQ(w[0].as<std::string>(), "/tmp/a b");
  YAML::Node e = YAML::Load(r.items[1].entry);
  EXPECT_EQ(e[0]["host"].as<std::string>(), "api.example.com");
  EXPECT_EQ(e[0]["port"].as<int>(), 443);
  EXPECT_EQ(e[0]["protocol"].as<std::string>(), "https");
}

}  // namespace
}  // namespace soyaos::policy
