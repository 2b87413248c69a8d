// A lockbroker policy: case-insensitive keys.
//
// Keys are lowercased, so `Orders/42` and `orders/42` are the same lock;
// then the broker's default checks apply (not empty, at most 255 bytes, no
// control characters). Fairness (oldest waiter first) and backoff
// (exponential with full jitter, 10 ms to 1 s) are the broker's defaults,
// written out below so you can change them.
//
// The interface is wit/policy.wit: each `export const` below implements one
// of its interfaces. WIT names become camelCase (`storage-key` is
// `storageKey`, `enqueued-at-ms` is `enqueuedAtMs`); u64 values are BigInt;
// a thrown string is the `err` of a `result`; a variant is
// `{ tag: "retry-after", val: 10n }` or `{ tag: "give-up" }`.
//
// A policy imports nothing: no clock, no randomness but the `seed` it is
// handed, no I/O. Keep no state between calls (the broker may run each call
// in a fresh instance). An exception other than a thrown string traps: a
// naming call then fails closed (HTTP 500), fairness and backoff fall back
// to the broker's built-in rules.

/** The longest key accepted, in bytes (UTF-8). */
export const MAX_KEY_BYTES = 255;
/** Backoff: the first ceiling and the largest, in milliseconds. */
const BASE_DELAY_MS = 10n;
const MAX_DELAY_MS = 1000n;

const utf8 = new TextEncoder();

/** Shown in `GET /v1/admin/tenants`. */
export const meta = {
  describe() {
    return { name: "my-policy", version: "0.1.0" };
  },
};

export const naming = {
  /** The storage key for `key` of `tenant`; throws the reason to reject it (HTTP 422). */
  storageKey(tenant, key) {
    return checkKey(key.toLowerCase());
  },
};

export const fairness = {
  /** Index of the waiter (oldest first) granted the freed lock next. */
  pickNext(key, waiters) {
    return 0;
  },
};

export const backoff = {
  /** Retry after full jitter in [1, ceiling] ms; never give up (the broker enforces `wait_ms`). */
  nextDelay(contention) {
    return { tag: "retry-after", val: 1n + (contention.seed % ceilingMs(contention.attempt)) };
  },
};

/** The broker's default naming checks; returns the key or throws the reason. */
export function checkKey(key) {
  if (key.length === 0) {
    throw "key must not be empty";
  }
  const bytes = utf8.encode(key).length;
  if (bytes > MAX_KEY_BYTES) {
    throw `key is ${bytes} bytes long; at most ${MAX_KEY_BYTES} bytes are allowed`;
  }
  // Control characters: C0, DEL and C1 (what Rust's char::is_control means).
  const control = /[\u0000-\u001f\u007f-\u009f]/.exec(key);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
    const at = utf8.encode(key.slice(0, control.index)).length;
    throw `key contains a control character (U+${code}) at byte ${at}`;
  }
  return key;
}

/** min(1000, 10 * 2^min(attempt - 1, 20)) ms; attempt 0 counts as 1. */
export function ceilingMs(attempt) {
  const doublings = Math.min(Math.max(attempt, 1) - 1, 20);
  const ceiling = BASE_DELAY_MS * (1n << BigInt(doublings));
  return ceiling < MAX_DELAY_MS ? ceiling : MAX_DELAY_MS;
}
