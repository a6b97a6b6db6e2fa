// SP120 (secret bound to an uncovered host) and SP121 (credential-looking literals): the
// rules on manifests built in memory, and the heuristics both ways — real key shapes are
// found, model names, versions, paths, UUIDs and digests are not.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <csignal>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "common/secret_bytes.h"
#include "lint/lint.h"
#include "policy/secrets.h"

namespace soyaos::lint {
namespace {

using manifest::EgressEntry;
using manifest::Manifest;
using manifest::Mark;
using manifest::Protocol;
using manifest::SecretDecl;

Manifest base() {
  Manifest m;
  m.name = "p";
  m.version = "1.0.0";
  m.capabilities.tier = manifest::Tier::side_effect;
  return m;
}

EgressEntry entry(std::string host, Protocol p, std::size_t i) {
  EgressEntry e;
  e.host = std::move(host);
  e.port = 443;
  e.protocol = p;
  e.key_path = "capabilities.egress[" + std::to_string(i) + "]";
  e.mark = Mark{static_cast<int>(20 + i), 7};
  return e;
}

SecretDecl secret(std::string name, std::vector<std::string> hosts) {
  SecretDecl d;
  d.name = name;
  d.key_path = "secrets." + name;
  d.mark = Mark{10, 3};
  for (std::size_t i = 0; i < hosts.size(); ++i) d.host_marks.push_back(Mark{11, static_cast<int>(13 + 20 * i)});
  d.hosts = std::move(hosts);
  return d;
}

std::vector<Finding> only(const std::vector<Finding>& all, const std::string& rule) {
  std::vector<Finding> out;
  for (const auto& f : all) {
    if (f.rule_id == rule) out.push_back(f);
  }
  return out;
}

TEST(LintSecrets, SecretHostMustBeCoveredByAnHttpsOrHttpEntry) {
  Manifest m = base();
  m.capabilities.egress = {entry("api.example.com", Protocol::https, 0), entry("*.example.org", Protocol::http, 1),
                           entry("db.example.net", Protocol::tcp, 2)};
  m.secrets = {secret("A_KEY", {"api.example.com", "x.example.org", "db.example.net", "other.example.com"})};
  auto f = only(lint(m), "SP120");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].severity, Severity::error);
  EXPECT_EQ(f[0].key_path, "secrets.A_KEY.hosts[2]");
  EXPECT_EQ(f[0].mark, (Mark{11, 53}));
  EXPECT_EQ(f[0].message,
            "secrets.A_KEY is bound to `db.example.net` but no https or http capabilities.egress entry covers it");
  EXPECT_EQ(f[1].key_path, "secrets.A_KEY.hosts[3]");
  // egress "*" is no entry the gateway can intercept for a secret.
  Manifest any = base();
  any.capabilities.egress_any = true;
  any.secrets = {secret("A_KEY", {"api.example.com"})};
  EXPECT_EQ(only(lint(any), "SP120").size(), 1u);
  // Covered: nothing.
  Manifest ok = base();
  ok.capabilities.egress = {entry("api.example.com", Protocol::https, 0)};
  ok.secrets = {secret("A_KEY", {"api.example.com"})};
  EXPECT_TRUE(only(lint(ok), "SP120").empty());
}

TEST(LintSecrets, CredentialLiteralsInEnvArgsExamplesAndUrls) {
  const std::string key = "sk-ant-api03-Xy7kP2mQ9vL4nR8tW1zB6cD3fG5hJ0aE";
  Manifest m = base();
  m.agent.env = {{"LOG_LEVEL", "info"}, {"ANTHROPIC_API_KEY", key}};
  m.agent.env_marks = {{"LOG_LEVEL", Mark{5, 18}}, {"ANTHROPIC_API_KEY", Mark{6, 26}}};
  m.agent.args = {"--fast", "--token=ghp_" + std::string(36, 'a').replace(3, 3, "9Zq")};
  m.agent.arg_marks = {Mark{7, 10}, Mark{7, 20}};
  manifest::Example ex;
  ex.name = "basic";
  ex.key_path = "examples[0]";
  ex.mark = Mark{30, 5};
  ex.args = {"model=claude-3-5-sonnet-20241022", "AKIAIOSFODNN7EXAMPLE"};
  ex.arg_marks = {Mark{31, 12}, Mark{31, 50}};
  m.examples.push_back(ex);
  manifest::Tool t;
  t.name = "fetch";
  t.kind = manifest::ToolKind::http_get;
  t.key_path = "tools.fetch";
  t.url = "https://maps.example.com/v1?key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY";
  t.url_mark = Mark{15, 10};
  m.tools.push_back(t);
  auto f = only(lint(m), "SP121");
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].key_path, "agent.env.ANTHROPIC_API_KEY");
  EXPECT_EQ(f[0].mark, (Mark{6, 26}));
  EXPECT_EQ(f[0].severity, Severity::error);
  EXPECT_EQ(f[0].message,
            "agent.env.ANTHROPIC_API_KEY holds what looks like an Anthropic API key (sk-ant-...); declare it under "
            "secrets: instead");
  EXPECT_EQ(f[1].key_path, "agent.args[1]");
  EXPECT_EQ(f[2].key_path, "tools.fetch.url");
  EXPECT_EQ(f[3].key_path, "examples[0].args[1]");
  EXPECT_EQ(f[3].mark, (Mark{31, 50}));
  for (const auto& x : f) {
    EXPECT_EQ(x.message.find(key), std::string::npos) << "a finding never repeats the literal";
    EXPECT_EQ(x.message.find("EXAMPLE"), std::string::npos);
  }
}

TEST(LintSecrets, KnownShapesAreFound) {
  const std::vector<std::string> keys = {
      "sk-ant-api03-Xy7kP2mQ9vL4nR8tW1zB6cD3fG5hJ0aE",
      "sk-proj-4fJ8kL2mN9pQ3rS7tU1vW5xY0zA6bC",
      "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ",
      "github_pat_11ABCDEFG0abcdefghij_KLMNOPqrstuvwxyz0123456789",
      "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
      "glpat-xY9z8W7v6U5t4S3r2Q1p",
      "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
      "AKIAIOSFODNN7EXAMPLE",
      "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
      "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----",
      "-----BEGIN RSA PRIVATE KEY-----",
      "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
      "postgres://admin:hunter2@db.example.com:5432/app",
      "Bearer wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
      "--api-key=Q7vLw2pXz9RkT4mN8bYc1dHf6gJs3aE5",
  };
  for (const auto& k : keys) EXPECT_TRUE(looks_like_credential(k).has_value()) << k;
  EXPECT_EQ(*looks_like_credential(keys[0]), "an Anthropic API key (sk-ant-...)");
  EXPECT_EQ(*looks_like_credential(keys[7]), "an AWS access key id (AKIA...)");
  EXPECT_EQ(*looks_like_credential(keys.back()), "a high-entropy token (random-looking, like an API key)");
}

TEST(LintSecrets, OrdinaryValuesAreNotCredentials) {
  const std::vector<std::string> values = {
      "info", "--fast", "claude-3-5-sonnet-20241022", "gpt-4o-mini-2024-07-18",
      "mistralai/Mixtral-8x7B-Instruct-v0.1", "Qwen/Qwen2.5-Coder-32B-Instruct",
      "sentence-transformers/all-MiniLM-L6-v2", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
      "HuggingFaceH4/zephyr-7b-beta", "meta-llama/Meta-Llama-3.1-70B-Instruct",
      "--output=/workdir/out/report-2024-12-01.json", "/workdir/inputs/data2024/x1",
      "123e4567-e89b-12d3-a456-426614174000",
      "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
      "11f6ad8ec52a2984abaafd7c3b516503785c2072", "https://api.example.com/v1/messages?limit=20",
      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "task-runner-2024", "sk-learn", "sk-learn-and-other-words-here",
      "projects/my-project-123/locations/us-central1", "en_US.UTF-8", "ghp_short",
      "AKIA-not-a-key", "eyJhbGciOiJIUzI1NiJ9", "http://moon:3128", "user@example.com",
  };
  for (const auto& v : values) EXPECT_FALSE(looks_like_credential(v).has_value()) << v << ": " << *looks_like_credential(v);
}

TEST(SecretBytes, HoldsACopyAndDropsOneNewline) {
  auto s = SecretBytes::copy_of("abc\n\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->view(), "abc\n\n");
  s->drop_trailing_newline();
  EXPECT_EQ(s->view(), "abc\n");
  auto crlf = SecretBytes::copy_of("key\r\n");
  ASSERT_TRUE(crlf.ok());
  crlf->drop_trailing_newline();
  EXPECT_EQ(crlf->view(), "key");
  SecretBytes moved = std::move(*crlf);
  EXPECT_EQ(moved.view(), "key");
  EXPECT_TRUE(crlf->empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(SecretBytes::copy_of("").value().empty());
  EXPECT_FALSE(SecretBytes::copy_of(std::string(SecretBytes::kMaxBytes + 1, 'x')).ok());
  EXPECT_TRUE(SecretBytes::copy_of(std::string(SecretBytes::kMaxBytes, 'x')).ok());
}

TEST(SecretBytes, PagesAreExcludedFromCoreDumps) {
  auto s = SecretBytes::copy_of("a-value-to-find-in-smaps");
  ASSERT_TRUE(s.ok());
  // /proc/self/smaps lists "dd" (VM_DONTDUMP) among the VmFlags of the mapping.
  const auto addr = reinterpret_cast<uintptr_t>(s->view().data());
  FILE* f = std::fopen("/proc/self/smaps", "re");
  ASSERT_NE(f, nullptr);
  char line[512];
  bool in_mapping = false, found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    // A mapping's header ("lo-hi perms ..."); field lines ("Size:", "AnonHugePages:") never
    // parse as two hex numbers around '-'.
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in_mapping = addr >= lo && addr < hi;
      continue;
    }
    if (in_mapping && std::strncmp(line, "VmFlags:", 8) == 0) {
      found = std::strstr(line, " dd") != nullptr;
      break;
    }
  }
  (void)std::fclose(f);
  EXPECT_TRUE(found) << "the secret's pages lack VM_DONTDUMP";
}

// read_all sizes its pages to a regular file (one page for a key file, issue #16) and reads
// the same as with the full buffer: every size around a page and the bound, from a file and
// from a pipe (no size known), and more than kMaxBytes refused either way.
TEST(SecretBytes, ReadAllReadsFilesAndPipesOfEverySizeUpToTheBound) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t max = SecretBytes::kMaxBytes;
  for (size_t n : {size_t{0}, size_t{1}, size_t{119}, page - 1, page, page + 1, 3 * page + 5, max - 1, max, max + 1,
                   max + page}) {
    std::string content(n, '\0');
    for (size_t i = 0; i < n; ++i) content[i] = static_cast<char>('a' + i % 26);
    char path[] = "/tmp/soyaos-secret-bytes-XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, content.data(), n), static_cast<ssize_t>(n));
    ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);
    auto from_file = SecretBytes::read_all(fd, "file");
    (void)::close(fd);
    (void)::unlink(path);
    if (n > max) {
      EXPECT_FALSE(from_file.ok()) << n;
      EXPECT_EQ(from_file.error().err, EFBIG) << n;
    } else {
      ASSERT_TRUE(from_file.ok()) << n << ": " << from_file.error().describe();
      EXPECT_EQ(from_file->view(), content) << n;
    }
    // A pipe: no size to go by; written by a child so that more than the pipe holds fits.
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      (void)::close(p[0]);
      size_t off = 0;
      while (off < n) {
        const ssize_t w = ::write(p[1], content.data() + off, n - off);
        if (w <= 0) ::_exit(1);
        off += static_cast<size_t>(w);
      }
      ::_exit(0);
    }
    (void)::close(p[1]);
    auto from_pipe = SecretBytes::read_all(p[0], "pipe");
    (void)::close(p[0]);
    int status = 0;
    (void)::waitpid(child, &status, 0);
    if (n > max) {
      EXPECT_FALSE(from_pipe.ok()) << n;
    } else {
      ASSERT_TRUE(from_pipe.ok()) << n;
      EXPECT_EQ(from_pipe->view(), content) << n;
    }
  }
}

// A regular file longer than its size said at fstat (procfs reports 0 for its files; a
// child's environ of ~10 KiB): the buffer grows past its first page and nothing is lost.
TEST(SecretBytes, ReadAllGrowsPastAFilesStatedSize) {
  const std::string var = "SOYAOS_BIG=" + std::string(10000, 'v');
  char* const argv[] = {const_cast<char*>("/bin/sleep"), const_cast<char*>("5"), nullptr};
  char* const envp[] = {const_cast<char*>(var.c_str()), nullptr};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execve(argv[0], argv, envp);
    ::_exit(127);
  }
  const std::string file = "/proc/" + std::to_string(child) + "/environ";
  std::string want = var + std::string(1, '\0');
  std::string got;
  for (int i = 0; i < 500 && got != want; ++i) {  // until the child has exec'd
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    ASSERT_EQ(st.st_size, 0);
    auto v = SecretBytes::read_all(fd, "environ");
    (void)::close(fd);
    ASSERT_TRUE(v.ok()) << v.error().describe();
    got = std::string(v->view());
    if (got != want) ::usleep(2000);
  }
  (void)::kill(child, SIGKILL);
  (void)::waitpid(child, nullptr, 0);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "the environ read lost or changed bytes";
}

TEST(Placeholder, IsPrefixedRandomHex) {
  auto a = policy::new_placeholder();
  auto b = policy::new_placeholder();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->size(), std::string("soyaos-placeholder-").size() + 32);
  EXPECT_EQ(a->rfind("soyaos-placeholder-", 0), 0u);
  for (char c : a->substr(19)) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << *a;
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace soyaos::lint
