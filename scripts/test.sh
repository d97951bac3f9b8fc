#!/usr/bin/env bash
# Runs every test: the native suite (cargo test: pure core, ledger on real SQLite, consumer, API)
# and the end-to-end suite (the built worker under miniflare with Queues, KV and D1), twice: with
# the D1 ledger, then with the ledger on four SQLite Durable Object shards (LEDGER = "do"; suites
# that start their own worker or fixture keep D1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh

echo "== formatting and lints (natively with every target; for the worker's target, where dead code shows)"
cargo fmt --check
cargo clippy --locked --all-targets -p orderly-queues -- -D warnings
cargo clippy --locked -p orderly-queues --lib --target wasm32-unknown-unknown -- -D warnings

echo "== native tests"
# The simulation's fixed seeds run optimized (the sim profile): in a debug build they take minutes.
cargo test --locked -- --skip fixed_seeds_hold_every_invariant
cargo test --locked --profile sim --test simulation fixed_seeds_hold_every_invariant

echo "== the crate as it would be published (cargo package: its files, and a build of them alone)"
cargo package --locked --allow-dirty -p orderly-queues

echo "== build"
bash scripts/build.sh

echo "== the checkers' own tests (the mutation runner, the test file runner, the mutation table)"
node scripts/node-tests.mjs "tests/tools/*.test.mjs"

echo "== end-to-end tests (miniflare)"
# scripts/node-tests.mjs fails a pattern that matches no file and a file in which no test ran. A
# test may take up to 10 minutes: install.test.mjs builds two Rust workers from the packed crate (a
# loaded 2-core machine took over 3 minutes); a test that hangs still fails.
node scripts/node-tests.mjs --timeout 600000 "tests/e2e/*.test.mjs"

echo "== end-to-end tests again, the ledger on four Durable Object shards"
ORDERLY_E2E_LEDGER=do node scripts/node-tests.mjs --timeout 600000 "tests/e2e/*.test.mjs"
