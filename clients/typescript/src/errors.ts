/**
 * Every failure of a call, as one class tree rooted at {@link LockbrokerError}.
 * The broker's refusals keep its `code` (API.md, "Errors"), so callers act on
 * codes and classes, never on messages; a code this client does not know
 * still arrives, with its HTTP status. Failures of the connection get codes
 * of their own (`unreachable`, `deadline_exceeded`, `outcome_unknown`, `tls`)
 * and `status` null.
 *
 * ```text
 * LockbrokerError                    code, status, retryAfterMs
 * ├─ HeldError                       409 lock_held, semaphore_full: taken by others
 * ├─ DeadlockError                   409 deadlock: the wait would close a cycle of sessions; `cycle`
 * ├─ LeaseLostError                  409 lease_lost, or a lease that could not be renewed in time
 * │  └─ SessionLostError             404 session_not_found: the session ended, and every lease in it
 * ├─ ThrottledError                  429 (too_many_waiters, quota_exceeded, too_many_streams)
 * │  └─ RateLimitedError             429 rate_limited
 * ├─ UnavailableError                503: nothing was done; try later
 * │  └─ UnreachableError             no answer: the connection failed
 * │     ├─ DeadlineExceededError     no answer within the call's time
 * │     └─ OutcomeUnknownError       an acquire (or release) whose connection broke after it was sent
 * └─ TlsError                        the TLS handshake failed (certificates)
 * ```
 */
import type { CycleStep, ErrorCode } from "./types.js";

/** The codes of the broker, and the client's own for failures without an answer. */
export type Code =
  | ErrorCode
  | "unreachable"
  | "deadline_exceeded"
  | "outcome_unknown"
  | "tls"
  | "lease_expired"
  | "unexpected_answer"
  | "invalid_options"
  | (string & {});

export interface ErrorDetails {
  /** The HTTP status of the broker's answer; null when none came. */
  status?: number | null;
  /** When to try again, in milliseconds (the broker's `retry_after_ms` or `Retry-After`). */
  retryAfterMs?: number | null;
  /** With `deadlock`: the cycle the wait would have closed. */
  cycle?: CycleStep[] | null;
  cause?: unknown;
}

/** Any failure of a broker call. */
export class LockbrokerError extends Error {
  /** The broker's error code (`lock_held`, `lease_lost`, ...) or the client's own. */
  readonly code: Code;
  /** The HTTP status; null when the broker did not answer. */
  readonly status: number | null;
  /** With contention and throttling: when to try again, in milliseconds. */
  readonly retryAfterMs: number | null;

  constructor(code: Code, message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = details.status ?? null;
    this.retryAfterMs = details.retryAfterMs ?? null;
  }
}

/** 409 `lock_held` / `semaphore_full`: others hold it; `retryAfterMs` is the tenant's backoff hint. */
export class HeldError extends LockbrokerError {}

/**
 * 409 `deadlock`: a session's waiting acquire was refused at once because
 * its wait would close a cycle of sessions waiting for each other. Nothing
 * was granted or queued, and it is not retried: the same wait would be
 * refused again until one of the cycle's sessions lets go (give back what
 * this session holds, or close it, then try again).
 */
export class DeadlockError extends LockbrokerError {
  /**
   * The cycle, as the broker found it: each step a session, as an owner,
   * waiting for a key (`storage_key`, of `kind`) that the next step's
   * session holds; the last step's key is held by the first's. The first
   * step is the refused wait itself.
   */
  readonly cycle: CycleStep[];

  constructor(code: Code, message: string, details: ErrorDetails = {}) {
    super(code, message, details);
    this.cycle = details.cycle ?? [];
  }
}

/**
 * The lease is gone: the broker answered `lease_lost` (it expired, was
 * force-released or re-granted), or (code `lease_expired`) no renewal was
 * confirmed before it would have run out. Work done under it may have
 * overlapped another holder's.
 */
export class LeaseLostError extends LockbrokerError {}

/**
 * 404 `session_not_found`: the session ended (closed, or expired by the
 * broker's clock), or never was. A {@link LeaseLostError} because that is
 * what it means for every lease held in it: a keepalive, a close, or an
 * acquire naming it all learn the same thing.
 */
export class SessionLostError extends LeaseLostError {}

/** 429: the tenant is over a limit; `retryAfterMs` says when to try again when the broker knows. */
export class ThrottledError extends LockbrokerError {}

/** 429 `rate_limited`: over the tenant's requests per second. */
export class RateLimitedError extends ThrottledError {}

/** 503 `unavailable`: the broker could not do it now (its database, a restart); nothing was granted. */
export class UnavailableError extends LockbrokerError {}

/** No answer: the broker could not be reached, or the connection broke (`status` null). */
export class UnreachableError extends UnavailableError {}

/** No answer within the call's time (`timeoutMs`, or the wait plus the client's slack). */
export class DeadlineExceededError extends UnreachableError {}

/**
 * A request that must not be sent twice (an acquire, a release) lost its
 * connection after it was sent: it may or may not have taken effect. An
 * acquire that ends so has already given back whatever it may have been
 * granted (found by the owner's name in the key's status), as far as the
 * broker could be asked.
 */
export class OutcomeUnknownError extends UnreachableError {}

/** The TLS handshake failed: the broker's certificate is not trusted, or it refused ours. Not retried. */
export class TlsError extends LockbrokerError {}

const BY_CODE: Partial<Record<string, new (code: Code, message: string, details: ErrorDetails) => LockbrokerError>> = {
  lock_held: HeldError,
  semaphore_full: HeldError,
  deadlock: DeadlockError,
  lease_lost: LeaseLostError,
  session_not_found: SessionLostError,
  rate_limited: RateLimitedError,
  too_many_waiters: ThrottledError,
  too_many_streams: ThrottledError,
  quota_exceeded: ThrottledError,
  unavailable: UnavailableError,
};

/**
 * The error for a non-2xx answer: its JSON envelope when it is one (by code,
 * else by status), else what there is of the body. `retryAfterMs` is the
 * body's `retry_after_ms`, else the `Retry-After` header (whole seconds);
 * a `deadlock`'s `cycle` comes along as typed steps (its well-formed ones).
 */
export function errorFromAnswer(status: number, body: string, retryAfterHeader: string | undefined): LockbrokerError {
  let code: string = `http_${status}`;
  let message = body.slice(0, 200);
  let retryAfterMs: number | null = null;
  let cycle: CycleStep[] | null = null;
  try {
    const parsed: unknown = JSON.parse(body);
    const error = (parsed as { error?: { code?: unknown; message?: unknown; retry_after_ms?: unknown; cycle?: unknown } }).error;
    if (error && typeof error.code === "string") {
      code = error.code;
      message = typeof error.message === "string" ? error.message : "";
      if (typeof error.retry_after_ms === "number") retryAfterMs = error.retry_after_ms;
      if (Array.isArray(error.cycle)) cycle = error.cycle.filter(isCycleStep).map(({ session, owner, kind, storage_key }) => ({ session, owner, kind, storage_key }));
    }
  } catch {
    // Not the API's envelope (a proxy's page): the status decides below.
  }
  if (retryAfterMs === null && retryAfterHeader !== undefined && /^\s*\d+\s*$/.test(retryAfterHeader)) {
    retryAfterMs = Number(retryAfterHeader.trim()) * 1000;
  }
  const Class = BY_CODE[code] ?? (status === 503 ? UnavailableError : status === 429 ? ThrottledError : LockbrokerError);
  if (status === 503 && code === `http_${status}`) code = "unavailable";
  return new Class(code, `${code} (${status}): ${message}`, { status, retryAfterMs, cycle });
}

function isCycleStep(step: unknown): step is CycleStep {
  if (typeof step !== "object" || step === null) return false;
  const s = step as Record<string, unknown>;
  return typeof s.session === "string" && typeof s.owner === "string" && typeof s.kind === "string" && typeof s.storage_key === "string";
}
