// Issue #13's "Done when": a newcomer goes from an empty directory to a pushed, strictly
// linted pack with a learned manifest without reading a violation by hand — the flow of
// docs/authoring.md, in one test: `pack init` → the code changed to read a file, write
// scratch state and fetch from an https host (a real server on loopback), with the tools
// that say so → `pack learn --write` → `pack lint --strict` → `pack test` → `pack push` to a
// real OCI registry (Debian's docker-registry on 127.0.0.1). The suite is named Egress* so
// that ctest runs it as root and (rootless.) as nobody.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "egress_fixture.h"
#include "registry_server.h"

namespace soyaos::testing::egress {
namespace {

namespace fs = std::filesystem;

// init's main.py, changed the way docs/authoring.md changes it: an optional stop-word list
// the operator may mount, the last summary kept in a cache directory of its own, and words
// fetched from an https service (the test server's certificate is self-signed).
std::string agent_code(int port) {
  return R"PY(import os
import ssl
import sys
import urllib.request

INPUTS = "/workdir/inputs"
OUT = "/workdir/out"
STOPWORDS = "/data/stopwords.txt"
STATE = "/var/cache/word-count/last.txt"
WORDS = "https://words.learn.test:)PY" +
         std::to_string(port) + R"PY(/v1/words"


def stopwords():
    try:
        with open(STOPWORDS, encoding="utf-8") as f:
            return set(f.read().split())
    except OSError:
        return set()


def remote():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(WORDS, context=ctx, timeout=10) as r:
            return r.read().decode()
    except OSError as e:
        return "unavailable (%s)" % type(e).__name__


def main(argv):
    skip = stopwords()
    files = lines = words = 0
    if os.path.isdir(INPUTS):
        for name in sorted(os.listdir(INPUTS)):
            path = os.path.join(INPUTS, name)
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            files += 1
            lines += text.count("\n")
            words += len([w for w in text.split() if w not in skip])
    summary = f"{files} file(s), {lines} line(s), {words} word(s)"
    with open(os.path.join(OUT, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(summary + "\n")
    try:
        with open(STATE, "w", encoding="utf-8") as f:
            f.write(summary + "\n")
    except OSError:
        pass
    print("summary: " + summary)
    print("remote: " + remote())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
)PY";
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "no `" << from << "` in:\n" << text;
  text.replace(at, from.size(), to);
}

class EgressAuthoring : public EgressTest {};

TEST_F(EgressAuthoring, FromAnEmptyDirectoryToAPushedStrictlyLintedLearnedPack) {
  if (!RegistryServer::available()) GTEST_SKIP() << "docker-registry is not installed (scripts/setup.sh)";
  HttpsServer words;
  set_moon({{"words.learn.test", "127.0.0.1"}});
  RegistryServer registry;
  ASSERT_EQ(registry.start(dir_.path() / "registry", {}), "");
  fs::create_directories(dir_.path() / "docker");
  const std::map<std::string, std::string> env = {{"SOYAOS_HOME", home_.string()},
                                                  {"DOCKER_CONFIG", (dir_.path() / "docker").string()},
                                                  {"SOYAOS_INSECURE_REGISTRIES", registry.address()},
                                                  {"SOYAOS_REGISTRY_BACKOFF_MS", "10"}};
  auto soyaos = [&](const std::vector<std::string>& args) { return run_soyaos(args, env, dir_.path()); };

  // 1. An empty directory → a pack that passes every check as written.
  fs::create_directories(dir_.path() / "word-count");
  fs::permissions(dir_.path() / "word-count", fs::perms::all);
  const fs::path pack = dir_.path() / "word-count";
  auto init = soyaos({"pack", "init", "--runtime", "python3", pack.string()});
  ASSERT_EQ(init.exit_code, 0) << init.out << init.err;

  // 2. The code changes (and the tools that name what it uses, and the example's expectation):
  //    nothing in the capabilities yet.
  const std::string port = std::to_string(words.port());
  std::ofstream(pack / "main.py", std::ios::trunc) << agent_code(words.port());
  std::string manifest = read_file(pack / "soyapack.yaml");
  replace_once(manifest, "version: 0.1.0", "version: 0.2.0");
  replace_once(manifest, "capabilities:\n",
               "tools:\n  stopwords: {kind: builtin.fs_read, path: /data/stopwords.txt}\n"
               "  words: {kind: builtin.http_get, url: \"https://words.learn.test:" + port + "/v1/words\"}\n"
               "capabilities:\n");
  replace_once(manifest, "    input: examples/hello.txt", "    tools: [stopwords, words]\n    input: examples/hello.txt");
  replace_once(manifest, "stdout_contains: \"summary: 1 file(s), 2 line(s), 9 word(s)\"",
               "stdout_contains: \"remote: hello from words.learn.test:" + port + "\"");
  std::ofstream(pack / "soyapack.yaml", std::ios::trunc) << manifest;

  // 3. Learn: the read, the write and the host (port and protocol too), nothing more, in
  //    few rounds; the https server sees nothing (no --allow-network).
  auto learn = soyaos({"pack", "learn", pack.string(), "--write"});
  EXPECT_EQ(learn.exit_code, 0) << learn.out << learn.err;
  EXPECT_TRUE(contains(learn.err, "round 2: 1 run")) << learn.err;
  EXPECT_FALSE(contains(learn.err, "round 4:")) << learn.err;
  EXPECT_TRUE(contains(learn.out, "+    - {host: words.learn.test, port: " + port +
                                      ", protocol: https}  # learned from example basic: TLS ClientHello, SNI "
                                      "words.learn.test\n"))
      << learn.out;
  EXPECT_TRUE(contains(learn.out, "+      - /data/stopwords.txt  # learned from example basic: read /data/stopwords.txt\n"))
      << learn.out;
  EXPECT_TRUE(contains(learn.out, "+      - /var/cache/word-count  # learned from example basic: write "
                                  "/var/cache/word-count/last.txt"))
      << learn.out;
  // init's read-only is the tier this pack needs: the tier line is left as it is.
  EXPECT_FALSE(contains(learn.out, "\n-  determinism_tier")) << learn.out;
  EXPECT_TRUE(contains(learn.err, "wrote ")) << learn.err;
  expect_untouched(words);  // learning reached no host: no --allow-network
  const std::string learned = read_file(pack / "soyapack.yaml");
  EXPECT_EQ(learned.rfind("# word-count: a SoyaPack", 0), 0U) << learned;  // init's comments kept

  // 4. Strict lint, clean; the examples pass, now reaching the server through the gateway.
  auto lint = soyaos({"pack", "lint", "--strict", pack.string()});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  EXPECT_EQ(lint.out, "0 errors · 0 warnings\n") << lint.out;
  auto test = soyaos({"pack", "test", "--strict", pack.string()});
  EXPECT_EQ(test.exit_code, 0) << test.out << test.err;
  EXPECT_TRUE(contains(test.out, "PASS  basic")) << test.out << test.err;
  EXPECT_GE(words.accepted(), 1) << test.out << test.err;

  // 5. Push to the registry; what it holds is the learned manifest.
  const std::string ref = registry.address() + "/team/word-count:0.2.0";
  auto push = soyaos({"pack", "push", pack.string(), ref});
  EXPECT_EQ(push.exit_code, 0) << push.out << push.err;
  auto inspect = soyaos({"pack", "inspect", ref});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.out << inspect.err;
  EXPECT_TRUE(contains(inspect.out, "words.learn.test")) << inspect.out;
  EXPECT_TRUE(contains(inspect.out, "/var/cache/word-count")) << inspect.out;

  // Not one violation along the way: learn rounds record learn_observed, the rest ran clean.
  auto violations = soyaos({"scope", "query", "--type", "capability_violation", "--format", "json"});
  EXPECT_EQ(violations.exit_code, 0) << violations.err;
  EXPECT_EQ(violations.out, "") << violations.out;
  auto observed = soyaos({"scope", "query", "--type", "learn_observed", "--format", "json"});
  EXPECT_TRUE(contains(observed.out, "words.learn.test")) << observed.out;
}

}  // namespace
}  // namespace soyaos::testing::egress
