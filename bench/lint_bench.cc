// lint_bench N [--strict]: times (best of 5 runs) soyaos::lint::lint() on a manifest with N tools and N
// egress entries built in memory (the mix of bench/gen_manifest.py), because manifests of
// 10k+ entries exceed the parser's 1 MiB cap (kMaxManifestBytes). Prints one line:
//   N tools, N entries: build B ms, lint L ms, json J ms, F findings, peak RSS R KB
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lint/lint.h"
#include "lint/report.h"
#include "manifest/manifest.h"

namespace {

using namespace soyaos;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

manifest::Manifest build(int n) {
  using manifest::Protocol;
  using manifest::ToolKind;
  manifest::Manifest m;
  m.name = "bench";
  m.version = "1.0.0";
  m.file = "soyapack.yaml";
  m.capabilities.tier = manifest::Tier::read_only;
  m.tools.reserve(static_cast<std::size_t>(n));
  m.capabilities.egress.reserve(static_cast<std::size_t>(n));
  int line = 5;
  for (int i = 0; i < n; ++i) {
    std::string id = std::to_string(i);
    manifest::Tool t;
    t.name = "t" + id;
    t.key_path = "tools." + t.name;
    t.mark = {line++, 3};
    t.url_mark = {t.mark.line, 20};
    manifest::EgressEntry e;
    e.port = 443;
    e.protocol = Protocol::https;
    int k = i % 20;
    std::string host;
    if (k < 16) {
      host = "h" + id + ".x.io";
      e.host = host;
    } else if (k < 18) {
      host = "a.w" + id + ".x.io";
      e.host = "*.w" + id + ".x.io";
    } else if (k == 18) {
      t.kind = ToolKind::fs_write;
      t.path = "/workdir/out/f" + id;
      e.host = "u" + id + ".x.io";
      e.port = 80;
      e.protocol = Protocol::http;
    } else {
      host = "m" + id + ".x.io";
      e.host = host;
      e.port = 8443;
    }
    if (!host.empty()) {
      t.kind = ToolKind::http_get;
      t.url = "https://" + host + "/";
      t.target = manifest::ToolTarget{host, 443, Protocol::https};
    }
    m.tools.push_back(std::move(t));
    e.key_path = "capabilities.egress[" + id + "]";
    m.capabilities.egress.push_back(std::move(e));
  }
  for (int i = 0; i < n; ++i) m.capabilities.egress[static_cast<std::size_t>(i)].mark = {line++, 5};
  m.capabilities.fs_read.push_back({"/workdir", "capabilities.fs.read[0]", {line, 10}});
  m.capabilities.fs_write.push_back({"/workdir/out", "capabilities.fs.write[0]", {line + 1, 10}});
  manifest::Example ex;
  ex.name = "basic";
  ex.key_path = "examples[0]";
  for (int i = 0; i < n; i += 4) ex.tools.push_back("t" + std::to_string(i));
  m.examples.push_back(std::move(ex));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lint_bench N [--strict]\n");
    return 2;
  }
  char* end = nullptr;
  long parsed = std::strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || parsed < 1 || parsed > 10'000'000) {
    std::fprintf(stderr, "lint_bench: N must be an integer 1..10000000\n");
    return 2;
  }
  int n = static_cast<int>(parsed);
  bool strict = argc > 2 && std::strcmp(argv[2], "--strict") == 0;
  auto t0 = Clock::now();
  manifest::Manifest m = build(n);
  double build_ms = ms_since(t0);
  std::vector<lint::Finding> findings;
  double lint_ms = 1e300;
  for (int run = 0; run < 5; ++run) {
    auto t1 = Clock::now();
    findings = lint::lint(m, lint::LintOptions{.strict = strict});
    lint_ms = std::min(lint_ms, ms_since(t1));
  }
  auto t2 = Clock::now();
  std::string json = lint::format_json(findings);
  double json_ms = ms_since(t2);
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf("%d tools, %d entries: build %.1f ms, lint %.1f ms, json %.1f ms, %zu findings, peak RSS %ld KB\n", n,
              n, build_ms, lint_ms, json_ms, findings.size(), ru.ru_maxrss);
  return json.empty() ? 1 : 0;
}
