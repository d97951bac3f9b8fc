// A consumer that follows Fedify's documented WorkersMessageQueue.processMessage algorithm, for
// comparison: per message, KV get of the key's lock; held -> plain retry(); free -> put, process,
// ack, and delete the lock unconditionally. Same handler as orderly's `webhook` job.
import { counted, stats, statsRoute } from "./counting.mjs";

const PREFIX = "__fedify_ordering_";
const LOCK_TTL = 60;

async function processMessage(kv, message) {
  if (typeof message !== "object" || message === null || !("__fedify_ordering_key__" in message)) {
    return { shouldProcess: true, message };
  }
  const key = message.__fedify_ordering_key__;
  const payload = message.__fedify_payload__;
  if (key == null) return { shouldProcess: true, message: payload };
  const lockKey = `${PREFIX}${key}`;
  if ((await kv.get(lockKey)) != null) return { shouldProcess: false, message: payload };
  await kv.put(lockKey, "1", { expirationTtl: LOCK_TTL });
  return { shouldProcess: true, message: payload, release: () => kv.delete(lockKey) };
}

async function webhook(job) {
  const res = await fetch(job.url, {
    method: job.method ?? "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(job.body ?? null),
  });
  await res.body?.cancel();
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
}

export default {
  fetch(request) {
    return statsRoute(request) ?? new Response("not found", { status: 404 });
  },
  async queue(batch, env) {
    stats.batches++;
    stats.deliveries += batch.messages.length;
    const e = counted(env);
    for (const msg of batch.messages) {
      const result = await processMessage(e.ORDERING_KV, msg.body);
      if (!result.shouldProcess) {
        msg.retry();
        continue;
      }
      try {
        await webhook(result.message);
        msg.ack();
      } catch {
        msg.retry();
      } finally {
        await result.release?.();
      }
    }
  },
};
