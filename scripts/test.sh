#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (unit + integration, real sandboxes).
# The last line printed is ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@"
