/**
 * Taking a lease of any kind and handing back its {@link Lease}, with the
 * cases where the answer never arrived: an acquire is never sent twice
 * blindly (the same owner would re-enter what it got the first time), and
 * when its outcome is unknown (the connection broke after it was sent, its
 * deadline passed, or the caller aborted it) whatever it may have been
 * granted is found by its owner's name in the key's status and given back
 * before the error is thrown. The broker also hands on leases granted to
 * clients that hung up; this covers the grant that was already on its way.
 */
import type { Caller, CallOptions } from "./caller.js";
import { DeadlineExceededError, LockbrokerError, OutcomeUnknownError } from "./errors.js";
import type { Kind } from "./kinds.js";
import { type Keeper, Lease } from "./lease.js";
import { uniqueOwner } from "./owner.js";
import { now } from "./time.js";
import type { LeaseTerms } from "./types.js";

/** How long `lock()`, `semaphore()`, ... wait for the lease unless told (`waitMs`). */
export const DEFAULT_WAIT_MS = 30_000;

/** What every acquire takes. */
export interface AcquireOptions extends CallOptions {
  /** Lease length in ms (default: the broker's, 30 000); renewed every third of it. */
  ttlMs?: number | undefined;
  /** How long to wait in the queue, in ms (default {@link DEFAULT_WAIT_MS}; at most 300 000). Tries ignore it. */
  waitMs?: number | undefined;
  /** The holder's name (default: unique to this acquire, `host:pid:n`). The same owner acquiring again re-enters. */
  owner?: string | undefined;
  /** Handed to the tenant's fairness policy (higher: more urgent, for policies that use it). */
  priority?: number | undefined;
}

/** The acquire context: the client's caller and the identity owners are made from. */
export interface Acquirer {
  caller: Caller;
  identity: string;
}

/**
 * Acquires `target` of `kind`, waiting up to `waitMs`, and starts its
 * renewal; or, with `keeper`, holds it in that session (`session` in place
 * of `ttl_ms`), where the session's keepalive keeps it. The owner is still
 * unique per acquire (not the broker's default, the session id), so that
 * two acquires of one key in one session do not re-enter by accident and
 * a lost answer is found by its owner as anywhere else.
 *
 * @throws HeldError when it stayed held past the wait; DeadlockError (in
 * a session) when the wait would close a cycle, at once; and every error of
 * the call; the signal's reason when aborted (after giving back a grant).
 */
export async function acquire<G, T>(
  from: Acquirer,
  kind: Kind<G, T>,
  target: T,
  options: AcquireOptions,
  waitMs: number,
  keeper?: Keeper,
): Promise<Lease<G>> {
  const { caller } = from;
  options.signal?.throwIfAborted();
  const owner = options.owner ?? uniqueOwner(from.identity);
  const terms: LeaseTerms = { wait_ms: Math.max(0, Math.round(waitMs)) };
  if (keeper) terms.session = keeper.id;
  if (options.ttlMs !== undefined) terms.ttl_ms = Math.round(options.ttlMs);
  if (options.priority !== undefined) terms.priority = options.priority;
  const request = kind.acquire(target, owner, terms);
  const sent = now();
  const waitEnds = sent + waitMs;
  let grant: G;
  try {
    grant = await caller.call<G>({
      ...request,
      // A retry (after a 503) waits only for what is left of the wait.
      body: (tries: number) =>
        tries === 1 ? request.body : { ...(request.body as object), wait_ms: Math.max(0, Math.round(waitEnds - now())) },
      idempotent: false,
      waitMs,
      signal: options.signal,
      timeoutMs: options.timeoutMs,
    });
  } catch (err) {
    if (mayHaveBeenGranted(err, options.signal)) await giveBack(caller, kind, target, owner);
    throw err;
  }
  const lease = new Lease<G>(caller, kind, grant, { sent, answered: now(), queued: waitMs > 0 }, keeper);
  if (options.signal?.aborted) {
    // Aborted while the grant was on its way: it is not the caller's any more.
    await lease.release().catch(() => undefined);
    throw options.signal.reason;
  }
  return lease;
}

/**
 * Acquires without waiting: null when others hold it.
 *
 * @throws every error of {@link acquire} but the "held" ones.
 */
export async function tryAcquire<G, T>(
  from: Acquirer,
  kind: Kind<G, T>,
  target: T,
  options: AcquireOptions,
  keeper?: Keeper,
): Promise<Lease<G> | null> {
  try {
    return await acquire(from, kind, target, options, 0, keeper);
  } catch (err) {
    if (err instanceof LockbrokerError && kind.busy.includes(err.code)) return null;
    throw err;
  }
}

/**
 * Runs `body` with the lease and releases it when `body` ends, also when it
 * throws (then `body`'s error is the one thrown).
 */
export async function withLease<G, R>(lease: Lease<G>, body: (lease: Lease<G>) => Promise<R> | R): Promise<R> {
  let result: R;
  try {
    result = await body(lease);
  } catch (err) {
    await lease.release().catch(() => undefined);
    throw err;
  }
  await lease.release();
  return result;
}

/** Whether a failed acquire may still have been granted: no answer came, or one that could not be read. */
function mayHaveBeenGranted(err: unknown, signal: AbortSignal | undefined): boolean {
  if (signal?.aborted === true && err === signal.reason) return true;
  return err instanceof OutcomeUnknownError || err instanceof DeadlineExceededError || (err instanceof LockbrokerError && err.code === "unexpected_answer");
}

/**
 * Releases what `owner` holds of `target`, if anything; best effort, on a
 * fresh deadline (the caller's may be spent): a lease it cannot release
 * ends by its TTL.
 */
async function giveBack<G, T>(caller: Caller, kind: Kind<G, T>, target: T, owner: string): Promise<void> {
  const options: CallOptions = { timeoutMs: caller.slackMs };
  try {
    const release = await kind.heldBy(caller, target, owner, options);
    if (release) await caller.call({ ...release, idempotent: false, ...options });
  } catch {
    // Nothing more to do: the lease, if there is one, runs out by its TTL.
  }
}
