// Pausing an ordering key (design §20.11) end to end, in both ordering modes: the built worker
// under miniflare with real simulated Queues and D1 (or the Durable Object shards), the JS client's
// pauseKey / resumeKey, and an in-process HTTP target. Nothing of a paused key runs while another
// key does; its jobs stay PENDING with no attempt spent; a resume runs them in order.
import { test } from "node:test";
import assert from "node:assert/strict";
import { OrderlyClient } from "../../client/index.js";
import { start, webhook, waitFor, sleep, TOKEN } from "./harness.mjs";

/** The `n` of every request the target saw for `prefix`, in arrival order. */
const seen = (w, prefix) => w.target.to(prefix).map((r) => JSON.parse(r.body).n);

for (const mode of ["strict", "lock"]) {
  test(`${mode} mode: a paused key runs nothing, nothing of it is lost, and its resume runs it in order`, async () => {
    const w = await start({ vars: { ORDERING_MODE: mode } });
    try {
      // The client's Request is Node's; miniflare's dispatchFetch takes its own: passed on by parts.
      const fetch = async (req) =>
        w.mf.dispatchFetch(req.url, { method: req.method, headers: Object.fromEntries(req.headers), body: req.body ? await req.text() : undefined });
      const client = new OrderlyClient({ token: TOKEN, baseUrl: "http://orderly.test", fetch });
      const paused = await client.pauseKey("held");
      assert.deepEqual([paused.key, paused.paused], ["held", true]);
      // Three jobs of the paused key sent straight to the queue (Fedify's envelope), one of another key.
      for (const n of [1, 2, 3]) {
        await w.queue.send({ __fedify_ordering_key__: "held", __fedify_payload__: webhook(`/ok/held/${n}`, { n }) });
      }
      await w.queue.send({ __fedify_ordering_key__: "free", __fedify_payload__: webhook("/ok/free/1", { n: 1 }) });
      await waitFor(async () => (await w.counts()).DONE === 1, "the other key's job done", 30_000);
      await waitFor(async () => (await w.counts()).PENDING === 3, "the paused key's jobs recorded", 30_000);
      await sleep(1_500);
      assert.deepEqual(seen(w, "/ok/held/"), [], "nothing of a paused key runs");
      const listed = await w.api("GET", "/keys?state=paused");
      assert.equal(listed.status, 200, listed.text);
      assert.deepEqual(listed.json.keys.map((k) => [k.key, k.waiting]), [["held", 3]]);
      const rows = await w.db.prepare("SELECT status, attempts FROM job WHERE ordering_key = ?", { route: "held" }).bind("held").all();
      assert.deepEqual(rows.results.map((r) => [r.status, r.attempts]), [["PENDING", 0], ["PENDING", 0], ["PENDING", 0]]);

      const resumed = await client.resumeKey("held");
      assert.deepEqual([resumed.paused, resumed.was_paused], [false, true]);
      await waitFor(async () => (await w.counts()).DONE === 4, "the resumed key's jobs done", 30_000);
      assert.deepEqual(seen(w, "/ok/held/"), [1, 2, 3], "in order, each once");
      assert.deepEqual((await w.api("GET", "/keys?state=paused")).json.keys, []);
    } finally {
      await w.dispose();
    }
  });
}
