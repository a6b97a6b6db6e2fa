// policy/capability_diff.h: every area's additions and removals, what counts as wider,
// and the text form.
#include "policy/capability_diff.h"

#include <gtest/gtest.h>

#include <string>

namespace soyaos::policy {
namespace {

constexpr const char* kBase = R"(soyapack: v0
name: demo
version: 1.0.0
agent:
  runtime: python3
  entrypoint: main.py
secrets:
  API_KEY:
    hosts: [api.example.com]
capabilities:
  egress:
    - host: api.example.com
      port: 443
      protocol: https
      http:
        - {method: GET, path: /v1/**}
    - host: old.example.com
      port: 443
      protocol: https
  fs:
    read: [/workdir]
    write: [/workdir/out]
  determinism_tier: read-only
resources:
  memory: 512Mi
  pids: 64
)";

manifest::Manifest parse(const std::string& text) {
  auto r = manifest::parse_manifest(text, "soyapack.yaml");
  if (!r.manifest) {
    for (const auto& e : r.errors) ADD_FAILURE() << e.format();
    return {};
  }
  return *r.manifest;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// "+egress api.x:443/https" style summaries of the changes.
std::vector<std::string> summary(const CapabilityDiff& d) {
  std::vector<std::string> out;
  for (const auto& c : d.changes) {
    const char* k = c.kind == ChangeKind::added ? "+" : c.kind == ChangeKind::removed ? "-" : "~";
    std::string s = std::string(k) + c.area + " ";
    if (c.kind == ChangeKind::changed) {
      s += c.from + "->" + c.to;
    } else {
      s += (c.entry.empty() ? "" : c.entry + " ") + c.item;
    }
    out.push_back(s + (c.wider ? " W" : ""));
  }
  return out;
}

TEST(CapabilityDiff, IdenticalPacksHaveNoChanges) {
  const auto a = parse(kBase);
  const auto d = diff_capabilities(a, a);
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(d.wider());
  EXPECT_EQ(format_diff_text(d), "no capability changes\n");
  // Version, description, entrypoint: not capabilities.
  const auto b = parse(replace(replace(kBase, "1.0.0", "1.1.0"), "main.py", "other.py"));
  EXPECT_TRUE(diff_capabilities(a, b).empty());
}

TEST(CapabilityDiff, AddedEgressIsWiderRemovedIsNot) {
  const auto a = parse(kBase);
  const auto b = parse(replace(kBase, "    - host: old.example.com\n", "    - host: new.example.com\n"));
  const auto d = diff_capabilities(a, b);
  EXPECT_EQ(summary(d), (std::vector<std::string>{"+egress new.example.com:443/https W",
                                                  "-egress old.example.com:443/https"}));
  EXPECT_TRUE(d.wider());
  const auto back = diff_capabilities(b, a);
  EXPECT_TRUE(back.wider());  // a has old.example.com, which b lacks
  // Only removing narrows.
  const auto c = parse(replace(kBase, "    - host: old.example.com\n      port: 443\n      protocol: https\n", ""));
  EXPECT_EQ(summary(diff_capabilities(a, c)), (std::vector<std::string>{"-egress old.example.com:443/https"}));
  EXPECT_FALSE(diff_capabilities(a, c).wider());
  EXPECT_TRUE(diff_capabilities(c, a).wider());
  // A port or protocol change is another entry.
  const auto p = parse(replace(kBase, "old.example.com\n      port: 443", "old.example.com\n      port: 8443"));
  EXPECT_EQ(summary(diff_capabilities(a, p)), (std::vector<std::string>{"+egress old.example.com:8443/https W",
                                                                        "-egress old.example.com:443/https"}));
}

TEST(CapabilityDiff, EgressAnyIsAnEntry) {
  const auto a = parse(kBase);
  std::string any = kBase;
  any = replace(any, any.substr(any.find("  egress:\n"), any.find("  fs:\n") - any.find("  egress:\n")),
                "  egress: \"*\"\n");
  any = replace(any, "secrets:\n  API_KEY:\n    hosts: [api.example.com]\n", "");
  any = replace(any, "determinism_tier: read-only", "determinism_tier: unrestricted");  // M6
  const auto b = parse(any);
  const auto d = diff_capabilities(a, b);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(summary(d)[0], "+egress * W");
  EXPECT_TRUE(d.wider());
}

TEST(CapabilityDiff, HttpRules) {
  const auto a = parse(kBase);
  // A new rule widens; a dropped one narrows.
  const auto b = parse(replace(kBase, "        - {method: GET, path: /v1/**}\n",
                               "        - {method: GET, path: /v1/**}\n        - {method: POST, path: /v1/messages}\n"));
  EXPECT_EQ(summary(diff_capabilities(a, b)),
            (std::vector<std::string>{"+http api.example.com:443/https POST /v1/messages W"}));
  EXPECT_EQ(summary(diff_capabilities(b, a)),
            (std::vector<std::string>{"-http api.example.com:443/https POST /v1/messages"}));
  // Dropping every rule allows any request: wider.
  const auto none = parse(replace(kBase, "      http:\n        - {method: GET, path: /v1/**}\n", ""));
  const auto d = diff_capabilities(a, none);
  EXPECT_EQ(summary(d), (std::vector<std::string>{"-http api.example.com:443/https every rule (any request now allowed) W"}));
  EXPECT_TRUE(d.wider());
  // Rules where there were none: narrower.
  EXPECT_FALSE(diff_capabilities(none, a).wider());
  EXPECT_FALSE(diff_capabilities(none, a).empty());
}

TEST(CapabilityDiff, FsPathsSecretsTierLimits) {
  const auto a = parse(kBase);
  const auto fs = parse(replace(kBase, "write: [/workdir/out]", "write: [/workdir/out, /tmp]"));
  EXPECT_EQ(summary(diff_capabilities(a, fs)), (std::vector<std::string>{"+fs.write /tmp W"}));
  const auto rd = parse(replace(kBase, "read: [/workdir]", "read: [/workdir/in]"));
  EXPECT_EQ(summary(diff_capabilities(a, rd)), (std::vector<std::string>{"+fs.read /workdir/in W", "-fs.read /workdir"}));

  const auto host = parse(replace(kBase, "hosts: [api.example.com]", "hosts: [api.example.com, old.example.com]"));
  EXPECT_EQ(summary(diff_capabilities(a, host)),
            (std::vector<std::string>{"+secrets.hosts API_KEY old.example.com W"}));
  const auto sec = parse(replace(kBase, "secrets:\n", "secrets:\n  OTHER:\n    hosts: [api.example.com]\n"));
  EXPECT_EQ(summary(diff_capabilities(a, sec)), (std::vector<std::string>{"+secrets OTHER W"}));
  EXPECT_EQ(summary(diff_capabilities(sec, a)), (std::vector<std::string>{"-secrets OTHER"}));

  const auto tier = parse(replace(kBase, "determinism_tier: read-only", "determinism_tier: side-effect"));
  EXPECT_EQ(summary(diff_capabilities(a, tier)), (std::vector<std::string>{"~tier read-only->side-effect W"}));
  EXPECT_FALSE(diff_capabilities(tier, a).wider());

  // A raised limit widens, a lowered one narrows; an absent limit is the C9 default.
  const auto mem = parse(replace(replace(kBase, "memory: 512Mi", "memory: 1Gi"), "  pids: 64\n", ""));
  EXPECT_EQ(summary(diff_capabilities(a, mem)),
            (std::vector<std::string>{"~limits.memory 536870912->1073741824 W", "~limits.pids 64->128 W"}));
  const auto low = parse(replace(kBase, "pids: 64", "pids: 32"));
  EXPECT_EQ(summary(diff_capabilities(a, low)), (std::vector<std::string>{"~limits.pids 64->32"}));
  EXPECT_FALSE(diff_capabilities(a, low).wider());
}

TEST(CapabilityDiff, TextFormEscapesAndSummarises) {
  const auto a = parse(kBase);
  const auto b = parse(replace(kBase, "    - host: old.example.com\n", "    - host: new.example.com\n"));
  EXPECT_EQ(format_diff_text(diff_capabilities(a, b)),
            "+ egress         new.example.com:443/https  (wider)\n"
            "- egress         old.example.com:443/https\n"
            "wider: B may do what A may not\n");
  const auto c = parse(replace(kBase, "pids: 64", "pids: 32"));
  EXPECT_EQ(format_diff_text(diff_capabilities(a, c)),
            "~ limits.pids    64 -> 32\n"
            "narrower: B may do nothing A may not\n");
}

}  // namespace
}  // namespace soyaos::policy
