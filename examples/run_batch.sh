#!/usr/bin/env bash
# A batch through the shipped policies; results and the audit log land in ./out/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
.venv/bin/innerguard run --policies policies/ --model smollm2-135m-instruct \
  --input examples/requests.jsonl --output out/results.jsonl --audit-log out/audit.jsonl
cat out/results.jsonl
