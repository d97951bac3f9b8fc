// The floor: a consumer that only acks. What the model of Queues and miniflare cost by themselves.
import { stats, statsRoute } from "./counting.mjs";

export default {
  fetch(request) {
    return statsRoute(request) ?? new Response("not found", { status: 404 });
  },
  async queue(batch) {
    stats.batches++;
    stats.deliveries += batch.messages.length;
    for (const msg of batch.messages) msg.ack();
  },
};
