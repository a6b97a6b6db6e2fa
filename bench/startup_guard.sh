#!/usr/bin/env bash
# The start-up regression guard of issue #16, run by ctest as `bench.startup_guard` (normal
# builds only: not under the sanitizers, whose cost is not start-up's). `soyaos run --no-cache`
# of a python3 pack that does nothing against bubblewrap running the same python3 with
# comparable namespaces, interleaved round by round; fails only on a gross regression: the
# median CPU time of soyaos's whole process tree (supervisor, Comet, agent) more than
# MAX (default 2.5) times bubblewrap's. CPU, not wall time: see bench/startup_phases.py.
# Exit 77 (skipped) without bwrap or without a cgroup to measure the whole tree in.
#   startup_guard.sh [SOYAOS]   RUNS=N (default 15)   MAX=X (default 2.5)
binary=${1:-}
command -v bwrap >/dev/null || { echo "startup guard skipped: bwrap not installed (scripts/setup.sh)"; exit 77; }
source "$(dirname "$0")/lib.sh" guard
SOYAOS=${binary:-$SOYAOS}
export SOYAOS_HOME="$work/home"  # a fresh Moon of its own
noop_pack "$work/noop"
python3 bench/startup_phases.py --soyaos "$SOYAOS" --pack "$work/noop" --work "$work" \
  --runs "${RUNS:-15}" --warmup 2 --guard "${MAX:-2.5}"
