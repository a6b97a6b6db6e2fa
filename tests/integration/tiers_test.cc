// Tier coherence (SPEC.md M6) wherever a pack enters, end to end: `pack validate`,
// `pack lint`, `pack push` and `run` refuse the same mismatches (docs/tiers-and-cache.md).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "harness.h"

namespace soyaos::testing {
namespace {

std::string manifest(const std::string& tier, const std::string& extra_caps, const std::string& tools) {
  return "soyapack: v0\nname: tiers\nversion: 1.0.0\n"
         "agent:\n  runtime: python3\n  entrypoint: main.py\n" +
         tools + "capabilities:\n" + extra_caps + "  determinism_tier: " + tier + "\n";
}

struct Mismatch {
  const char* what;
  std::string yaml;
  const char* message;  // in validate's output
};

TEST(Tiers, ValidateLintPushAndRunRefuseTierMismatches) {
  const std::string post =
      "tools:\n  notify:\n    kind: builtin.http_post\n    url: https://hooks.example.com/x\n";
  const std::string post_egress = "  egress:\n    - {host: hooks.example.com, port: 443, protocol: https}\n";
  const Mismatch cases[] = {
      {"side-effect tool in a read-only pack", manifest("read-only", post_egress, post), "read-only pack"},
      {"write outside /workdir/out in a read-only pack",
       manifest("read-only", "  fs:\n    write: [/workdir/out, /workdir/cache]\n", ""), "only write under /workdir/out"},
      {"egress \"*\" in a read-only pack", manifest("read-only", "  egress: \"*\"\n", ""), "requires determinism_tier: unrestricted"},
      {"egress \"*\" in a side-effect pack", manifest("side-effect", "  egress: \"*\"\n", ""), "requires determinism_tier: unrestricted"},
  };
  for (const auto& c : cases) {
    TempDir t;
    t.write("pack/soyapack.yaml", c.yaml);
    t.write("pack/main.py", "print('hi')\n");
    const std::string pack = (t.path() / "pack").string();
    const std::map<std::string, std::string> env = {{"SOYAOS_HOME", (t.path() / "home").string()}};

    auto v = run_soyaos({"pack", "validate", pack}, env);
    EXPECT_EQ(v.exit_code, 1) << c.what;
    EXPECT_NE((v.out + v.err).find(c.message), std::string::npos) << c.what << ": " << v.out << v.err;

    auto l = run_soyaos({"pack", "lint", pack}, env);
    EXPECT_EQ(l.exit_code, 1) << c.what << ": " << l.out;

    auto p = run_soyaos({"pack", "push", pack}, env);
    EXPECT_EQ(p.exit_code, 1) << c.what << ": " << p.out << p.err;
    auto list = run_soyaos({"pack", "list"}, env);
    EXPECT_EQ(list.out.find("tiers@"), std::string::npos) << c.what << ": pushed anyway";

    auto r = run_soyaos({"run", pack, "--out", (t.path() / "out").string()}, env);
    EXPECT_EQ(r.exit_code, 125) << c.what << ": " << r.err;
  }
}

TEST(Tiers, CoherentTiersAreAccepted) {
  const std::string post =
      "tools:\n  notify:\n    kind: builtin.http_post\n    url: https://hooks.example.com/x\n";
  const std::string post_egress = "  egress:\n    - {host: hooks.example.com, port: 443, protocol: https}\n";
  // M6: private scratch (/tmp, the Comet's own tmpfs) is allowed in every tier.
  for (const auto& yaml : {manifest("side-effect", post_egress, post), manifest("unrestricted", "  egress: \"*\"\n", ""),
                           manifest("read-only", "  fs:\n    write: [/workdir/out, /tmp]\n", "")}) {
    TempDir t;
    t.write("pack/soyapack.yaml", yaml);
    t.write("pack/main.py", "print('hi')\n");
    auto v = run_soyaos({"pack", "validate", (t.path() / "pack").string()});
    EXPECT_EQ(v.exit_code, 0) << yaml << v.out << v.err;
  }
}

}  // namespace
}  // namespace soyaos::testing
