/**
 * {@link Guards}: the acquire calls of every kind by their usual names
 * (`lock`, `tryLock`, `withLock`, and the same for semaphores, rwlocks and
 * multi-locks; `campaign`, `tryCampaign`), written once for the two places
 * that take leases: the {@link Client}, whose leases renew themselves, and
 * a {@link Session}, whose leases its keepalive keeps. Each call names its
 * {@link Kind} and hands it to `acquire.ts`; the session adds only its
 * {@link Keeper} (and refuses to take anything once it has ended).
 */
import { type AcquireOptions, type Acquirer, DEFAULT_WAIT_MS, acquire, tryAcquire, withLease } from "./acquire.js";
import { ELECTION, type Kind, LOCK, MULTILOCK, RWLOCK, SEMAPHORE } from "./kinds.js";
import type { Keeper, Lease } from "./lease.js";
import type { Leadership, LockGrant, MultiLockGrant, RwGrant, RwMode, SemaphoreGrant } from "./types.js";

/** A lock's lease. */
export type LockLease = Lease<LockGrant>;
/** A semaphore permit: `grant.slot` is its slot. */
export type PermitLease = Lease<SemaphoreGrant>;
/** A read or write lease of a reader-writer lock. */
export type RwLease = Lease<RwGrant>;
/** Several locks held as one lease; `grant.locks` has each key's token. */
export type MultiLease = Lease<MultiLockGrant>;
/** A leadership: `token` is the term; releasing it resigns. */
export type LeaderLease = Lease<Leadership>;

/**
 * The acquire calls of every kind. `O` is what they take: the client's
 * {@link AcquireOptions}, or a session's (the same without `ttlMs`: the
 * session's TTL is its leases').
 *
 * Outside a session a lease renews itself every third of its TTL until
 * released or lost; in a session it is never renewed on its own (the
 * session's keepalive keeps it), its `lost` fires with the session's, and
 * closing the session releases it.
 */
export class Guards<O extends Omit<AcquireOptions, "ttlMs">> {
  /** @internal Made as a {@link Client} or a {@link Session}; with `keeper`, every lease is held in that session. */
  protected constructor(
    protected readonly from: Acquirer,
    private readonly keeper?: Keeper,
  ) {}

  /** Takes `target` of `kind`, waiting up to `waitMs`: the one way in for every call below. */
  protected take<G, T>(kind: Kind<G, T>, target: T, options: O, waitMs: number): Promise<Lease<G>> {
    return acquire(this.from, kind, target, options, waitMs, this.keeper);
  }

  /** Takes `target` of `kind` without waiting: null when others hold it. */
  protected tryTake<G, T>(kind: Kind<G, T>, target: T, options: O): Promise<Lease<G> | null> {
    return tryAcquire(this.from, kind, target, options, this.keeper);
  }

  // -- locks --

  /**
   * Takes the lock `key`, waiting up to `waitMs` (default 30 s); held until
   * released (or, in a session, until the session closes).
   *
   * @throws HeldError when it is still held by another owner after the wait;
   * SessionLostError (in a session) when the session has ended;
   * DeadlockError (in a session) when the wait would close a cycle of
   * sessions waiting for each other (refused at once, not retried).
   */
  lock(key: string, options: O = {} as O): Promise<LockLease> {
    return this.take(LOCK, key, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries the lock `key` once, without waiting: null when another owner holds it. */
  tryLock(key: string, options: O = {} as O): Promise<LockLease | null> {
    return this.tryTake(LOCK, key, options);
  }

  /** Runs `body` holding the lock `key`; released when `body` ends, also when it throws. */
  async withLock<R>(key: string, options: O, body: (lease: LockLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.lock(key, options), body);
  }

  // -- semaphores --

  /** Takes one of `permits` slots of the semaphore `key` (waiting as {@link Guards.lock} does). */
  semaphore(key: string, permits: number, options: O = {} as O): Promise<PermitLease> {
    return this.take(SEMAPHORE, { key, permits }, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries one slot of the semaphore `key` once: null when every slot is taken. */
  trySemaphore(key: string, permits: number, options: O = {} as O): Promise<PermitLease | null> {
    return this.tryTake(SEMAPHORE, { key, permits }, options);
  }

  /** Runs `body` holding one slot of the semaphore `key`; released when it ends. */
  async withSemaphore<R>(key: string, permits: number, options: O, body: (lease: PermitLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.semaphore(key, permits, options), body);
  }

  // -- reader-writer locks --

  /** Takes a `read` (shared) or `write` (exclusive) lease of the rwlock `key`. */
  rwLock(key: string, mode: RwMode, options: O = {} as O): Promise<RwLease> {
    return this.take(RWLOCK, { key, mode }, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries a lease of the rwlock `key` once: null when a writer holds it (or, for a write, anyone). */
  tryRwLock(key: string, mode: RwMode, options: O = {} as O): Promise<RwLease | null> {
    return this.tryTake(RWLOCK, { key, mode }, options);
  }

  /** Runs `body` holding a lease of the rwlock `key`; released when it ends. */
  async withRwLock<R>(key: string, mode: RwMode, options: O, body: (lease: RwLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.rwLock(key, mode, options), body);
  }

  // -- multi-locks --

  /** Takes every lock of `keys` (1 to 64) at once, all or none, held together as one lease. */
  multiLock(keys: readonly string[], options: O = {} as O): Promise<MultiLease> {
    return this.take(MULTILOCK, keys, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries the locks `keys` once: null when some key is held by another owner (none is taken then). */
  tryMultiLock(keys: readonly string[], options: O = {} as O): Promise<MultiLease | null> {
    return this.tryTake(MULTILOCK, keys, options);
  }

  /** Runs `body` holding every lock of `keys`; released when it ends. */
  async withMultiLock<R>(keys: readonly string[], options: O, body: (lease: MultiLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.multiLock(keys, options), body);
  }

  // -- elections --

  /**
   * Campaigns in the election `name` (`owner` is the candidate), waiting up
   * to `waitMs` to lead; the leadership lasts until released (which
   * resigns) or lost.
   *
   * @throws HeldError when another candidate still leads after the wait.
   */
  campaign(name: string, options: O = {} as O): Promise<LeaderLease> {
    return this.take(ELECTION, name, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Campaigns once: null when another candidate leads. */
  tryCampaign(name: string, options: O = {} as O): Promise<LeaderLease | null> {
    return this.tryTake(ELECTION, name, options);
  }
}
