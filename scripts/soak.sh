#!/usr/bin/env bash
# The simulation's soak (design §8b): SOAK_SEEDS seeds (default 1000, from SOAK_FROM, default 1000)
# of every setup (SIM_SETUPS=a,b: only those), the setups on as many threads as there are cores,
# built with the `sim` profile (optimized, incremental), and a summary table. A failing seed prints
# its replay command.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export SOAK_SEEDS="${SOAK_SEEDS:-1000}"
cargo test --profile sim --locked --test simulation soak -- --ignored --nocapture
