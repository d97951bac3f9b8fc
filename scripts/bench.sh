#!/usr/bin/env bash
# The benchmark: orderly against a consumer following Fedify's algorithm, under miniflare, side
# by side in one run. Settings through BENCH_* variables (see bench/run.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
bash scripts/build.sh >/dev/null
node bench/run.mjs
