// Every lint rule (SPEC.md T2), positive and negative, on manifests built in memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lint/lint.h"

namespace soyaos::lint {
namespace {

using manifest::EgressEntry;
using manifest::Example;
using manifest::FsPath;
using manifest::Manifest;
using manifest::Mark;
using manifest::Protocol;
using manifest::Tier;
using manifest::Tool;
using manifest::ToolKind;
using manifest::ToolTarget;

// Builds manifests with consistent key paths and distinct marks (one line per node).
class Pack {
 public:
  Pack() {
    m_.name = "p";
    m_.version = "1.0.0";
    m_.capabilities.tier = Tier::read_only;
    m_.capabilities.tier_mark = {90, 21};
  }
  Pack& egress(std::string host, uint16_t port, Protocol p = Protocol::https) {
    auto& v = m_.capabilities.egress;
    v.push_back(EgressEntry{std::move(host), port, p, "capabilities.egress[" + std::to_string(v.size()) + "]",
                            Mark{next_line(), 7}});
    return *this;
  }
  Pack& any_egress() {
    m_.capabilities.egress_any = true;
    m_.capabilities.egress_mark = {80, 11};
    return *this;
  }
  Pack& read(std::string path) { return fs(m_.capabilities.fs_read, "read", std::move(path)); }
  Pack& write(std::string path) { return fs(m_.capabilities.fs_write, "write", std::move(path)); }
  Pack& http(std::string name, std::string host, uint16_t port = 443, Protocol p = Protocol::https,
             ToolKind kind = ToolKind::http_get) {
    Tool t = tool(std::move(name), kind);
    t.url = "https://" + host + "/";
    t.target = ToolTarget{std::move(host), port, p};
    t.url_mark = {t.mark.line, 10};
    m_.tools.push_back(std::move(t));
    return *this;
  }
  Pack& file(std::string name, ToolKind kind, std::string path) {
    Tool t = tool(std::move(name), kind);
    t.path = std::move(path);
    t.path_mark = {t.mark.line, 11};
    m_.tools.push_back(std::move(t));
    return *this;
  }
  Pack& custom(std::string name, bool side_effect) {
    Tool t = tool(std::move(name), ToolKind::custom);
    t.side_effect = side_effect;
    m_.tools.push_back(std::move(t));
    return *this;
  }
  Pack& example(std::vector<std::string> tools) {
    Example e;
    e.name = "ex" + std::to_string(m_.examples.size());
    e.tools = std::move(tools);
    e.key_path = "examples[" + std::to_string(m_.examples.size()) + "]";
    e.mark = {next_line(), 5};
    m_.examples.push_back(std::move(e));
    return *this;
  }
  Pack& tier(Tier t) {
    m_.capabilities.tier = t;
    return *this;
  }
  [[nodiscard]] std::vector<Finding> lint(bool strict = false) const {
    return soyaos::lint::lint(m_, LintOptions{.strict = strict});
  }
  [[nodiscard]] const Manifest& manifest() const { return m_; }

 private:
  int next_line() { return ++line_; }
  Tool tool(std::string name, ToolKind kind) {
    Tool t;
    t.key_path = "tools." + name;
    t.name = std::move(name);
    t.kind = kind;
    t.mark = {next_line(), 3};
    return t;
  }
  Pack& fs(std::vector<FsPath>& list, const char* which, std::string path) {
    list.push_back(FsPath{std::move(path),
                          std::string("capabilities.fs.") + which + "[" + std::to_string(list.size()) + "]",
                          Mark{next_line(), 9}});
    return *this;
  }
  Manifest m_;
  int line_ = 0;
};

std::vector<std::string> ids(const std::vector<Finding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(f.rule_id);
  return out;
}
int count_rule(const std::vector<Finding>& fs, const std::string& id) {
  return static_cast<int>(std::count_if(fs.begin(), fs.end(), [&](const Finding& f) { return f.rule_id == id; }));
}
const Finding* find(const std::vector<Finding>& fs, const std::string& id) {
  for (const auto& f : fs) {
    if (f.rule_id == id) return &f;
  }
  return nullptr;
}

// ---- coverage and the pair rule ----

TEST(LintEgress, CoveredToolIsClean) {
  auto f = Pack().egress("api.anthropic.com", 443).http("fetch", "api.anthropic.com").lint();
  EXPECT_TRUE(f.empty()) << ids(f).size();
}

TEST(LintEgress, SeedExampleIsOnePair) {
  auto f = Pack().egress("api.openai.com", 443).http("fetch", "api.anthropic.com").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule_id, "SP102");
  EXPECT_EQ(f[0].severity, Severity::error);
  EXPECT_EQ(f[0].message, "capabilities.egress declares `api.openai.com:443` but tools.fetch uses `api.anthropic.com:443`");
  EXPECT_EQ(f[0].key_path, "capabilities.egress[0]");
  EXPECT_EQ(f[0].mark, (Mark{1, 7}));
  ASSERT_EQ(f[0].related.size(), 1u);
  EXPECT_EQ(f[0].related[0].key_path, "tools.fetch.url");
}

TEST(LintEgress, PairShowsProtocolOnlyWhenItDiffers) {
  auto f = Pack().egress("api.example.com", 443, Protocol::tcp).http("fetch", "api.example.com").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message,
            "capabilities.egress declares `api.example.com:443/tcp` but tools.fetch uses `api.example.com:443/https`");
  f = Pack().egress("api.example.com", 8443).http("fetch", "api.example.com").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message, "capabilities.egress declares `api.example.com:8443` but tools.fetch uses `api.example.com:443`");
}

TEST(LintEgress, PairBracketsIpv6) {
  auto f = Pack().egress("2001:db8::1", 443).http("fetch", "2001:db8::2").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message, "capabilities.egress declares `[2001:db8::1]:443` but tools.fetch uses `[2001:db8::2]:443`");
}

TEST(LintEgress, UndeclaredWithoutUnusedEntryIsSP101) {
  auto f = Pack().http("fetch", "api.example.com").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule_id, "SP101");
  EXPECT_EQ(f[0].message, "tools.fetch uses `api.example.com:443/https` but no capabilities.egress entry allows it");
  EXPECT_EQ(f[0].key_path, "tools.fetch.url");
  EXPECT_EQ(f[0].mark, (Mark{1, 10}));
}

TEST(LintEgress, UsedEntryIsNotAPairCandidate) {
  // a.example.com is used by `a`; `b`'s target is uncovered and there is no unused entry.
  auto f = Pack().egress("a.example.com", 443).http("a", "a.example.com").http("b", "b.example.com").lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP101"}));
}

TEST(LintEgress, EachUnusedEntryPairsOnce) {
  // Two uncovered tools, one unused entry: one pair, one SP101; the entry is not SP105.
  auto f = Pack().egress("old.example.com", 443).http("a", "x.example.com").http("b", "y.example.com").lint();
  EXPECT_EQ(count_rule(f, "SP102"), 1);
  EXPECT_EQ(count_rule(f, "SP101"), 1);
  EXPECT_EQ(count_rule(f, "SP105"), 0);
  EXPECT_NE(find(f, "SP102")->message.find("tools.a"), std::string::npos);
}

TEST(LintEgress, PairPrefersSameHost) {
  // `extra` comes first and would take api.example.com:443 on port and protocol alone.
  auto f = Pack()
               .egress("x.example.com", 443)
               .egress("api.example.com", 443)
               .http("extra", "extra.example.com")
               .http("api", "api.example.com", 8443)
               .lint();
  ASSERT_EQ(ids(f), (std::vector<std::string>{"SP102", "SP102"}));
  EXPECT_EQ(f[0].message, "capabilities.egress declares `x.example.com:443` but tools.extra uses `extra.example.com:443`");
  EXPECT_EQ(f[1].message, "capabilities.egress declares `api.example.com:443` but tools.api uses `api.example.com:8443`");
}

TEST(LintEgress, PairPrefersSamePortAndProtocol) {
  auto f = Pack()
               .egress("db.example.com", 5432, Protocol::tcp)
               .egress("api.openai.com", 443)
               .http("fetch", "api.anthropic.com")
               .lint();
  ASSERT_EQ(count_rule(f, "SP102"), 1);
  EXPECT_NE(find(f, "SP102")->message.find("api.openai.com:443"), std::string::npos);
  // The other unused entry is still reported as unused.
  ASSERT_EQ(count_rule(f, "SP105"), 1);
  EXPECT_EQ(find(f, "SP105")->key_path, "capabilities.egress[0]");
}

TEST(LintEgress, PairedEntryIsNotReportedAgainEvenInStrict) {
  // A wildcard entry in a pair is neither SP105, SP110 nor SP112.
  auto f = Pack().egress("*.openai.com", 443).http("fetch", "api.anthropic.com").example({"fetch"}).lint(true);
  EXPECT_EQ(count_rule(f, "SP102"), 1);
  EXPECT_EQ(count_rule(f, "SP105"), 0);
  EXPECT_EQ(count_rule(f, "SP110"), 0);
  EXPECT_EQ(count_rule(f, "SP112"), 0);
}

TEST(LintEgress, WildcardCoversSubdomainNotApex) {
  auto sub = Pack().egress("*.example.com", 443).http("fetch", "api.example.com").lint();
  EXPECT_TRUE(sub.empty());
  auto deep = Pack().egress("*.example.com", 443).http("fetch", "a.b.example.com").lint();
  EXPECT_TRUE(deep.empty());
  auto apex = Pack().egress("*.example.com", 443).http("fetch", "example.com").lint();
  EXPECT_EQ(ids(apex), (std::vector<std::string>{"SP102"}));
  auto other = Pack().egress("*.example.com", 443).http("fetch", "badexample.com").lint();
  EXPECT_EQ(ids(other), (std::vector<std::string>{"SP102"}));
}

TEST(LintEgress, PortAndProtocolMustMatch) {
  EXPECT_EQ(ids(Pack().egress("h.example", 80, Protocol::http).http("f", "h.example", 80, Protocol::https).lint()),
            (std::vector<std::string>{"SP102"}));
  EXPECT_TRUE(Pack().egress("h.example", 80, Protocol::http).http("f", "h.example", 80, Protocol::http).lint().empty());
}

TEST(LintEgress, HostMatchIsCaseInsensitive) {
  EXPECT_TRUE(Pack().egress("API.Example.com", 443).http("f", "api.example.com").lint().empty());
}

TEST(LintEgress, AnyEgressCoversEverything) {
  auto f = Pack().any_egress().tier(Tier::unrestricted).http("f", "whatever.example").lint();
  EXPECT_TRUE(f.empty());
}

TEST(LintEgress, MoonProxyCoversHttpToolsAndIsUsed) {
  auto f = Pack().egress("moon", 3128, Protocol::moon_proxy).http("f", "api.example.com").lint();
  EXPECT_TRUE(f.empty());
  // Unused when every tool has a direct entry.
  f = Pack().egress("moon", 3128, Protocol::moon_proxy).egress("api.example.com", 443).http("f", "api.example.com").lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP105"}));
}

TEST(LintEgress, LlmToolNeedsEgressToo) {
  auto f = Pack().http("ask", "api.anthropic.com", 443, Protocol::https, ToolKind::llm).lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP101"}));
}

TEST(LintEgress, UnusedEntryIsWarning) {
  auto f = Pack().egress("api.example.com", 443).egress("b.example.com", 80, Protocol::http).http("f", "b.example.com", 80, Protocol::http).lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule_id, "SP105");
  EXPECT_EQ(f[0].severity, Severity::warning);
  EXPECT_EQ(f[0].message, "capabilities.egress[0] declares `api.example.com:443/https` but no tool uses it");
}

// ---- filesystem ----

TEST(LintFs, ComponentWisePrefix) {
  auto ok = Pack().write("/workdir/out").file("save", ToolKind::fs_write, "/workdir/out/report.md").lint();
  EXPECT_TRUE(ok.empty());
  auto box = Pack().tier(Tier::side_effect).write("/workdir/out").file("save", ToolKind::fs_write, "/workdir/outbox/report.md").lint();
  ASSERT_EQ(box.size(), 1u);
  EXPECT_EQ(box[0].rule_id, "SP103");  // standard paths never pair
  EXPECT_EQ(box[0].message, "tools.save writes `/workdir/outbox/report.md` but no capabilities.fs.write prefix covers it");
  auto pair = Pack().tier(Tier::side_effect).write("/scratch").file("save", ToolKind::fs_write, "/scratchpad/a").lint();
  EXPECT_EQ(ids(pair), (std::vector<std::string>{"SP104"}));
  EXPECT_EQ(pair[0].message, "capabilities.fs.write declares `/scratch` but tools.save uses `/scratchpad/a`");
}

TEST(LintFs, UndeclaredWriteIsSP103) {
  auto f = Pack().file("save", ToolKind::fs_write, "/workdir/out/r.md").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule_id, "SP103");
  EXPECT_EQ(f[0].message, "tools.save writes `/workdir/out/r.md` but no capabilities.fs.write prefix covers it");
  EXPECT_EQ(f[0].key_path, "tools.save.path");
}

TEST(LintFs, WorkdirIsAlwaysReadable) {
  EXPECT_TRUE(Pack().file("load", ToolKind::fs_read, "/workdir/inputs/a.json").lint().empty());
  auto f = Pack().file("load", ToolKind::fs_read, "/data/a.json").lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP103"}));
  EXPECT_EQ(f[0].message, "tools.load reads `/data/a.json` but no capabilities.fs.read prefix covers it");
}

TEST(LintFs, ReadCoveredByReadOrWritePrefix) {
  EXPECT_TRUE(Pack().read("/data").file("load", ToolKind::fs_read, "/data/x/a.json").lint().empty());
  EXPECT_TRUE(Pack().tier(Tier::side_effect).write("/scratch").file("load", ToolKind::fs_read, "/scratch/a").lint().empty());
}

TEST(LintFs, ReadPairsOnlyWithReadList) {
  auto f = Pack().read("/dta").file("load", ToolKind::fs_read, "/data/a.json").lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP104"}));
  EXPECT_EQ(f[0].message, "capabilities.fs.read declares `/dta` but tools.load uses `/data/a.json`");
  EXPECT_EQ(f[0].key_path, "capabilities.fs.read[0]");
}

TEST(LintFs, UnusedNonStandardPathWarns) {
  auto f = Pack().read("/workdir").read("/workdir/inputs").write("/workdir/out").read("/data").lint();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule_id, "SP106");
  EXPECT_EQ(f[0].severity, Severity::warning);
  EXPECT_EQ(f[0].message, "capabilities.fs.read[2] declares `/data` but no tool uses it");
}

// ---- read-only tier ----

TEST(LintTier, SideEffectToolInReadOnlyPack) {
  auto f = Pack().egress("hooks.example.com", 443).http("notify", "hooks.example.com", 443, Protocol::https,
                                                          ToolKind::http_post).lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP107"}));
  EXPECT_EQ(f[0].message, "tools.notify (builtin.http_post) has a side effect but determinism_tier is read-only");
  auto ok = Pack().tier(Tier::side_effect).egress("hooks.example.com", 443)
                .http("notify", "hooks.example.com", 443, Protocol::https, ToolKind::http_post).lint();
  EXPECT_TRUE(ok.empty());
}

TEST(LintTier, CustomSideEffectAndFsWriteOutsideOut) {
  EXPECT_EQ(ids(Pack().custom("c", true).lint()), (std::vector<std::string>{"SP107"}));
  EXPECT_TRUE(Pack().custom("c", false).lint().empty());
  auto f = Pack().write("/workdir/cache").file("s", ToolKind::fs_write, "/workdir/cache/x").lint();
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP108", "SP107"}));  // by position
  // M3: an fs_write tool outside /workdir/out is a side effect even on a scratch path.
  EXPECT_EQ(ids(Pack().write("/tmp").file("s", ToolKind::fs_write, "/tmp/x").lint()),
            (std::vector<std::string>{"SP107"}));
}

TEST(LintTier, WriteOutsideOutInReadOnlyPack) {
  auto f = Pack().write("/workdir/out").write("/workdir/cache").file("s", ToolKind::fs_write, "/workdir/out/a").lint();
  ASSERT_EQ(count_rule(f, "SP108"), 1);
  EXPECT_EQ(find(f, "SP108")->message,
            "capabilities.fs.write[1] allows writing `/workdir/cache` outside /workdir/out but determinism_tier is "
            "read-only");
  EXPECT_EQ(count_rule(Pack().tier(Tier::side_effect).write("/workdir/cache").lint(), "SP108"), 0);
}

TEST(LintTier, PrivateScratchIsNotASideEffect) {
  // M6: /tmp (the Comet's own tmpfs) in a read-only pack: no SP108, and under --strict the
  // pack needs no looser tier (no SP115); a side-effect pack with only scratch is too loose.
  auto f = Pack().write("/workdir/out").write("/tmp").file("s", ToolKind::fs_write, "/workdir/out/a").lint(true);
  EXPECT_EQ(count_rule(f, "SP108"), 0);
  EXPECT_EQ(count_rule(f, "SP115"), 0);
  auto loose = Pack().tier(Tier::side_effect).write("/tmp").lint(true);
  EXPECT_EQ(count_rule(loose, "SP114"), 1);
}

TEST(LintTier, PrivateScratchNeedsNoToolNorExample) {
  // M6 scratch (/tmp, /home/agent) is the Comet's own tmpfs: like the standard paths, neither
  // SP106 nor, under --strict, SP113 asks a tool or an example for it (`pack init` declares
  // /tmp). A non-scratch write path, and a read path, still need one.
  auto f = Pack().write("/workdir/out").write("/tmp").write("/home/agent").lint(true);
  EXPECT_EQ(count_rule(f, "SP106"), 0);
  EXPECT_EQ(count_rule(f, "SP113"), 0);
  auto g = Pack().tier(Tier::side_effect).write("/workdir/cache").lint(true);
  EXPECT_EQ(count_rule(g, "SP106"), 1);
  EXPECT_EQ(count_rule(g, "SP113"), 1);
  auto r = Pack().read("/tmp").lint(true);
  EXPECT_EQ(count_rule(r, "SP106"), 1);
  EXPECT_EQ(count_rule(r, "SP113"), 1);
}

// ---- strict ----

TEST(LintStrict, StrictRulesOffByDefault) {
  auto p = Pack().egress("*.example.com", 443).egress("10.0.0.1", 80, Protocol::http)
               .http("a", "api.example.com").http("b", "10.0.0.1", 80, Protocol::http).tier(Tier::side_effect);
  EXPECT_TRUE(p.lint(false).empty());
  auto s = p.lint(true);
  EXPECT_EQ(count_rule(s, "SP110"), 1);
  EXPECT_EQ(count_rule(s, "SP111"), 1);
  EXPECT_EQ(count_rule(s, "SP112"), 2);
  EXPECT_EQ(count_rule(s, "SP114"), 1);
}

TEST(LintStrict, WildcardHostIsError) {
  auto f = Pack().egress("*.example.com", 443).http("a", "api.example.com").example({"a"}).lint(true);
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP110"}));
  EXPECT_EQ(f[0].severity, Severity::error);
  EXPECT_EQ(f[0].message, "capabilities.egress[0] uses the wildcard host `*.example.com`");
  auto any = Pack().any_egress().tier(Tier::unrestricted).lint(true);
  EXPECT_EQ(ids(any), (std::vector<std::string>{"SP110"}));
  EXPECT_EQ(any[0].key_path, "capabilities.egress");
}

TEST(LintStrict, IpLiteralIsWarning) {
  for (const char* ip : {"10.0.0.1", "2001:db8::1"}) {
    auto f = Pack().egress(ip, 443).http("a", ip).example({"a"}).lint(true);
    ASSERT_EQ(ids(f), (std::vector<std::string>{"SP111"})) << ip;
    EXPECT_EQ(f[0].severity, Severity::warning);
  }
  EXPECT_TRUE(Pack().egress("api.example.com", 443).http("a", "api.example.com").example({"a"}).lint(true).empty());
}

TEST(LintStrict, EntryNotExercisedByAnyExample) {
  auto p = Pack().egress("a.example.com", 443).egress("b.example.com", 443).http("a", "a.example.com")
               .http("b", "b.example.com").example({"a"});
  auto f = p.lint(true);
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP112"}));
  EXPECT_EQ(f[0].key_path, "capabilities.egress[1]");
  EXPECT_EQ(f[0].message, "capabilities.egress[1] declares `b.example.com:443/https` but no example exercises it");
  // Exercised through a second example.
  EXPECT_TRUE(p.example({"b"}).lint(true).empty());
  // Unknown tool names in an example exercise nothing.
  EXPECT_EQ(count_rule(Pack().egress("a.example.com", 443).http("a", "a.example.com").example({"zzz"}).lint(true),
                       "SP112"),
            1);
}

TEST(LintStrict, UnusedEntryIsAlsoNotExercised) {
  auto f = Pack().egress("a.example.com", 443).lint(true);
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP105", "SP112"}));
}

TEST(LintStrict, NonStandardFsPathNotExercised) {
  auto p = Pack().write("/workdir/out").read("/data").file("load", ToolKind::fs_read, "/data/a")
               .file("save", ToolKind::fs_write, "/workdir/out/b");
  auto f = p.lint(true);
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP113"}));
  EXPECT_EQ(f[0].message, "capabilities.fs.read[0] declares `/data` but no example exercises it");
  EXPECT_TRUE(p.example({"load"}).lint(true).empty());  // /workdir/out is standard: exempt
}

TEST(LintStrict, TierLooserThanNeeded) {
  auto f = Pack().tier(Tier::side_effect).lint(true);
  EXPECT_EQ(ids(f), (std::vector<std::string>{"SP114"}));
  EXPECT_EQ(f[0].severity, Severity::warning);
  EXPECT_EQ(f[0].key_path, "capabilities.determinism_tier");
  EXPECT_EQ(f[0].message,
            "determinism_tier is side-effect but no tool has a side effect: read-only is enough");
  auto u = Pack().tier(Tier::unrestricted).custom("c", true).lint(true);
  EXPECT_EQ(ids(u), (std::vector<std::string>{"SP114"}));
  EXPECT_EQ(u[0].message, "determinism_tier is unrestricted but capabilities.egress is not \"*\": side-effect is enough");
  EXPECT_TRUE(Pack().tier(Tier::side_effect).custom("c", true).lint(true).empty());
  EXPECT_TRUE(Pack().tier(Tier::unrestricted).any_egress().lint(true).size() == 1);  // only SP110
  EXPECT_TRUE(Pack().lint(true).empty());
}

// needed_tier(): the one rule SP114 / SP115 report and `pack learn` proposes by.
TEST(LintTier, NeededTierNamesWhatDecidedIt) {
  auto ro = needed_tier(Pack().write("/workdir/out").write("/tmp").http("get", "a.example", 443).manifest());
  EXPECT_EQ(ro.tier, Tier::read_only);
  EXPECT_EQ(ro.because, "no tool has a side effect and every fs.write path is /workdir/out or private scratch");
  auto post = needed_tier(Pack().http("notify", "h.example", 443, Protocol::https, ToolKind::http_post).manifest());
  EXPECT_EQ(post.tier, Tier::side_effect);
  EXPECT_EQ(post.because, "tools.notify (builtin.http_post) has a side effect");
  auto cache = needed_tier(Pack().write("/tmp").write("/workdir/cache").manifest());
  EXPECT_EQ(cache.tier, Tier::side_effect);
  EXPECT_EQ(cache.because, "capabilities.fs.write[1] `/workdir/cache` is outside /workdir/out and not private scratch");
  auto any = needed_tier(Pack().any_egress().custom("c", true).manifest());
  EXPECT_EQ(any.tier, Tier::unrestricted);
  EXPECT_EQ(any.because, "capabilities.egress is \"*\"");
  // builtin.llm has no side effect (M3).
  EXPECT_EQ(needed_tier(Pack().http("ask", "m.example", 443, Protocol::https, ToolKind::llm).manifest()).tier,
            Tier::read_only);
  // The same rule as SP114 / SP115: lint --strict is silent on the tier exactly when the
  // declared tier is the needed one.
  for (Tier declared : {Tier::read_only, Tier::side_effect, Tier::unrestricted}) {
    for (int shape = 0; shape < 4; ++shape) {
      Pack p;
      p.tier(declared);
      if (shape == 1) p.write("/workdir/cache");
      if (shape == 2) p.custom("c", true);
      if (shape == 3) p.any_egress();
      const auto f = p.lint(true);
      const bool tier_finding = count_rule(f, "SP114") + count_rule(f, "SP115") > 0;
      EXPECT_EQ(tier_finding, needed_tier(p.manifest()).tier != declared) << static_cast<int>(declared) << shape;
    }
  }
}

TEST(LintTier, LearnProposesNarrowerWhenLessIsNeededAndWiderOnlyWhenLintRefuses) {
  // Narrower: SP114's finding.
  auto narrow = propose_tier(Pack().tier(Tier::side_effect).write("/workdir/out").write("/var/cache/x").manifest());
  ASSERT_TRUE(narrow);
  EXPECT_EQ(narrow->from, Tier::side_effect);
  EXPECT_EQ(narrow->to, Tier::read_only);
  EXPECT_EQ(narrow->rule, "SP114");
  EXPECT_EQ(narrow->why,
            "SP114 tier-looser-than-needed: no tool has a side effect and every fs.write path is /workdir/out or "
            "private scratch");
  auto unr = propose_tier(Pack().tier(Tier::unrestricted).custom("c", true).manifest());
  ASSERT_TRUE(unr);
  EXPECT_EQ(unr->to, Tier::side_effect);
  EXPECT_EQ(unr->why,
            "SP114 tier-looser-than-needed: capabilities.egress is not \"*\"; tools.c (custom) has a side effect");
  // Wider: lint refuses the manifest at its tier (SP108 for a write that outlives the run).
  auto wide = propose_tier(Pack().write("/workdir/cache").manifest());
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->from, Tier::read_only);
  EXPECT_EQ(wide->to, Tier::side_effect);
  EXPECT_EQ(wide->rule, "SP108");
  EXPECT_EQ(wide->why,
            "SP108 read-only-write-outside-out: capabilities.fs.write[0] `/workdir/cache` is outside /workdir/out and "
            "not private scratch");
  auto tool = propose_tier(Pack().http("notify", "h.example", 443, Protocol::https, ToolKind::http_post).manifest());
  ASSERT_TRUE(tool);
  EXPECT_EQ(tool->rule, "SP107");
  // Nothing when the declared tier is the needed one.
  EXPECT_FALSE(propose_tier(Pack().write("/workdir/out").write("/tmp").manifest()));
  EXPECT_FALSE(propose_tier(Pack().tier(Tier::side_effect).custom("c", true).manifest()));
  EXPECT_FALSE(propose_tier(Pack().tier(Tier::unrestricted).any_egress().manifest()));
  // Stricter than needed without lint refusing it (egress "*" in a side-effect pack is
  // refused by validation, not by a lint rule outside --strict): not loosened on a guess.
  EXPECT_FALSE(propose_tier(Pack().tier(Tier::side_effect).any_egress().manifest()));
}

TEST(LintStrict, LlmInAReadOnlyPackIsClean) {
  // builtin.llm has no side effect (M3): a read-only pack may call a model.
  auto p = Pack().egress("api.anthropic.com", 443).http("ask", "api.anthropic.com", 443, Protocol::https, ToolKind::llm)
               .example({"ask"});
  EXPECT_TRUE(p.lint(false).empty());
  EXPECT_TRUE(p.lint(true).empty());
  // ...and side-effect is looser than it needs.
  EXPECT_EQ(ids(p.tier(Tier::side_effect).lint(true)), (std::vector<std::string>{"SP114"}));
}

TEST(LintStrict, TierStricterThanNeededIsReportedOnTheTier) {
  auto p = Pack().tier(Tier::read_only).custom("c", true);
  auto strict = p.lint(true);
  bool found = false;
  for (const auto& f : strict) {
    if (f.rule_id == "SP115") {
      found = true;
      EXPECT_EQ(f.severity, Severity::error);
      EXPECT_EQ(f.key_path, "capabilities.determinism_tier");
      EXPECT_EQ(f.message, "determinism_tier is read-only but the pack needs side-effect");
    }
  }
  EXPECT_TRUE(found);
  for (const auto& f : p.lint(false)) EXPECT_NE(f.rule_id, "SP115");
}

// ---- ordering, ids, scale ----

TEST(Lint, FindingsAreOrderedByPosition) {
  auto f = Pack().egress("x.example.com", 443).read("/data").http("a", "a.example.com").lint();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_LT(f[0].mark.line, f[1].mark.line);
}

TEST(Lint, RuleTableIsConsistent) {
  std::string prev;
  for (const RuleInfo& r : rules()) {
    EXPECT_GT(std::string(r.id), prev);
    prev = std::string(r.id);
    EXPECT_FALSE(r.summary.empty());
    EXPECT_EQ(r.summary.find('\n'), std::string_view::npos) << r.id;
    EXPECT_FALSE(r.why.empty());
    EXPECT_FALSE(r.fix.empty());
    EXPECT_FALSE(r.example.empty());
    EXPECT_EQ(find_rule(r.id), &r);
  }
  EXPECT_NE(find_rule("sp102"), nullptr);
  EXPECT_EQ(find_rule("SP999"), nullptr);
  EXPECT_EQ(rule_index("SP999"), -1);
}

TEST(Lint, EveryEmittedRuleIsInTheTable) {
  auto f = Pack().egress("*.a.com", 443).egress("1.2.3.4", 443).egress("z.com", 443).read("/d").write("/s")
               .http("p", "q.com", 443, Protocol::https, ToolKind::http_post)
               .http("l", "r.com", 443, Protocol::https, ToolKind::llm)
               .file("w", ToolKind::fs_write, "/t/x").file("r", ToolKind::fs_read, "/u/x").lint(true);
  for (const auto& x : f) EXPECT_NE(find_rule(x.rule_id), nullptr) << x.rule_id;
  EXPECT_GE(f.size(), 6u);
}

TEST(Lint, LargeManifestIsFast) {
  Pack p;
  p.tier(Tier::side_effect);
  for (int i = 0; i < 20000; ++i) {
    std::string h = "h" + std::to_string(i) + ".example.com";
    p.egress(h, 443).http("t" + std::to_string(i), i % 2 ? h : "x" + h);
  }
  auto f = p.lint(true);
  EXPECT_EQ(count_rule(f, "SP102"), 10000);
}

}  // namespace
}  // namespace soyaos::lint
