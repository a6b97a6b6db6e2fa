#!/usr/bin/env bash
# Sets up and builds soyaos, checks the host's sandbox layers, then runs the bundled
# example pack (examples/hello-report) in a Comet and shows what it produced.
# Idempotent: each run starts from a fresh output directory.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
SOYAOS=./build/soyaos

echo "\$ soyaos pack validate examples/hello-report"
$SOYAOS pack validate examples/hello-report
echo "\$ soyaos pack lint examples/hello-report --strict"
$SOYAOS pack lint examples/hello-report --strict
echo "\$ soyaos doctor"
$SOYAOS doctor
rm -rf soyaos-out/demo soyaos-out/demo-events.jsonl && mkdir -p soyaos-out
# --no-cache: every invocation runs the pack in a Comet (a read-only pack's result would
# otherwise be replayed from the cache on the second run; that is shown below).
echo "\$ soyaos run --no-cache examples/hello-report --input examples/hello-report/examples/basic.json --out soyaos-out/demo --events soyaos-out/demo-events.jsonl"
$SOYAOS run --no-cache examples/hello-report --input examples/hello-report/examples/basic.json \
  --out soyaos-out/demo --events soyaos-out/demo-events.jsonl
echo "\$ cat soyaos-out/demo/report.md"
cat soyaos-out/demo/report.md
echo "\$ cut -c1-160 soyaos-out/demo-events.jsonl   # Scope events (CloudEvents JSON Lines)"
cut -c1-160 soyaos-out/demo-events.jsonl
rm -rf soyaos-out/demo-again
echo "\$ soyaos run examples/hello-report --input examples/hello-report/examples/basic.json --out soyaos-out/demo-again --events -   # the same run again"
$SOYAOS run examples/hello-report --input examples/hello-report/examples/basic.json \
  --out soyaos-out/demo-again --events - | grep -o '"type":"[a-z_]*"' || true
echo "(without --no-cache a read-only run is stored in the result cache; once stored, the same run is replayed from it: cache_hit — docs/tiers-and-cache.md)"
