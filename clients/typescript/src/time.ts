/**
 * Time and cancellation helpers: a monotonic clock and a sleep that an
 * `AbortSignal` cuts short. Deadlines are `now()` values (milliseconds of
 * `performance.now()`), never wall-clock time, so a clock step cannot
 * lengthen or shorten a lease.
 */

/** Monotonic milliseconds. */
export function now(): number {
  return performance.now();
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
