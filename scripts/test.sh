#!/usr/bin/env bash
# Runs every test: lints; the native suite (cargo test: pure core, ledger on real SQLite, consumer,
# API) and the simulation's fixed seeds; the checkers' own tests; and the end-to-end suite (the
# built worker under miniflare with Queues, KV and D1) twice at once: with the D1 ledger, and with
# the ledger on four SQLite Durable Object shards (LEDGER = "do"; tests whose workers choose their
# own ledger run once). The end-to-end passes mostly wait on miniflare's queues, so the native
# suite runs beside them at the lowest CPU priority (`nice`): the passes get the CPU they ask for,
# and the native suite, which times nothing, uses the rest (docs/testing.md, the numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh

echo "== formatting and lints (natively with every target; for the worker's target, where dead code shows)"
cargo fmt --check
cargo clippy --locked --all-targets -p orderly-queues -- -D warnings
cargo clippy --locked -p orderly-queues --lib --target wasm32-unknown-unknown -- -D warnings

echo "== the crate as it would be published (cargo package: its files)"
# Not built here: install.test.mjs below builds two workers from the packed crate, for the target
# users build it for (wasm32), which a verify build (native) would only repeat more weakly.
cargo package --locked --allow-dirty --no-verify -p orderly-queues

echo "== build"
bash scripts/build.sh

echo "== end-to-end tests (miniflare), on D1 and on four Durable Object shards, the two passes at once"
# scripts/node-tests.mjs fails a pattern that matches no file and a file in which no test ran. Each
# pass runs one file at a time; side by side they take the time of one (they mostly wait on
# miniflare's queues). A test whose workers choose their own ledger runs in the D1 pass only
# (`ONCE` in tests/e2e/harness.mjs), or, a long one, in the shards' pass only
# (`ONCE_IN_SHARDS_PASS`), so the passes take about as long. A test file may take up to 20 minutes
# (the starter's file takes about 1.5 alone, more on a loaded machine); a test that hangs still
# fails.
mkdir -p target/e2e
e2e() { node scripts/node-tests.mjs --timeout 1200000 --exclude install.test.mjs "tests/e2e/*.test.mjs"; }
ORDERLY_E2E_PASS=d1 e2e > target/e2e/d1.log 2>&1 &
on_d1=$!
ORDERLY_E2E_LEDGER=do e2e > target/e2e/do.log 2>&1 &
on_do=$!
failed=0

echo "== native tests, beside the end-to-end passes (niced)"
# The simulation's fixed seeds run optimized (the sim profile): in a debug build they take minutes.
native() {
  # Every batch the native suite runs on the D1 stand-in is traced, then replayed on miniflare's
  # D1 below, each answer compared (tests/d1/replay.test.mjs, design §26).
  rm -rf target/d1-trace
  ORDERLY_D1_TRACE="$PWD/target/d1-trace" cargo test --locked -- --skip fixed_seeds_hold_every_invariant &&
    echo "== the native suite's D1 batches replayed on miniflare's D1" &&
    node scripts/node-tests.mjs "tests/d1/*.test.mjs" &&
    cargo test --locked --profile sim --test simulation fixed_seeds_hold_every_invariant &&
    echo "== the checkers' own tests (the mutation runner, the test file runner, the mutation table)" &&
    node scripts/node-tests.mjs "tests/tools/*.test.mjs"
}
native_failed=0
( renice -n 19 -p $BASHPID > /dev/null; native ) || native_failed=1

echo "== end-to-end tests: waiting for both passes"
wait "$on_d1" || failed=1
wait "$on_do" || failed=1
echo "-- on D1 (target/e2e/d1.log)"
cat target/e2e/d1.log
echo "-- on four Durable Object shards (target/e2e/do.log)"
cat target/e2e/do.log
if [ "$failed" != 0 ]; then
  # The failures and their reasons again, last: the logs above run to thousands of lines.
  echo "end-to-end tests failed:"
  for pass in d1 do; do grep -h "^node-tests: " "target/e2e/$pass.log" | sed "s/^/  on $pass: /"; done
fi
if [ "$native_failed" != 0 ]; then
  echo "native tests failed: see \"== native tests\" above"
fi
[ "$failed" = 0 ] && [ "$native_failed" = 0 ] || exit 1

echo "== the packages installed from their packed files, alone (it compiles two Rust workers from the packed crate)"
# A loaded 2-core machine took over 3 minutes; alone, it slows no timed test.
node scripts/node-tests.mjs --timeout 600000 tests/e2e/install.test.mjs
