/**
 * {@link Lease}: a held lease of any kind that renews itself until it is
 * released, and says when it is lost.
 *
 * The broker judges expiry by the database clock, which this process cannot
 * read. What it knows is when it *sent* the request that the broker answered
 * with a grant or a renewal: the lease was granted no earlier than that, so
 * it lives at least until then plus the TTL. That is the lease's local
 * {@link Lease.deadline}. A timer renews at a third of the TTL after each
 * confirmed send (the timer is `unref`'d: a held lease alone does not keep
 * the process alive). A renewal that fails for a passing reason (503, 429,
 * no connection) is tried again, a quarter of that period later, until
 * shortly before the deadline; the lease is lost when the broker refuses a
 * renewal (`lease_lost`, or any other 4xx) or when no renewal was confirmed
 * by then. `lost` fires a twentieth of the TTL (at most 1 s) before the
 * deadline, so the work it guards stops before anyone else can hold the
 * lease, never after.
 *
 * A lease held in a session (`session.ts`) does not renew itself: the
 * broker refuses that, since the session's keepalive keeps it. It follows
 * a {@link Keeper} instead: its deadline is the keeper's, it is lost when
 * the keeper is (with the keeper's reason), and it ends without a request
 * when the keeper closes (the broker released it with the session). The
 * session's keepalive is itself a `Lease` of the session, so one timer and
 * one rule of when to give up serve both.
 */
import type { Caller, CallOptions } from "./caller.js";
import { LeaseLostError, LockbrokerError } from "./errors.js";
import type { Renewable } from "./kinds.js";
import { now } from "./time.js";

/** Renewals are never closer together than this, whatever the TTL. */
const MIN_RENEW_EVERY_MS = 20;

/** When the grant was asked for and answered (`now()` values), and whether it waited in the queue. */
export interface GrantTiming {
  sent: number;
  answered: number;
  queued: boolean;
}

type State = "held" | "released" | "lost";

/**
 * What keeps a lease alive in place of its own renewals: the session it is
 * held in. Read by the lease, never written.
 */
export interface Keeper {
  /** The session's id, named as `session` in the acquire. */
  readonly id: string;
  /** Aborted when the session is lost; its reason becomes the lease's. */
  readonly lost: AbortSignal;
  /** Aborted when the session was closed by its holder: the broker released every lease in it. */
  readonly closed: AbortSignal;
  /** The session's local deadline (a `now()` value), which is its leases' too. */
  readonly deadline: number;
}

/** A held lease: renewed in the background until {@link Lease.release}. */
export class Lease<G> implements AsyncDisposable {
  /** The fencing token: pass it to whatever the lease protects, which should refuse older ones. */
  readonly token: number;
  /** Who holds it (an election's candidate). */
  readonly owner: string;
  /**
   * Aborted when the lease is lost (in a session: when the session is);
   * its `reason` is a {@link LeaseLostError}. Stop the work it guards then.
   */
  readonly lost: AbortSignal;

  private current: G;
  private state: State = "held";
  private until: number;
  private renewalCount = 0;
  private lastError: unknown = undefined;
  private timer: NodeJS.Timeout | undefined;
  private inflight: AbortController | undefined;
  private readonly losing = new AbortController();
  private readonly every: number;
  private unfollow: (() => void) | undefined;

  /**
   * @internal Started by the client's acquire calls; with `keeper`, held in
   * that session and never renewed on its own.
   */
  constructor(
    private readonly caller: Caller,
    private readonly kind: Renewable<G>,
    grant: G,
    timing: GrantTiming,
    private readonly keeper?: Keeper,
  ) {
    this.current = grant;
    this.token = kind.token(grant);
    this.owner = kind.owner(grant);
    this.lost = this.losing.signal;
    const ttl = kind.ttlMs(grant);
    this.every = Math.max(ttl / 3, MIN_RENEW_EVERY_MS);
    // A grant that waited in the queue was made at some unknown time
    // between sending and the answer: assume the answer took at most a
    // tenth of the TTL to arrive, and renew at once to replace that
    // assumption with a measured bound.
    const began = timing.queued ? Math.max(timing.sent, timing.answered - ttl / 10) : timing.sent;
    this.until = began + ttl;
    if (keeper) this.follow(keeper);
    else this.schedule(began > timing.sent ? 0 : began + this.every - now());
  }

  /** The latest grant (its `expires_at` moves with each renewal). */
  get grant(): G {
    return this.current;
  }

  /**
   * When the lease surely ends unless renewed, as a `performance.now()`
   * value: when the last confirmed request was sent, plus the TTL. In a
   * session, the session's (its last confirmed keepalive's).
   */
  get deadline(): number {
    return this.keeper ? this.keeper.deadline : this.until;
  }

  /** How many renewals the broker confirmed (always 0 in a session: its keepalives keep the lease). */
  get renewals(): number {
    return this.renewalCount;
  }

  /** True until the lease is released or lost. */
  get held(): boolean {
    return this.state === "held";
  }

  /** Throws the {@link LeaseLostError} if the lease was lost: a check between steps of long work. */
  throwIfLost(): void {
    this.lost.throwIfAborted();
  }

  /**
   * Stops renewing and gives the lease back (an election: resigns). True
   * when the broker released it now; false when there was nothing to
   * release: released before, or lost (the broker answering `lease_lost`
   * counts as lost, and fires `lost`). A lost lease is not sent a release,
   * so whoever holds the key now keeps it.
   *
   * @throws LockbrokerError when the broker could not be asked; the lease
   * then ends by its TTL.
   */
  async release(options: CallOptions = {}): Promise<boolean> {
    if (this.state !== "held") return false;
    this.state = "released";
    this.stop();
    try {
      await this.caller.call({ ...this.kind.release(this.current), idempotent: false, ...options });
      return true;
    } catch (err) {
      if (err instanceof LeaseLostError) {
        this.losing.abort(err);
        return false;
      }
      throw err;
    }
  }

  /** `await using lease = await client.lock(...)` releases at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  private schedule(delay: number): void {
    this.timer = setTimeout(() => void this.renew(), Math.max(0, delay));
    this.timer.unref();
  }

  private stop(): void {
    clearTimeout(this.timer);
    this.inflight?.abort();
    this.unfollow?.();
  }

  /**
   * Ties the lease to its session: lost with it, ended without a request
   * when it is closed. The listeners go when the lease ends, so a
   * long-lived session does not collect one per lease it ever held.
   */
  private follow(keeper: Keeper): void {
    if (keeper.lost.aborted) {
      this.lose(keeper.lost.reason as LeaseLostError);
      return;
    }
    if (keeper.closed.aborted) {
      this.state = "released";
      return;
    }
    const onLost = (): void => {
      if (this.state === "held") this.lose(keeper.lost.reason as LeaseLostError);
    };
    const onClosed = (): void => {
      if (this.state !== "held") return;
      this.state = "released";
      this.stop();
    };
    keeper.lost.addEventListener("abort", onLost, { once: true });
    keeper.closed.addEventListener("abort", onClosed, { once: true });
    this.unfollow = () => {
      keeper.lost.removeEventListener("abort", onLost);
      keeper.closed.removeEventListener("abort", onClosed);
    };
  }

  /** How long before the deadline `lost` fires. */
  private margin(): number {
    return Math.min(Math.max(this.kind.ttlMs(this.current) / 20, 5), 1000);
  }

  private async renew(): Promise<void> {
    if (this.state !== "held") return;
    const sent = now();
    const lostAt = this.until - this.margin();
    if (sent >= lostAt) {
      this.lose(
        new LeaseLostError("lease_expired", `no renewal of the ${this.kind.noun} was confirmed before it would run out (last error: ${describe(this.lastError)})`, {
          cause: this.lastError,
        }),
      );
      return;
    }
    this.inflight = new AbortController();
    try {
      const renewed = await this.caller.call<unknown>({
        ...this.kind.renew(this.current),
        idempotent: true,
        attempts: 1,
        timeoutMs: lostAt - sent,
        signal: this.inflight.signal,
      });
      if (this.state !== "held") return;
      this.current = this.kind.renewed ? this.kind.renewed(this.current, renewed) : (renewed as G);
      this.until = sent + this.kind.ttlMs(this.current);
      this.renewalCount++;
      this.schedule(sent + this.every - now());
    } catch (err) {
      if (this.state !== "held") return;
      if (err instanceof LockbrokerError && err.status !== null && err.status < 500 && err.status !== 429) {
        this.lose(new LeaseLostError(err.code, `the broker refused the renewal of the ${this.kind.noun}: ${err.message}`, { status: err.status, cause: err }));
        return;
      }
      this.lastError = err;
      const retryIn = Math.max(this.every / 4, MIN_RENEW_EVERY_MS, (err as LockbrokerError).retryAfterMs ?? 0);
      this.schedule(Math.min(now() + retryIn, lostAt) - now());
    } finally {
      this.inflight = undefined;
    }
  }

  private lose(reason: LeaseLostError): void {
    this.state = "lost";
    this.stop();
    this.losing.abort(reason);
  }
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : err === undefined ? "none" : String(err);
}
