#!/usr/bin/env bash
# clang-tidy (bugprone-*, cert-*; see .clang-tidy) over the sources in src/, with the compile
# database of ./build (scripts/setup.sh creates it).
#   scripts/tidy.sh                  every source file in src/
#   scripts/tidy.sh --since REV      the .cc files changed since REV, and those that include a
#                                    header changed since REV
#   scripts/tidy.sh --changed        --since the commit recorded in .ci/tidy-baseline, the last
#                                    commit at which the whole of src/ was checked clean; every
#                                    file when that commit is not in this clone's history
# A whole run costs ~16 CPU-minutes on these machines (the gtest-free sources still parse CLI11
# and nlohmann/json); CI runs --changed. Whoever runs the whole tree clean records its commit:
#   scripts/tidy.sh && git rev-parse HEAD > .ci/tidy-baseline
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/compile_commands.json ]] || ./scripts/setup.sh >/dev/null

since=""
case "${1:-}" in
  --since) since=${2:?"--since needs a revision"} ;;
  --changed)
    base=$(cat .ci/tidy-baseline 2>/dev/null || true)
    if [[ -n "$base" ]] && git cat-file -e "$base^{commit}" 2>/dev/null; then
      since=$base
    else
      echo "clang-tidy: baseline ${base:-<none>} not in this clone's history: checking every file"
    fi ;;
  "") ;;
  *) echo "usage: scripts/tidy.sh [--since REV | --changed]" >&2; exit 2 ;;
esac

files=()
if [[ -z "$since" ]]; then
  mapfile -t files < <(find src -name '*.cc' | sort)
else
  declare -A pick=()
  while IFS= read -r f; do
    [[ -f "$f" ]] || continue   # deleted since
    case "$f" in
      *.cc) pick[$f]=1 ;;
      *.h)
        # A header is checked through the sources that include it ("dir/name.h", as src/
        # is the include root).
        while IFS= read -r user; do pick[$user]=1; done \
          < <(grep -rlF --include='*.cc' "#include \"${f#src/}\"" src || true) ;;
    esac
  done < <(git diff --name-only "$since" HEAD -- src; git diff --name-only HEAD -- src)
  files=("${!pick[@]}")
  echo "clang-tidy: ${#files[@]} source files changed since ${since:0:12} (or including a changed header)"
fi
if ((${#files[@]})); then
  printf '%s\0' "${files[@]}" | xargs -0 -n 4 -P 2 clang-tidy -p build --quiet 2>/dev/null
fi
echo "clang-tidy: no findings"
