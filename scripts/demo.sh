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
echo "\$ soyaos run examples/hello-report --input examples/hello-report/examples/basic.json --out soyaos-out/demo --events soyaos-out/demo-events.jsonl"
$SOYAOS run examples/hello-report --input examples/hello-report/examples/basic.json \
  --out soyaos-out/demo --events soyaos-out/demo-events.jsonl
echo "\$ cat soyaos-out/demo/report.md"
cat soyaos-out/demo/report.md
echo "\$ cut -c1-160 soyaos-out/demo-events.jsonl   # Scope events (CloudEvents JSON Lines)"
cut -c1-160 soyaos-out/demo-events.jsonl
