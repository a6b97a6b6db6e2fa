// Trust and consent (moon/consent.h, SPEC.md C12): moon.yaml's trust: section, signature
// checks against it (unsigned, another key, another digest, a forged comment), and the
// approvals the Moon keeps (first version, wider, narrower, approved digest) with events.
#include "moon/consent.h"

#include <stdlib.h>  // setenv, unsetenv

#include <gtest/gtest.h>

#include <string>

#include "moon_test_util.h"

namespace soyaos::moon {
namespace {

using testing::pack_manifest;
using testing::read_file;
using testing::TmpDir;
using testing::write_file;

std::vector<std::string> errors_of(const std::string& text) {
  const MoonConfigLoad r = parse_moon_config(text, "moon.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.errors) out.push_back(d.format());
  return out;
}

TEST(MoonTrust, ConfigParsesAndValidatesScopes) {
  auto r = parse_moon_config(R"(trust:
  - scope: "registry.example.com/team/*"
    keys: [keys/team.pub, /etc/soyaos/other.pub]
  - {scope: "localhost:5000/exact", keys: [k.pub]}
)", "moon.yaml");
  ASSERT_TRUE(r.config);
  ASSERT_EQ(r.config->trust.size(), 2u);
  EXPECT_EQ(r.config->trust[0].scope, "registry.example.com/team/*");
  EXPECT_EQ(r.config->trust[0].key_files, (std::vector<std::string>{"keys/team.pub", "/etc/soyaos/other.pub"}));
  EXPECT_EQ(r.config->trust[1].key_path, "trust[1]");

  EXPECT_EQ(errors_of("trust:\n  - {scope: nohost, keys: [a.pub]}\n"),
            (std::vector<std::string>{"moon.yaml:2:13: error: trust[0].scope: \"nohost\" must be REGISTRY/REPOSITORY "
                                      "or REGISTRY/PREFIX* ('*' only at the end)"}));
  EXPECT_EQ(errors_of("trust:\n  - {scope: \"r.io/*/x\", keys: [a.pub]}\n").size(), 1u);
  EXPECT_EQ(errors_of("trust:\n  - {scope: \"r.io/a\", keys: []}\n"),
            (std::vector<std::string>{"moon.yaml:2:29: error: trust[0].keys: must list at least one public key file"}));
  EXPECT_EQ(errors_of("trust:\n  - {scope: \"r.io/a\"}\n"),
            (std::vector<std::string>{"moon.yaml:2:5: error: trust[0]: missing keys (minisign public key files)"}));
  EXPECT_EQ(errors_of("trust:\n  - {keys: [a.pub], extra: 1}\n").size(), 2u);  // unknown key, missing scope
  EXPECT_EQ(errors_of("trust:\n  - {scope: r.io/a, keys: [a]}\n  - {scope: r.io/a, keys: [b]}\n").size(), 1u);
  EXPECT_EQ(errors_of("trust: r.io/a\n").size(), 1u);
}

TEST(MoonTrust, ScopesMatchExactlyOrByPrefix) {
  EXPECT_TRUE(trust_scope_matches("r.io/team/*", "r.io/team/app"));
  EXPECT_TRUE(trust_scope_matches("r.io/team/*", "r.io/team/a/b"));
  EXPECT_FALSE(trust_scope_matches("r.io/team/*", "r.io/teamx/app"));
  EXPECT_FALSE(trust_scope_matches("r.io/team/*", "r.io/team"));
  EXPECT_TRUE(trust_scope_matches("r.io/team*", "r.io/teamx"));
  EXPECT_TRUE(trust_scope_matches("r.io/app", "r.io/app"));
  EXPECT_FALSE(trust_scope_matches("r.io/app", "r.io/app2"));
  EXPECT_FALSE(trust_scope_matches("r.io/app", "other.io/app"));
}

TEST(MoonTrust, LoadReadsEveryKeyAndNamesABadOne) {
  TmpDir home;
  auto key = minisign::generate();
  ASSERT_TRUE(key);
  write_file(home.path() / "keys" / "team.pub", minisign::format_public_key(key->public_part()));
  write_file(home.path() / "keys" / "bad.pub", "untrusted comment: x\nnot base64!\n");
  write_file(home.path() / "moon.yaml", "trust:\n  - {scope: \"r.io/team/*\", keys: [keys/team.pub]}\n");
  ::unsetenv("SOYAOS_MOON_CONFIG");
  auto r = load_moon_config(home.path());
  ASSERT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors[0].format());
  ASSERT_EQ(r.config->trust[0].keys.size(), 1u);
  EXPECT_EQ(r.config->trust[0].keys[0].key, key->public_key);
  EXPECT_EQ(r.config->trust_for("r.io/team/app").size(), 1u);
  EXPECT_TRUE(r.config->trust_for("r.io/other").empty());

  write_file(home.path() / "moon.yaml",
             "trust:\n  - {scope: \"r.io/team/*\", keys: [keys/team.pub, keys/bad.pub, keys/missing.pub]}\n");
  r = load_moon_config(home.path());
  ASSERT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_NE(r.errors[0].format().find("trust[0].keys[1]"), std::string::npos) << r.errors[0].format();
  EXPECT_NE(r.errors[0].format().find("not base64"), std::string::npos) << r.errors[0].format();
  EXPECT_NE(r.errors[1].format().find("keys[2]"), std::string::npos);
}

class MoonTrustCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    auto k = minisign::generate();
    auto o = minisign::generate();
    ASSERT_TRUE(k && o);
    key_ = *k;
    other_ = *o;
    MoonConfig::TrustRule rule;
    rule.scope = "r.io/team/*";
    rule.keys.push_back(key_.public_part());
    config_.trust.push_back(rule);
  }
  std::string sign_with(const minisign::SecretKey& k, const std::string& bytes, const std::string& digest) {
    auto s = minisign::sign(k, bytes, signature_trusted_comment("r.io/team/app:1", digest), "u");
    EXPECT_TRUE(s);
    return s ? *s : "";
  }
  minisign::SecretKey key_, other_;
  MoonConfig config_;
  const std::string bytes_ = "{\"schemaVersion\":2}";
  const std::string digest_ = "sha256:" + std::string(64, 'a');
};

TEST_F(MoonTrustCheck, OutsideEveryScopeNothingIsRequired) {
  const auto v = check_trust(config_, "r.io/other/app", digest_, bytes_, {});
  EXPECT_FALSE(v.required);
  EXPECT_TRUE(v.ok);
}

TEST_F(MoonTrustCheck, SignedByTheTrustedKeyPasses) {
  const std::string good = sign_with(key_, bytes_, digest_);
  const auto v = check_trust(config_, "r.io/team/app", digest_, bytes_, {sign_with(other_, bytes_, digest_), good});
  EXPECT_TRUE(v.required);
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.key_ids, (std::vector<std::string>{minisign::key_id_hex(key_.key_id)}));
  EXPECT_EQ(v.verified, (std::vector<std::string>{good}));
}

TEST_F(MoonTrustCheck, UnsignedOtherKeyOtherDigestAreRefused) {
  auto v = check_trust(config_, "r.io/team/app", digest_, bytes_, {});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("no signature"), std::string::npos) << v.problem;
  v = check_trust(config_, "r.io/team/app", digest_, bytes_, {sign_with(other_, bytes_, digest_)});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("signed only by other keys"), std::string::npos) << v.problem;
  // The tag now names other bytes (another digest): the old signature does not cover them.
  v = check_trust(config_, "r.io/team/app", "sha256:" + std::string(64, 'b'), bytes_ + " ",
                  {sign_with(key_, bytes_, digest_)});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("signature verification failed"), std::string::npos) << v.problem;
  // Right bytes, but a comment naming another digest.
  v = check_trust(config_, "r.io/team/app", digest_, bytes_, {sign_with(key_, bytes_, "sha256:" + std::string(64, 'c'))});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("trusted comment names digest"), std::string::npos) << v.problem;
  // Garbage is not a signature.
  v = check_trust(config_, "r.io/team/app", digest_, bytes_, {"garbage"});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("malformed"), std::string::npos) << v.problem;
}

TEST_F(MoonTrustCheck, EveryMatchingScopeMustBeSatisfied) {
  MoonConfig::TrustRule wide;
  wide.scope = "r.io/*";
  wide.keys.push_back(other_.public_part());
  config_.trust.push_back(wide);
  auto v = check_trust(config_, "r.io/team/app", digest_, bytes_, {sign_with(key_, bytes_, digest_)});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("r.io/*"), std::string::npos) << v.problem;
  v = check_trust(config_, "r.io/team/app", digest_, bytes_,
                  {sign_with(key_, bytes_, digest_), sign_with(other_, bytes_, digest_)});
  EXPECT_TRUE(v.ok) << v.problem;
}

std::string with_egress(const std::string& manifest, const std::string& host) {
  std::string m = manifest;
  m.replace(m.find("  egress: []\n"), 13,
            "  egress:\n    - {host: " + host + ", port: 443, protocol: https}\n");
  return m;
}

TEST(MoonConsent, FirstWiderNarrowerAndApproved) {
  TmpDir home;
  auto store = Store::open(home.path());
  ASSERT_TRUE(store) << store.error().describe();
  const std::string repo = "r.io/team/app";
  const std::string v1 = with_egress(pack_manifest("app", "1.0.0"), "a.example.com");
  const std::string d1 = "sha256:" + std::string(64, '1');

  auto c = check_consent(*store, repo, d1, v1);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->state, ConsentState::first_version);
  EXPECT_TRUE(c->needs_approval());
  ASSERT_TRUE(record_approval(*store, repo, d1, repo + ":1.0.0", v1, Actor{0, "root"}, *c));
  c = check_consent(*store, repo, d1, v1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->state, ConsentState::approved);

  // v2 adds an egress entry: wider, not run until approved.
  const std::string v2 = with_egress(pack_manifest("app", "2.0.0"), "a.example.com");
  const std::string v2w = v2.substr(0, v2.find("  fs:")) + "    - {host: b.example.com, port: 443, protocol: https}\n" +
                          v2.substr(v2.find("  fs:"));
  const std::string d2 = "sha256:" + std::string(64, '2');
  c = check_consent(*store, repo, d2, v2w);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->state, ConsentState::wider);
  EXPECT_TRUE(c->diff.wider());
  ASSERT_TRUE(c->last);
  EXPECT_EQ(c->last->digest, d1);

  // v3 drops the egress entry: narrower than v1, runs without approval.
  const std::string v3 = pack_manifest("app", "3.0.0");
  c = check_consent(*store, repo, "sha256:" + std::string(64, '3'), v3);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->state, ConsentState::not_wider);
  EXPECT_FALSE(c->needs_approval());

  // Approving v2 makes it the reference: v1's capabilities are now no wider.
  c = check_consent(*store, repo, d2, v2w);
  ASSERT_TRUE(c);
  ASSERT_TRUE(record_approval(*store, repo, d2, repo + ":2.0.0", v2w, Actor{1000, "alice"}, *c));
  c = check_consent(*store, repo, "sha256:" + std::string(64, '4'), v1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->state, ConsentState::not_wider);

  // Another repository starts over; the approval is per repository.
  c = check_consent(*store, "r.io/team/other", d1, v1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->state, ConsentState::first_version);

  // Every approval is an event with who and what.
  EventQuery q;
  q.type = "pack_approved";
  auto events = store->query_events(q);
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 2u);
  const auto last = nlohmann::json::parse(events->back().json);
  EXPECT_EQ(last["data"]["repository"], repo);
  EXPECT_EQ(last["data"]["manifest_digest"], d2);
  EXPECT_EQ(last["data"]["consent"], "wider");
  EXPECT_EQ(last["data"]["previous"], d1);
  EXPECT_EQ(last["data"]["actor"]["user"], "alice");
  EXPECT_TRUE(last["data"]["diff"]["wider"].get<bool>());
  EXPECT_EQ(last["source"].get<std::string>().substr(0, 9), "soyaos://");

  // An unparsable manifest is an error, never a silent approval.
  EXPECT_FALSE(check_consent(*store, repo, "sha256:" + std::string(64, '5'), "not: a manifest"));
}

TEST(MoonConsent, SignaturesAreKeptOncePerDigest) {
  TmpDir home;
  auto store = Store::open(home.path());
  ASSERT_TRUE(store);
  SignatureRecord s;
  s.manifest_digest = "sha256:" + std::string(64, 'a');
  s.key_id = "0011223344556677";
  s.signature = "sig text";
  s.reference = "demo@1.0.0";
  s.by = Actor{0, "root"};
  auto added = store->add_signature(s, pack_event("pack_signed", "demo", "1.0.0", "", {{"key_id", s.key_id}}));
  ASSERT_TRUE(added) << added.error().describe();
  EXPECT_TRUE(*added);
  added = store->add_signature(s, pack_event("pack_signed", "demo", "1.0.0", "", {{"key_id", s.key_id}}));
  ASSERT_TRUE(added);
  EXPECT_FALSE(*added);
  auto all = store->signatures(s.manifest_digest);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].signature, "sig text");
  EXPECT_EQ((*all)[0].by.user, "root");
  EventQuery q;
  q.type = "pack_signed";
  auto events = store->query_events(q);
  ASSERT_TRUE(events);
  EXPECT_EQ(events->size(), 1u);
}

}  // namespace
}  // namespace soyaos::moon
