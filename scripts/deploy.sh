#!/usr/bin/env bash
# Deploys to Cloudflare: applies ledger migrations to the remote D1, then deploys the worker.
# Needs `wrangler login` (or CLOUDFLARE_API_TOKEN) and the ids in wrangler.toml filled in.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
wrangler d1 migrations apply DB --remote
wrangler deploy
