// Fedify's key-value store on Workers KV. Keys are their parts, each URL-encoded, joined by "/", so
// a prefix of parts is a prefix of text and `list` finds what Fedify keeps under it (the key equal
// to the prefix included, as Fedify's own stores do). Workers KV is eventually consistent, takes
// one write a second per key and keys of at most 512 bytes, and keeps a value at least 60 s when
// it expires at all: keep what many writers change as one key per item.
import type { KvKey, KvStore, KvStoreListEntry, KvStoreSetOptions } from "@fedify/fedify";

/** The Workers KV binding, as much of it as the store uses. */
export interface KvNamespace {
  get(key: string, type: "json"): Promise<unknown>;
  put(key: string, value: string, options?: { expirationTtl?: number }): Promise<void>;
  delete(key: string): Promise<void>;
  list(options: { prefix?: string; cursor?: string }): Promise<{ keys: { name: string }[]; list_complete: boolean; cursor?: string }>;
}

const text = (key: KvKey) => key.map(encodeURIComponent).join("/");
const parts = (name: string) => name.split("/").map(decodeURIComponent) as unknown as KvKey;

export class WorkersKvStore implements KvStore {
  constructor(private readonly kv: KvNamespace) {}

  async get<T = unknown>(key: KvKey): Promise<T | undefined> {
    return ((await this.kv.get(text(key), "json")) ?? undefined) as T | undefined;
  }

  async set(key: KvKey, value: unknown, options?: KvStoreSetOptions): Promise<void> {
    // A Temporal.Duration; KV takes whole seconds, at least 60.
    const duration = options?.ttl as { total(unit: string): number } | undefined;
    const ttl = duration ? Math.max(60, Math.ceil(duration.total("seconds"))) : undefined;
    await this.kv.put(text(key), JSON.stringify(value), ttl ? { expirationTtl: ttl } : {});
  }

  async delete(key: KvKey): Promise<void> {
    await this.kv.delete(text(key));
  }

  async *list(prefix?: KvKey): AsyncIterable<KvStoreListEntry> {
    const at = prefix ? text(prefix) : undefined;
    let cursor: string | undefined;
    do {
      const page = await this.kv.list({ prefix: at, cursor });
      for (const { name } of page.keys) {
        // "a/b" is under ["a"]; "ab" is not.
        if (at !== undefined && name !== at && !name.startsWith(`${at}/`)) continue;
        const value = await this.kv.get(name, "json");
        if (value !== null) yield { key: parts(name), value };
      }
      cursor = page.list_complete ? undefined : page.cursor;
    } while (cursor);
  }
}
