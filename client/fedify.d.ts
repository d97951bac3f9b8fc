// Types of client/fedify.js, checked against Fedify's own `MessageQueue` (tests/e2e/fedify.test.mjs).
import type { MessageQueue, MessageQueueDepth, MessageQueueEnqueueOptions, Federation } from "@fedify/fedify";
import type { ClientOptions, OrderlyClient } from "./index.js";

/** Fedify's enqueue options, with the 2.4 `deduplicationKey` accepted too. */
export interface OrderlyEnqueueOptions extends MessageQueueEnqueueOptions {
  readonly deduplicationKey?: string;
}

/** A Fedify `MessageQueue` whose tasks orderly runs in strict per-key order. */
export class OrderlyMessageQueue implements MessageQueue {
  readonly nativeRetrial: true;
  constructor(options: ({ client: OrderlyClient } | ClientOptions) & { limitKeyOf?: ((message: any) => string | undefined) | null });
  enqueue(message: any, options?: OrderlyEnqueueOptions): Promise<void>;
  enqueueMany(messages: readonly any[], options?: OrderlyEnqueueOptions): Promise<void>;
  /** Always throws: orderly calls the Worker's `orderlyHandler` entrypoint. */
  listen(handler: (message: any) => Promise<void> | void, options?: { signal?: AbortSignal }): Promise<void>;
  getDepth(): Promise<MessageQueueDepth>;
  /** Runs one task for orderly; the seconds to snooze it for and the message its next run gets, or null. */
  runTask<T>(federation: Federation<T>, contextData: T, job: { id: string; payload: { message: unknown } }): Promise<{ seconds: number; message: unknown } | null>;
}

/** A message's limit key by default: an outbox delivery's inbox's origin. */
export function inboxOrigin(message: unknown): string | undefined;

/** Most bytes of jobs in one request the adapter makes. */
export const MAX_REQUEST_BYTES: number;
/** Most jobs in one request the adapter makes. */
export const MAX_REQUEST_JOBS: number;
/** The job id of a message a task enqueues: the task's job id and a digest of the message. */
export function childId(taskJobId: string, message: unknown): Promise<string>;
/** Jobs split into requests within orderly's body and job-count limits, in order. */
export function chunks<J>(jobs: readonly J[], limits?: { maxBytes?: number; maxJobs?: number }): J[][];

/** The `WorkerEntrypoint` class to export for orderly's service handler (`SERVICE_HANDLERS = "fedify=..."`). */
export function orderlyHandler<T, E = unknown>(
  setup: (env: E) => Promise<{ federation: Federation<T>; queue: OrderlyMessageQueue; contextData: T }> | { federation: Federation<T>; queue: OrderlyMessageQueue; contextData: T },
): new (...args: any[]) => { fetch(request: Request): Promise<Response> };

/** The "fedify" job type's handler in a Worker that embeds orderly (`orderly({ handlers: { fedify: fedifyHandler(setup) } })`). */
export function fedifyHandler<T, Env = any>(
  setup: (env: Env) => { federation: Federation<T>; queue: OrderlyMessageQueue; contextData?: T } | Promise<{ federation: Federation<T>; queue: OrderlyMessageQueue; contextData?: T }>,
): (job: { id: string; type: string; payload: any }, ctx: { env: Env }) => Promise<unknown>;
