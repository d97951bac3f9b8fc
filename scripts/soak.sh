#!/usr/bin/env bash
# The simulation's soak (design §8b): SOAK_SEEDS seeds (default 1000, from SOAK_FROM, default 1000)
# of every setup, release build, and a summary table. A failing seed prints its replay command.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export SOAK_SEEDS="${SOAK_SEEDS:-1000}"
cargo test --release --locked --test simulation soak -- --ignored --nocapture
