#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit + integration: real sandboxes, as
# root and, when run as root, again as nobody). Extra arguments go to ctest
# (e.g. -L unit, -R Comet). The last line printed is the summary: "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true)
if [[ -n "$summary" ]]; then
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
  total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")
  echo "$((total - failed)) passed, $failed failed"
  [[ $failed -eq 0 ]] || status=1
else
  echo "0 passed, 0 failed"
  status=1
fi
exit "$status"
