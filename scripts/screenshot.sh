#!/usr/bin/env bash
# Regenerates docs/dashboard.png (the README's screenshot) from the dashboard's browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/build.sh
DASHBOARD_SCREENSHOT=docs/dashboard.png node --test --test-name-pattern="charts" tests/e2e/dashboard.test.mjs
