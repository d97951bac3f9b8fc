#!/usr/bin/env bash
# Builds the workers with worker-build: the deployable orderly worker (the `worker/` crate) into
# build/ (build/worker/shim.mjs plus build/index_bg.wasm), and the Rust handler example into
# examples/rust-handler/build/. Prints the deployable worker's size (raw and gzip).
# ORDERLY_OPT=0 skips wasm-opt (faster local iterations); the default optimizes, as deploys do.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
OPT=()
if [[ "${ORDERLY_OPT:-1}" == "0" ]]; then
  OPT=(--no-opt)
fi
(cd worker && worker-build --release "${OPT[@]}" --out-dir ../build)
(cd examples/rust-handler && worker-build --release --no-opt)
(cd tests/e2e/panicking-worker && worker-build --release --no-opt)
# The compiled worker as the npm package ships it (`orderly-queues/worker`, client/worker.js): its
# JS glue and wasm, for Workers that embed orderly with handlers in JavaScript (design §13c).
mkdir -p dist/worker
cp build/index.js dist/worker/orderly.js
cp build/index_bg.wasm dist/worker/index_bg.wasm
raw=$(wc -c < build/index_bg.wasm)
gz=$(gzip -9c build/index_bg.wasm | wc -c)
echo "orderly worker: build/index_bg.wasm ${raw} bytes, ${gz} bytes gzip ($((gz / 1024)) KiB)"
