#!/usr/bin/env bash
# `npm run mutants [id ...]`: the mutation table (tests/mutants.json), each mutant applied alone to
# a scratch copy; see scripts/mutants.mjs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
source scripts/env.sh
node scripts/mutants.mjs "$@"
