/**
 * The TypeScript client of lockbroker, for Node 20 and later, with no
 * runtime dependency.
 *
 * ```ts
 * const client = Client.fromEnv();
 * await client.withLock("nightly", { ttlMs: 30_000 }, async (lease) => {
 *   await runJob({ fencingToken: lease.token, signal: lease.lost });
 * });
 * ```
 *
 * The layout, one job per module:
 * - `client.ts`: {@link Client}, the entry point: guards by their usual
 *   names (`guards.ts`, {@link Guards}, shared with sessions), the reads of
 *   each kind, events, admin.
 * - `acquire.ts`, `lease.ts`, `kinds.ts`: one lease model for every kind.
 *   `acquire` takes a lease (and gives back a grant whose answer was lost),
 *   {@link Lease} renews it every third of its TTL and fires `lost`, and a
 *   {@link Kind} is what a lock, semaphore, rwlock, multi-lock or election
 *   adds (its requests, its token, its "held" refusal).
 * - `session.ts`: {@link Session}, many leases of every kind kept by one
 *   keepalive, itself a {@link Lease} of the session that its leases
 *   follow: lost together, closed together.
 * - `resources.ts`, `elections.ts`, `events.ts`: reads — status, listing
 *   with cursors, history, validate, observe, the event stream; `sse.ts`
 *   parses Server-Sent Events and reconnects.
 * - `caller.ts`: the one place a call is timed, retried (`retry.ts`) and
 *   decoded; `transport.ts`: one HTTP exchange over `node:http(s)`.
 * - `errors.ts`: {@link LockbrokerError} and its classes.
 * - `types.ts`: the API's types by name, from `generated/openapi.ts`
 *   (generated from the broker's OpenAPI document).
 */
export { Client, type ClientOptions } from "./client.js";
export { Guards, type LeaderLease, type LockLease, type MultiLease, type PermitLease, type RwLease } from "./guards.js";
export { type AcquireOptions, DEFAULT_WAIT_MS } from "./acquire.js";
export { type CallOptions, DEFAULT_SLACK_MS } from "./caller.js";
export { Lease } from "./lease.js";
export { Session, type SessionAcquireOptions, type SessionOptions } from "./session.js";
export type { Kind } from "./kinds.js";
export { Admin } from "./admin.js";
export { Elections } from "./elections.js";
export { type ListOptions, Locks, RecordedResources, Resources } from "./resources.js";
export type { ChangeEvent, EventsOptions, ResetEvent } from "./events.js";
export { SseStream, type SseOptions } from "./sse.js";
export { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
export {
  DeadlineExceededError,
  DeadlockError,
  HeldError,
  LeaseLostError,
  LockbrokerError,
  OutcomeUnknownError,
  RateLimitedError,
  SessionLostError,
  ThrottledError,
  TlsError,
  UnavailableError,
  UnreachableError,
  type Code,
} from "./errors.js";
export type * from "./types.js";
export type { components, paths } from "./generated/openapi.js";
