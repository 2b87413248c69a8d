/**
 * {@link Session}: many leases kept alive by one keepalive, lost together
 * and closed together.
 *
 * Nothing here renews anything by itself: the session's keepalive is a
 * {@link Lease} of the session (the `SESSION` renewable below: keepalive
 * for renew, `DELETE` for release), so it keeps the lease model's pace (a
 * keepalive every third of the TTL), its retries and its rule for giving up
 * (`lost` fires before the TTL has passed since the last confirmed
 * keepalive was sent; a `404 session_not_found` fires it at once). The
 * leases taken in it follow it through a {@link Keeper} (`lease.ts`): they
 * are never renewed on their own (the broker refuses that), and its `lost`
 * is theirs.
 *
 * Every kind is held in a session: its acquire calls are the client's own
 * ({@link Guards}: `lock`, `semaphore`, `rwLock`, `multiLock`, `campaign`,
 * their `try…` and `with…`), given the session's keeper.
 */
import type { AcquireOptions, Acquirer } from "./acquire.js";
import type { CallOptions } from "./caller.js";
import { SessionLostError } from "./errors.js";
import { Guards } from "./guards.js";
import { type Kind, type Renewable, segment } from "./kinds.js";
import { type GrantTiming, Lease } from "./lease.js";
import { now } from "./time.js";
import type { CreateSessionRequest, SessionInfo, SessionKeepalive } from "./types.js";

/** What `client.session()` takes. */
export interface SessionOptions extends CallOptions {
  /** How long the session lives without a keepalive, in ms: 1 000 to 3 600 000 (default: the broker's, 15 000). */
  ttlMs?: number | undefined;
  /** A name for people and listings (`client.sessions.list({ prefix })` matches it). */
  name?: string | undefined;
  /** After the session *expires* (not when it is closed), its keys are not granted again for this long, in ms (0 to 60 000). */
  lockDelayMs?: number | undefined;
}

/** What an acquire in a session takes: no `ttlMs`, the session's TTL is the lease's. */
export type SessionAcquireOptions = Omit<AcquireOptions, "ttlMs">;

/** The session as a renewable lease: kept alive by its keepalive, given back by closing it. */
const SESSION: Renewable<SessionInfo> = {
  noun: "session",
  renew: (s) => ({ method: "POST", path: `/v1/sessions/${segment(s.id)}/keepalive` }),
  release: (s) => ({ method: "DELETE", path: `/v1/sessions/${segment(s.id)}` }),
  // Only the new expiry comes back; the rest of the session stays as it was.
  renewed: (s, answer) => ({ ...s, expires_at: (answer as SessionKeepalive).expires_at }),
  token: () => 0,
  owner: (s) => s.id,
  ttlMs: (s) => s.ttl_ms,
};

/**
 * Opens a session (`POST /v1/sessions`) and starts its keepalive. An open
 * whose answer was lost is not retried (it would open a second session);
 * the one it may have opened, holding nothing, ends by its TTL.
 *
 * @throws every error of the call; the signal's reason when aborted (after closing what was opened).
 */
export async function openSession(from: Acquirer, options: SessionOptions): Promise<Session> {
  options.signal?.throwIfAborted();
  const body: CreateSessionRequest = {};
  if (options.ttlMs !== undefined) body.ttl_ms = Math.round(options.ttlMs);
  if (options.name !== undefined) body.name = options.name;
  if (options.lockDelayMs !== undefined) body.lock_delay_ms = Math.round(options.lockDelayMs);
  const sent = now();
  const info = await from.caller.call<SessionInfo>({
    method: "POST",
    path: "/v1/sessions",
    body,
    idempotent: false,
    signal: options.signal,
    timeoutMs: options.timeoutMs,
  });
  const session = new Session(from, info, { sent, answered: now(), queued: false });
  if (options.signal?.aborted) {
    await session.close().catch(() => undefined);
    throw options.signal.reason;
  }
  return session;
}

/**
 * An open session: `lock()`, `semaphore()`, `rwLock()`, `multiLock()` and
 * `campaign()` (and their `try…`/`with…`) hold leases in it; close it (or
 * `await using`) when done.
 */
export class Session extends Guards<SessionAcquireOptions> implements AsyncDisposable {
  /** The broker's id of the session (what its leases name as `session`). */
  readonly id: string;
  /**
   * Aborted once when the session is lost, with a `LeaseLostError`
   * (`session_not_found`: it ended at the broker; `lease_expired`: no
   * keepalive was confirmed in time). Every lease of it is lost with it.
   */
  readonly lost: AbortSignal;

  private readonly keepalive: Lease<SessionInfo>;
  private readonly closing: AbortController;

  /** @internal Made by `client.session()`. */
  constructor(from: Acquirer, info: SessionInfo, timing: GrantTiming) {
    const keepalive = new Lease(from.caller, SESSION, info, timing);
    const closing = new AbortController();
    super(from, {
      id: info.id,
      lost: keepalive.lost,
      closed: closing.signal,
      get deadline() {
        return keepalive.deadline;
      },
    });
    this.id = info.id;
    this.keepalive = keepalive;
    this.closing = closing;
    this.lost = keepalive.lost;
  }

  /** The session as last confirmed (`expires_at` moves with each keepalive). */
  get info(): SessionInfo {
    return this.keepalive.grant;
  }

  /** When the session (and every lease in it) surely ends unless kept alive, as a `performance.now()` value. */
  get deadline(): number {
    return this.keepalive.deadline;
  }

  /** How many keepalives the broker confirmed. */
  get keepalives(): number {
    return this.keepalive.renewals;
  }

  /** True until the session is closed or lost. */
  get open(): boolean {
    return this.keepalive.held;
  }

  /** Throws the `LeaseLostError` if the session was lost. */
  throwIfLost(): void {
    this.lost.throwIfAborted();
  }

  /**
   * Stops the keepalive and closes the session: the broker releases every
   * lease in it. True when the broker closed it now; false when there was
   * nothing to close (closed before, or lost: a session that ended at the
   * broker is not sent a close, and its keys' new holders keep them).
   *
   * @throws LockbrokerError when the broker could not be asked; the
   * session and its leases then end by its TTL.
   */
  async close(options: CallOptions = {}): Promise<boolean> {
    try {
      return await this.keepalive.release(options);
    } finally {
      // Whatever the answer, its leases are no longer this process's to use.
      this.closing.abort();
    }
  }

  /** `await using session = await client.session(...)` closes it at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Every acquire of every kind in this session comes here: none once the session has ended. */
  protected override async take<G, T>(kind: Kind<G, T>, target: T, options: SessionAcquireOptions, waitMs: number): Promise<Lease<G>> {
    this.throwIfEnded();
    return super.take(kind, target, options, waitMs);
  }

  /** As {@link Session.take}, without waiting. */
  protected override async tryTake<G, T>(kind: Kind<G, T>, target: T, options: SessionAcquireOptions): Promise<Lease<G> | null> {
    this.throwIfEnded();
    return super.tryTake(kind, target, options);
  }

  /** A closed or lost session takes nothing: said here rather than by a lease that would be lost at birth. */
  private throwIfEnded(): void {
    this.throwIfLost();
    if (!this.open) throw new SessionLostError("session_not_found", `session ${this.id} was closed`);
  }
}

/** Runs `body` with the session and closes it when `body` ends, also when it throws (then `body`'s error is the one thrown). */
export async function withSession<R>(session: Session, body: (session: Session) => Promise<R> | R): Promise<R> {
  let result: R;
  try {
    result = await body(session);
  } catch (err) {
    await session.close().catch(() => undefined);
    throw err;
  }
  await session.close();
  return result;
}
