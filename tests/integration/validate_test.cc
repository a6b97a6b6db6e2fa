// `soyaos pack validate` end to end (SPEC.md T1): the real binary, real pack directories.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <string>

#include "harness.h"

namespace soyaos::testing {
namespace {

const std::string kManifest =
    "soyapack: v0\n"
    "name: demo\n"
    "version: 1.2.3\n"
    "agent:\n"
    "  runtime: python3\n"
    "  entrypoint: main.py\n"
    "capabilities:\n"
    "  egress:\n"
    "    - host: api.example.com\n"
    "      port: 443\n"
    "      protocol: https\n"
    "    - host: api.example.org\n"
    "      port: 99999\n"
    "      protocol: https\n"
    "  determinism_tier: read-only\n";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

std::size_t count_lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(PackValidate, ShippedExamplesAreValid) {
  for (const char* name : {"hello-report", "issue-summarizer", "slack-notifier"}) {
    auto r = run_soyaos({"pack", "validate", source_path(std::string("examples/") + name).string()});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    EXPECT_EQ(r.out.substr(0, 4 + std::string(name).size()), std::string("ok  ") + name) << r.out;
  }
  auto r = run_soyaos({"pack", "validate", source_path("examples/issue-summarizer").string()});
  EXPECT_EQ(r.out, "ok  issue-summarizer@1.4.2\n");
}

TEST(PackValidate, ValidPackPrintsNameAtVersion) {
  TempDir t;
  t.write("soyapack.yaml", replace(kManifest, "port: 99999", "port: 8443"));
  t.write("main.py", "print('hi')\n");
  auto r = run_soyaos({"pack", "validate", t.path().string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok  demo@1.2.3\n");
  EXPECT_EQ(r.err, "");
}

TEST(PackValidate, DefaultsToTheCurrentDirectory) {
  TempDir t;
  t.write("soyapack.yaml", replace(kManifest, "port: 99999", "port: 8443"));
  t.write("main.py", "");
  auto r = run_soyaos({"pack", "validate"}, {}, t.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok  demo@1.2.3\n");
}

TEST(PackValidate, OneLinePerErrorOnStderr) {
  TempDir t;
  std::string text = replace(kManifest, "name: demo", "name: Demo");
  text = replace(text, "runtime: python3", "runtime: ruby");
  t.write("soyapack.yaml", text);
  t.write("main.py", "");
  auto r = run_soyaos({"pack", "validate", "."}, {}, t.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "./soyapack.yaml:2:7: error: name: \"Demo\" must match ^[a-z][a-z0-9-]{0,62}$\n"
            "./soyapack.yaml:5:12: error: agent.runtime: unknown runtime \"ruby\" (python3, node or native)\n"
            "./soyapack.yaml:13:13: error: capabilities.egress[1].port: must be an integer 1..65535\n");
}

// A diagnostic quotes the pack's own text (a key, a value). A hostile pack's key holding
// terminal escapes, a backslash and a newline must reach a reviewer's terminal escaped
// exactly once, on its own line, in every command that prints diagnostics (E7), not only
// where it was first noticed: `run` once showed them escaped twice (every backslash doubled).
TEST(PackValidate, AHostileKeyIsPrintedEscapedOnItsOwnLine) {
  TempDir t;
  t.write("soyapack.yaml",
          replace(kManifest, "name: demo\n",
                  "name: demo\n\"x\\e[2J\\e[32mpack ok\\nsoyaos: 0 violations\\r a\\\\b\": 1\n"));
  t.write("main.py", "");
  const std::string shown =
      "./soyapack.yaml:3:1: error: x\\x1B[2J\\x1B[32mpack ok\\nsoyaos: 0 violations\\r a\\\\b: unknown key (allowed: "
      "soyapack name version description agent tools secrets capabilities resources examples)";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"pack", "validate", "."}, {"pack", "lint", "."}, {"pack", "test", "."}, {"run", ".", "--no-cache"}}) {
    auto r = run_soyaos(args, {{"SOYAOS_HOME", (t.path() / "home").string()}}, t.path());
    EXPECT_NE(r.exit_code, 0) << args[1];
    EXPECT_EQ(r.err.find('\x1B'), std::string::npos) << args[1] << ": " << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(shown), std::string::npos) << args[1] << ": " << r.err;
    EXPECT_EQ(r.err.find("\\\\x1B"), std::string::npos) << args[1] << ": escaped twice: " << r.err;
    // Every diagnostic on its own line (`run` indents them under its message): the port's
    // too, after the hostile one.
    const std::string port = "./soyapack.yaml:14:13: error: capabilities.egress[1].port:";
    EXPECT_TRUE(r.err.find("\n" + port) != std::string::npos || r.err.find("\n  " + port) != std::string::npos)
        << args[1] << ": " << r.err;
  }
}

TEST(PackValidate, DisplayPathIsThePathAsGiven) {
  TempDir t;
  t.write("packs/x/soyapack.yaml", kManifest);
  t.write("packs/x/main.py", "");
  auto r = run_soyaos({"pack", "validate", "packs/x"}, {}, t.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "packs/x/soyapack.yaml:13:13: error: capabilities.egress[1].port: must be an integer 1..65535\n");
}

TEST(PackValidate, MissingDirectoryOrManifest) {
  TempDir t;
  auto r = run_soyaos({"pack", "validate", (t.path() / "nope").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("pack directory does not exist"), std::string::npos) << r.err;
  auto r2 = run_soyaos({"pack", "validate", t.path().string()});
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_NE(r2.err.find("no soyapack.yaml"), std::string::npos) << r2.err;
  EXPECT_EQ(count_lines(r2.err), 1u);
}

TEST(PackValidate, MissingEntrypoint) {
  TempDir t;
  t.write("soyapack.yaml", replace(kManifest, "port: 99999", "port: 8443"));
  auto r = run_soyaos({"pack", "validate", "."}, {}, t.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "./soyapack.yaml:6:15: error: agent.entrypoint: main.py does not exist in the pack\n");
}

TEST(PackValidate, HostileInputsFailCleanly) {
  const std::pair<const char*, std::string> cases[] = {
      {"anchors", "a: &a [x]\nb: *a\n"},
      {"not valid UTF-8", "name: \xff\n"},
      {"NUL byte", std::string("name: a\0b\n", 10)},
      {"nesting deeper", std::string(500, '[')},
      {"larger than 4194304", std::string((4u << 20) + 10, '#')},
      {"duplicate key", kManifest + "name: again\n"},
      {"tags", "name: !!binary aGk=\n"},
      {"invalid YAML", "name: [\n"},
      {"must be a mapping", "- just\n- a list\n"},
  };
  for (const auto& [fragment, text] : cases) {
    TempDir t;
    t.write("soyapack.yaml", text);
    auto r = run_soyaos({"pack", "validate", t.path().string()});
    EXPECT_EQ(r.exit_code, 1) << fragment << ": " << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << fragment << ": " << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(PackValidate, UsageErrors) {
  auto r = run_soyaos({"pack", "validate", "a", "b"});
  EXPECT_EQ(r.exit_code, 2);
  auto r2 = run_soyaos({"pack", "validate", "--frobnicate"});
  EXPECT_EQ(r2.exit_code, 2);
}

TEST(PackValidate, Help) {
  auto r = run_soyaos({"pack", "validate", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("DIR"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace soyaos::testing
