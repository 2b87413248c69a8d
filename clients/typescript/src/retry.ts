/**
 * When a call is tried again. A 503 (nothing was done) and a connection that
 * could not be made (nothing was sent) are retried for every call; a
 * connection that broke after the request went out only for calls that are
 * safe to repeat (reads, renewals), never for an acquire or a release; a 429
 * after the broker's hint. Any other answer, 4xx above all, is the broker's
 * decision and is returned at once. Every retry stays within the call's
 * deadline: a retry that could not start before it is not made, and the
 * last failure is thrown then, not later.
 */

/** How failed calls are retried. */
export interface RetryPolicy {
  /** Tries in all for 503s and connection failures, the first included; 1 never retries. */
  attempts: number;
  /** The delay before the first retry, in ms; it doubles with each one. */
  baseDelayMs: number;
  /** No backoff delay is longer (a broker's `retry_after_ms` hint is honoured whole, within the deadline). */
  maxDelayMs: number;
}

/** 4 tries, 100 ms doubling, at most 2 s apart: a broker restart or a database failover is ridden out. */
export const DEFAULT_RETRY: RetryPolicy = { attempts: 4, baseDelayMs: 100, maxDelayMs: 2000 };

/**
 * The delay before retry number `retry` (1 for the first): the broker's hint
 * when it sent one (plus up to a tenth, so clients told the same instant do
 * not all come back at once), else `baseDelayMs * 2^(retry-1)` capped at
 * `maxDelayMs`, with jitter: between half of it and all of it.
 */
export function retryDelay(policy: RetryPolicy, retry: number, hintMs: number | null, random: () => number = Math.random): number {
  if (hintMs !== null && hintMs > 0) return hintMs * (1 + random() / 10);
  const doubled = policy.baseDelayMs * 2 ** Math.min(Math.max(retry - 1, 0), 16);
  const capped = Math.min(doubled, policy.maxDelayMs);
  return capped * (0.5 + random() / 2);
}
