// orderly (the Rust worker, unchanged) behind counting bindings. Copied next to the build output.
import { WorkerEntrypoint } from "cloudflare:workers";
import Orderly from "./index.js";
// The ledger's shard class, for the `shards` consumer (LEDGER = "do").
export { OrderlyLedger } from "./index.js";
import { context, counted, stats, statsRoute } from "./counting.mjs";

export default class extends WorkerEntrypoint {
  fetch(request) {
    return statsRoute(request) ?? new Orderly(context(this.ctx, this.env), counted(this.env)).fetch(request);
  }
  queue(batch) {
    stats.batches++;
    stats.deliveries += batch.messages.length;
    return new Orderly(context(this.ctx, this.env), counted(this.env)).queue(batch);
  }
  scheduled(event) {
    return new Orderly(context(this.ctx, this.env), counted(this.env)).scheduled(event);
  }
}
