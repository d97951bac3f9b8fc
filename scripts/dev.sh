#!/usr/bin/env bash
# Starts orderly locally: wrangler dev with local Queues, KV and D1, the ledger migrated, the cron
# fired every minute (maintenance and schedules run as in production), and a dev admin token
# (kept in .dev.vars, which wrangler reads for secrets).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh

if ! grep -q '^ADMIN_TOKEN=' .dev.vars 2>/dev/null; then
  echo "ADMIN_TOKEN=dev-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" >> .dev.vars
fi
TOKEN=$(sed -n 's/^ADMIN_TOKEN=//p' .dev.vars | head -n1)
PORT="${PORT:-8787}"

cat <<MSG

orderly is starting on http://localhost:$PORT  (dashboard: open it and paste the token)
  admin token: $TOKEN
  send a job:
    curl -sS -X POST http://localhost:$PORT/jobs -H "authorization: Bearer $TOKEN" \\
      -H 'content-type: application/json' \\
      -d '{"payload": {"type": "webhook", "url": "https://example.com/", "body": {"hello": "world"}}, "ordering_key": "demo"}'
  counts:
    curl -sS http://localhost:$PORT/jobs/counts -H "authorization: Bearer $TOKEN"

MSG
# The ledger migrated, wrangler dev started, and the cron fired every minute as Cloudflare does
# (wrangler dev fires none by itself): bin/dev.mjs.
exec node bin/orderly-queues.mjs dev --port "$PORT"
