#!/usr/bin/env bash
# Builds the worker with worker-build: build/worker/shim.mjs plus build/index_bg.wasm.
# ORDERLY_OPT=0 skips wasm-opt (faster local iterations); the default optimizes, as deploys do.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if [[ "${ORDERLY_OPT:-1}" == "0" ]]; then
  worker-build --release --no-opt
else
  worker-build --release
fi
