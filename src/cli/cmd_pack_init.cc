// `soyaos pack init [--runtime python3|node|native] [--name N] DIR` (SPEC.md C13, issue #13):
// writes a working pack into a new or empty DIR — entrypoint, soyapack.yaml with the standard
// paths and /tmp scratch, one example with its expected output, .soyaignore — that passes
// `pack lint --strict` and `pack test` as written. Exit 0 done, 2 usage error (a non-empty
// DIR, a bad name or runtime: nothing written), 1 the files could not be written.
// docs/authoring.md starts here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/print_error.h"
#include "common/text.h"
#include "common/unique_fd.h"

namespace soyaos::cli {
namespace {

namespace fs = std::filesystem;

struct InitArgs {
  std::string dir;
  std::string runtime = "python3";
  std::string name;
};

struct TemplateFile {
  std::string path;  // relative to the pack
  std::string content;
  mode_t mode = 0644;
};

// SPEC M1: ^[a-z][a-z0-9-]{0,62}$
bool is_pack_name(std::string_view s) {
  if (s.empty() || s.size() > 63 || s[0] < 'a' || s[0] > 'z') return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// The default name: DIR's last component, lower-cased, other characters as '-'.
std::string name_from_dir(const fs::path& dir) {
  std::string base = fs::absolute(dir).lexically_normal().filename().string();
  if (base.empty()) base = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  std::string out;
  for (char c : base) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (ok) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.size() > 63 ? out.substr(0, 63) : out;
}

// An example input whose counts the agents print; the manifest's expect names them.
constexpr const char* kExampleInput = "Hello from a SoyaPack.\nIt counts lines and words.\n";
constexpr const char* kExpected = "summary: 1 file(s), 2 line(s), 9 word(s)";

std::string manifest_text(const std::string& name, const std::string& runtime, const std::string& entry) {
  return "# " + name +
         ": a SoyaPack (docs/manifest.md, docs/authoring.md).\n"
         "#   soyaos pack lint --strict .    soyaos pack test .    soyaos pack push .\n"
         "#   soyaos pack learn .            proposes what your code needs beyond this block\n"
         "soyapack: v0\n"
         "name: " +
         name +
         "\n"
         "version: 0.1.0\n"
         "description: Counts the lines and words of its inputs\n"
         "agent:\n"
         "  runtime: " +
         runtime +
         "\n"
         "  entrypoint: " +
         entry +
         "\n"
         "capabilities:\n"
         "  egress: []                           # nothing leaves the Comet unless listed here\n"
         "  fs:\n"
         "    read: [/workdir, /workdir/inputs]  # the pack and its inputs (always readable)\n"
         "    write: [/workdir/out, /tmp]        # the run's outputs; /tmp: private scratch, discarded\n"
         "  determinism_tier: read-only          # no side effects: results are cached by input\n"
         "resources:\n"
         "  memory: 512Mi\n"
         "  pids: 64\n"
         "  timeout: 60s\n"
         "  write_quota: 64Mi\n"
         "examples:                              # `soyaos pack test` runs each one in a Comet\n"
         "  - name: basic\n"
         "    input: examples/hello.txt          # seen by the agent as /workdir/inputs/hello.txt\n"
         "    expect:\n"
         "      exit_code: 0\n"
         "      stdout_contains: \"" +
         kExpected +
         "\"\n"
         "      outputs: [summary.txt]           # must exist under /workdir/out afterwards\n";
}

constexpr const char* kPython = R"PY("""NAME: counts the lines and words of its inputs and writes a summary.

It runs in a SoyaOS Comet: it reads the pack (/workdir) and its inputs (/workdir/inputs), writes
/workdir/out (the run's outputs) and may use /tmp as scratch. Anything else (network, other
paths, starting programs) is denied until soyapack.yaml declares it; `soyaos pack learn .`
proposes the lines your code needs.
"""
import os
import sys

INPUTS = "/workdir/inputs"
OUT = "/workdir/out"


def main(argv):
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
            words += len(text.split())
    summary = f"{files} file(s), {lines} line(s), {words} word(s)"
    with open(os.path.join(OUT, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(summary + "\n")
    print("summary: " + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
)PY";

constexpr const char* kNode = R"JS(// NAME: counts the lines and words of its inputs and writes a summary.
//
// It runs in a SoyaOS Comet: it reads the pack (/workdir) and its inputs (/workdir/inputs), writes
// /workdir/out (the run's outputs) and may use /tmp as scratch. Anything else (network, other
// paths, child processes) is denied until soyapack.yaml declares it; `soyaos pack learn .`
// proposes the lines your code needs.
'use strict';
const fs = require('fs');
const path = require('path');

const INPUTS = '/workdir/inputs';
const OUT = '/workdir/out';

function main() {
  let files = 0, lines = 0, words = 0;
  const names = fs.existsSync(INPUTS) ? fs.readdirSync(INPUTS).sort() : [];
  for (const name of names) {
    const p = path.join(INPUTS, name);
    if (!fs.statSync(p).isFile()) continue;
    const text = fs.readFileSync(p, 'utf8');
    files += 1;
    lines += (text.match(/\n/g) || []).length;
    words += text.split(/\s+/).filter((w) => w.length > 0).length;
  }
  const summary = `${files} file(s), ${lines} line(s), ${words} word(s)`;
  fs.writeFileSync(path.join(OUT, 'summary.txt'), summary + '\n');
  console.log('summary: ' + summary);
  return 0;
}

process.exitCode = main();
)JS";

// A native agent is any program the Comet can execute once (C3): a binary built for this
// machine, or a script whose interpreter is in the runtime layer, as here (/bin/sh). It can
// start no other program, so the script uses shell builtins only (no wc, no cat).
constexpr const char* kNative = R"SH(#!/bin/sh
# NAME: counts the lines and words of its inputs and writes a summary.
#
# A native agent is any program the Comet can execute once: a binary built for this machine
# (static, or dynamic against the runtime layer's /usr/lib), or a script whose interpreter is in
# the runtime layer, like this one (/bin/sh). It cannot start other programs (exec and fork are
# denied, C3), so this script uses shell builtins only: no wc, no cat, no $(...).
# It reads the pack (/workdir) and its inputs (/workdir/inputs), writes /workdir/out and may use
# /tmp as scratch; `soyaos pack learn .` proposes what else your code needs.
set -eu
files=0
lines=0
words=0
for f in /workdir/inputs/*; do
  [ -f "$f" ] || continue
  files=$((files + 1))
  while IFS= read -r line; do
    lines=$((lines + 1))
    set -f
    # shellcheck disable=SC2086 # split into words on purpose
    set -- $line
    set +f
    words=$((words + $#))
  done <"$f"
done
summary="$files file(s), $lines line(s), $words word(s)"
printf '%s\n' "$summary" >/workdir/out/summary.txt
printf 'summary: %s\n' "$summary"
)SH";

constexpr const char* kIgnore =
    "# Left out of the pack (gitignore syntax; .git/ and .env* are always left out): what\n"
    "# `soyaos pack push` stores, the pack digest and the agent's /workdir all follow this file.\n"
    "soyaos-out/\n"
    "__pycache__/\n"
    "*.pyc\n"
    "*.swp\n";

std::string replace_name(std::string text, const std::string& name) {
  for (size_t at = text.find("NAME"); at != std::string::npos; at = text.find("NAME", at + name.size())) {
    text.replace(at, 4, name);
  }
  return text;
}

std::vector<TemplateFile> template_files(const std::string& name, const std::string& runtime) {
  std::string entry;
  std::string code;
  mode_t mode = 0644;
  if (runtime == "node") {
    entry = "main.js";
    code = kNode;
  } else if (runtime == "native") {
    entry = "main.sh";
    code = kNative;
    mode = 0755;  // executed directly (C3): the kernel runs its #! interpreter
  } else {
    entry = "main.py";
    code = kPython;
  }
  return {
      {"soyapack.yaml", manifest_text(name, runtime, entry)},
      {entry, replace_name(code, name), mode},
      {"examples/hello.txt", kExampleInput},
      {".soyaignore", kIgnore},
  };
}

// New files only: O_EXCL and O_NOFOLLOW, so nothing that appeared meanwhile is overwritten
// or followed.
Result<void> write_new(const fs::path& file, const std::string& content, mode_t mode) {
  UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return make_error(file.string(), errno);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(file.string(), errno);
    done += static_cast<size_t>(n);
  }
  // The umask must not take the execute bit of a native entrypoint away.
  if (::fchmod(fd.get(), mode) != 0) return make_error(file.string(), errno);
  if (::fsync(fd.get()) != 0) return make_error(file.string(), errno);
  return {};
}

// T7's rule for --out, applied to DIR: new, or an empty directory. Empty string: fine.
std::string check_dir(const fs::path& dir) {
  std::error_code ec;
  auto st = fs::symlink_status(dir, ec);
  if (ec || !fs::exists(st)) return {};
  if (fs::is_symlink(st)) return "is a symbolic link; give a new or empty directory";
  if (!fs::is_directory(st)) return "exists and is not a directory; give a new or empty directory";
  if (!fs::is_empty(dir, ec) || ec) {
    return "not empty: pack init writes a new pack and never overwrites or mixes with existing files; give a new "
           "or empty directory (to learn a manifest for existing code, write soyapack.yaml by hand and run "
           "`soyaos pack learn`)";
  }
  return {};
}

int run_init(const InitArgs& a) {
  const fs::path dir(a.dir);
  const std::string shown = escape_for_terminal(a.dir);
  std::string name = a.name;
  if (!name.empty() && !is_pack_name(name)) {
    std::fprintf(stderr,
                 "soyaos pack init: --name \"%s\": a pack name is 1 to 63 characters, a lower-case letter first, then "
                 "lower-case letters, digits and '-' (^[a-z][a-z0-9-]{0,62}$)\n",
                 escape_for_terminal(name).c_str());
    return kExitUsage;
  }
  if (name.empty()) {
    name = name_from_dir(dir);
    if (!is_pack_name(name)) {
      std::fprintf(stderr,
                   "soyaos pack init: %s: cannot make a pack name from the directory's name; give one with --name "
                   "(^[a-z][a-z0-9-]{0,62}$)\n",
                   shown.c_str());
      return kExitUsage;
    }
  }
  if (std::string why = check_dir(dir); !why.empty()) {
    std::fprintf(stderr, "soyaos pack init: %s: %s\n", shown.c_str(), why.c_str());
    return kExitUsage;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "soyaos pack init: %s: cannot create it: %s\n", shown.c_str(), ec.message().c_str());
    return 1;
  }
  const auto files = template_files(name, a.runtime);
  for (const auto& f : files) {
    const fs::path target = dir / f.path;
    if (target.has_parent_path() && target.parent_path() != dir) {
      fs::create_directories(target.parent_path(), ec);
      if (ec) {
        std::fprintf(stderr, "soyaos pack init: %s: %s\n", escape_for_terminal(target.parent_path().string()).c_str(),
                     ec.message().c_str());
        return 1;
      }
    }
    if (auto r = write_new(target, f.content, f.mode); !r) {
      print_error("pack init", r.error());
      return 1;
    }
  }
  std::printf("created %s (runtime %s) in %s:\n", name.c_str(), a.runtime.c_str(), shown.c_str());
  for (const auto& f : files) std::printf("  %s\n", f.path.c_str());
  std::printf("next:\n"
              "  soyaos pack lint --strict %s\n"
              "  soyaos pack test %s\n"
              "  soyaos pack learn %s      (after you change the code: proposes the capabilities it needs)\n"
              "  soyaos pack push %s\n",
              shown.c_str(), shown.c_str(), shown.c_str(), shown.c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

void register_pack_init(Command pack, CliContext& ctx) {
  auto args = std::make_shared<InitArgs>();
  auto cmd = pack.add_subcommand(
      "init", "Write a new pack (entrypoint, soyapack.yaml, one example, .soyaignore) into a new or empty DIR");
  cmd.add_option("DIR", args->dir, "Directory of the new pack (created if missing; must be empty)").required();
  cmd.add_option("--runtime", args->runtime, "python3 (default), node or native (a /bin/sh script)")
      .check_member({"python3", "node", "native"});
  cmd.add_option("--name", args->name, "Pack name (default: from DIR), ^[a-z][a-z0-9-]{0,62}$").option_text("N");
  cmd.callback([args, &ctx] { ctx.exit_code = run_init(*args); });
}

}  // namespace soyaos::cli
