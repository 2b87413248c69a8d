// The policy's logic under node, no WebAssembly needed: `npm test`.
import { test } from "node:test";
import assert from "node:assert/strict";

import { backoff, fairness, meta, naming } from "./policy.js";

test("keys are case-insensitive", () => {
  assert.equal(naming.storageKey("team-a", "Orders/42"), "orders/42");
  assert.equal(naming.storageKey("team-a", "ORDERS/42"), "orders/42");
});

test("the default checks still apply", () => {
  assert.throws(() => naming.storageKey("team-a", ""), (e) => e === "key must not be empty");
  assert.throws(
    () => naming.storageKey("team-a", "ab\ncd"),
    (e) => e === "key contains a control character (U+000A) at byte 2",
  );
  assert.equal(naming.storageKey("t", "x".repeat(255)), "x".repeat(255));
  assert.throws(() => naming.storageKey("t", "é".repeat(128)), /256 bytes long/);
});

test("fairness is FIFO, backoff full jitter up to 1 s", () => {
  const waiter = { id: 1n, owner: "w", priority: 5, enqueuedAtMs: 1000n, attempts: 0 };
  assert.equal(fairness.pickNext("k", [waiter, waiter]), 0);
  const delay = (attempt, seed) =>
    backoff.nextDelay({ attempt, waitedMs: 0n, budgetMs: 0n, waiters: 0, leaseRemainingMs: 0n, seed });
  assert.deepEqual(delay(1, 0n), { tag: "retry-after", val: 1n });
  assert.deepEqual(delay(2, 19n), { tag: "retry-after", val: 20n });
  assert.deepEqual(delay(40, 999n), { tag: "retry-after", val: 1000n });
  assert.deepEqual(delay(0, 9n), { tag: "retry-after", val: 10n });
});

test("describes itself", () => {
  assert.equal(meta.describe().name, "my-policy");
});
