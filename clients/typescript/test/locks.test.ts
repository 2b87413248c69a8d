// Conformance scenarios C01–C08 (clients/CONFORMANCE.md, "Locks") against the real broker.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HeldError, LeaseLostError, type LockLease } from "../src/index.js";
import { aborted, admin, client, eventually, key } from "./helpers.js";
import { Forwarder } from "./standins.js";

test("c01 acquire and release", async () => {
  const c = client();
  const k = key("c01");
  const lease = await c.lock(k, { ttlMs: 10_000 });
  assert.ok(Number.isInteger(lease.token) && lease.token > 0, `a positive integer token, got ${lease.token}`);
  const held = await c.locks.status(k);
  assert.equal(held.held, true);
  assert.equal(held.owner, lease.owner);
  assert.equal(held.token, lease.token);
  assert.equal(await lease.release(), true);
  const free = await c.locks.status(k);
  assert.equal(free.held, false);
  assert.equal(free.owner, null);
  c.close();
});

test("c02 try returns null at once while another owner holds the key", async () => {
  const c = client();
  const k = key("c02");
  const holder = await c.lock(k, { ttlMs: 10_000 });
  const started = performance.now();
  const tried = await c.tryLock(k, { ttlMs: 10_000 });
  const took = performance.now() - started;
  assert.equal(tried, null);
  assert.ok(took < 1000, `no waiting: took ${took} ms`);
  // The holder is untouched.
  assert.equal((await c.locks.status(k)).owner, holder.owner);
  await holder.release();
  c.close();
});

test("c03 a waiting acquire is granted after the holder releases; one that runs out throws HeldError", async () => {
  const c = client();
  const k = key("c03");
  const holder = await c.lock(k, { ttlMs: 10_000 });
  const released = new Promise<boolean>((resolve, reject) => setTimeout(() => holder.release().then(resolve, reject), 300));
  const started = performance.now();
  const waiter = await c.lock(k, { ttlMs: 10_000, waitMs: 10_000 });
  const waited = performance.now() - started;
  assert.equal(await released, true);
  assert.ok(waited >= 250, `it waited for the release: ${waited} ms`);
  assert.equal((await c.locks.status(k)).owner, waiter.owner);

  const timedStart = performance.now();
  const err = await c.lock(k, { waitMs: 300 }).then(
    () => assert.fail("granted while held"),
    (e: unknown) => e,
  );
  const timed = performance.now() - timedStart;
  assert.ok(err instanceof HeldError, `a HeldError, got ${String(err)}`);
  assert.equal(err.code, "lock_held");
  assert.equal(err.status, 409);
  assert.equal(typeof err.retryAfterMs, "number", "retry_after_ms is carried");
  assert.ok(timed >= 280, `it waited its 300 ms: ${timed} ms`);
  await waiter.release();
  c.close();
});

test("c04 a lease of 1 s held for 3.5 s is still held: renewed every third of the TTL", async () => {
  const c = client();
  const k = key("c04");
  const lease = await c.lock(k, { ttlMs: 1000 });
  // Time is what is tested here: several TTLs must pass.
  await new Promise((resolve) => setTimeout(resolve, 3500));
  const status = await c.locks.status(k);
  assert.equal(status.held, true);
  assert.equal(status.owner, lease.owner);
  assert.equal(status.token, lease.token);
  assert.equal(lease.lost.aborted, false, `lost: ${String(lease.lost.reason)}`);
  assert.ok(lease.renewals >= 6, `renewed about every 333 ms: ${lease.renewals} renewals in 3.5 s`);
  assert.equal(await lease.release(), true);
  c.close();
});

test("c05 lost fires within one TTL after a force-release; releasing the lost lease leaves the new holder alone", async () => {
  const c = client();
  const k = key("c05");
  const ttlMs = 1500;
  const lease = await c.lock(k, { ttlMs });
  const forced = performance.now();
  await admin().admin.forceRelease("default", k);
  const next = await c.lock(k, { ttlMs: 10_000, waitMs: 5000 });
  const reason = await aborted(lease.lost, ttlMs + 1000);
  const after = performance.now() - forced;
  assert.ok(after <= ttlMs, `lost within one TTL: ${after} ms`);
  assert.ok(reason instanceof LeaseLostError, `the reason is a LeaseLostError: ${String(reason)}`);
  assert.equal(reason.code, "lease_lost");
  assert.throws(() => lease.throwIfLost(), LeaseLostError);

  assert.equal(await lease.release(), false, "nothing to release");
  const status = await c.locks.status(k);
  assert.equal(status.owner, next.owner, "the new holder still holds it");
  assert.equal(status.token, next.token);
  assert.ok(next.token > lease.token);
  assert.equal(await next.release(), true);
  c.close();
});

test("c06 lost fires before the TTL has passed since the last confirmed renewal was sent", async () => {
  const e = client();
  const forwarder = await Forwarder.start(e.url);
  const c = client({ url: forwarder.url });
  const k = key("c06");
  const lease: LockLease = await c.lock(k, { ttlMs: 3000 });
  await eventually("a renewal was confirmed", () => lease.renewals >= 1);
  forwarder.silence();
  await aborted(lease.lost, 6000);
  const firedAt = performance.now();
  assert.ok(firedAt <= lease.deadline, `lost ${firedAt - lease.deadline} ms after the last confirmed send plus the TTL`);
  const reason = lease.lost.reason as LeaseLostError;
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.code, "lease_expired");
  // The broker still had it until then: it runs out by itself now.
  await eventually("the lease ran out on the broker", async () => !(await e.locks.status(k)).held);
  await forwarder.close();
  c.close();
  e.close();
});

test("c07 a lease taken in a scope is released when the scope ends, normally or by an exception", async () => {
  const c = client();
  const k = key("c07");
  const owner = await c.withLock(k, { ttlMs: 10_000 }, async (lease) => {
    assert.equal((await c.locks.status(k)).owner, lease.owner);
    return lease.owner;
  });
  assert.ok(owner);
  assert.equal((await c.locks.status(k)).held, false, "released after the callback returned");

  await assert.rejects(
    c.withLock(k, { ttlMs: 10_000 }, async (lease) => {
      assert.equal((await c.locks.status(k)).owner, lease.owner);
      throw new Error("boom");
    }),
    /boom/,
    "the callback's own error comes out",
  );
  assert.equal((await c.locks.status(k)).held, false, "released after the callback threw");

  // `await using` releases at the end of a block too.
  try {
    await using lease = await c.lock(k, { ttlMs: 10_000 });
    assert.equal((await c.locks.status(k)).owner, lease.owner);
    throw new Error("leaving the block");
  } catch (err) {
    assert.match(String(err), /leaving the block/);
  }
  assert.equal((await c.locks.status(k)).held, false, "released at the end of the `await using` block");
  c.close();
});

test("c08 fencing tokens strictly increase; validate passes the current token and fails an older one", async () => {
  const c = client();
  const k = key("c08");
  const tokens: number[] = [];
  let last: LockLease | undefined;
  for (let i = 0; i < 3; i++) {
    last = await c.lock(k, { ttlMs: 10_000 });
    tokens.push(last.token);
    if (i < 2) await last.release();
  }
  const [first, second, third] = tokens as [number, number, number];
  assert.ok(first < second && second < third, `increasing: ${tokens.join(", ")}`);
  assert.deepEqual(await c.locks.validate(k, third), { valid: true, token: third });
  assert.deepEqual(await c.locks.validate(k, second), { valid: false, token: third });
  await last?.release();
  assert.deepEqual(await c.locks.validate(k, third), { valid: false, token: null }, "not valid once released");
  c.close();
});
