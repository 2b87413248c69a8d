// Conformance scenarios C22–C23 (clients/CONFORMANCE.md, "Sessions") against the real broker.
import assert from "node:assert/strict";
import { test } from "node:test";

import { LeaseLostError, type Session, SessionLostError } from "../src/index.js";
import { aborted, client, env, eventually, key } from "./helpers.js";
import { Forwarder } from "./standins.js";

const TTL_MS = 3000;

/** `DELETE /v1/sessions/{id}` sent by the test itself, as another process would: the session's client is not told. */
async function closeFromOutside(id: string): Promise<void> {
  const e = env();
  const answer = await fetch(new URL(`/v1/sessions/${id}`, e.url), { method: "DELETE", headers: { authorization: `Bearer ${e.apiKey}` } });
  assert.equal(answer.status, 200, `closed from outside: ${await answer.text()}`);
}

test("c22 a session keeps its locks alive with its keepalive, releases one alone, and all at scope exit", async () => {
  const c = client();
  const [k1, k2] = [key("c22"), key("c22")];
  let id: string;
  {
    await using session = await c.session({ ttlMs: TTL_MS, name: "ts-c22" });
    id = session.id;
    const waited = await session.lock(k1, { waitMs: 5000 });
    const tried = await session.tryLock(k2);
    assert.ok(tried !== null, "the free key is granted at once");
    for (const [k, lease] of [[k1, waited], [k2, tried]] as const) {
      assert.ok(Number.isInteger(lease.token) && lease.token > 0, `a positive integer token, got ${lease.token}`);
      const status = await c.locks.status(k);
      assert.equal(status.held, true);
      assert.equal(status.session, session.id, "status names the session");
      assert.equal(status.token, lease.token);
    }

    // Time is what is tested here: more than three TTLs pass without a call of the test's.
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    for (const [k, lease] of [[k1, waited], [k2, tried]] as const) {
      const status = await c.locks.status(k);
      assert.equal(status.held, true, `${k} still held`);
      assert.equal(status.token, lease.token, `${k} keeps its token`);
      assert.equal(status.session, session.id);
      assert.equal(lease.lost.aborted, false, `lease lost: ${String(lease.lost.reason)}`);
      assert.equal(lease.renewals, 0, "no lease of the session was renewed on its own");
    }
    assert.equal(session.lost.aborted, false, `session lost: ${String(session.lost.reason)}`);
    // About one keepalive a second; the floor leaves room for a busy machine.
    assert.ok(session.keepalives >= 6, `kept alive about every third of its TTL: ${session.keepalives} keepalives in 10 s`);

    assert.equal(await waited.release(), true);
    assert.equal((await c.locks.status(k1)).held, false, "the released key is free at once");
    const other = await c.locks.status(k2);
    assert.equal(other.held, true, "the other stays held");
    assert.equal(other.token, tried.token);
  }
  // The session was closed at the end of the block: every lease of it released.
  const status = await c.locks.status(k2);
  assert.equal(status.held, false, "the remaining key is free right after the close");
  assert.equal(status.session, null);
  await assert.rejects(c.sessions.status(id), (err: unknown) => {
    assert.ok(err instanceof SessionLostError, `a SessionLostError, got ${String(err)}`);
    assert.equal(err.status, 404);
    assert.equal(err.code, "session_not_found");
    return true;
  });
  c.close();
});

test("c22 withSession closes the session when the callback ends, also when it throws", async () => {
  const c = client();
  const k = key("c22");
  const name = key("c22-session");
  let held: Session | undefined;
  await assert.rejects(
    c.withSession({ ttlMs: TTL_MS, name }, async (session) => {
      held = session;
      assert.equal(session.info.name, name);
      const page = await c.sessions.list({ prefix: name });
      assert.deepEqual(
        page.items.map((s) => s.id),
        [session.id],
        "listed by its name",
      );
      const lease = await session.lock(k, { waitMs: 0 });
      assert.equal((await c.locks.status(k)).owner, lease.owner);
      const listed = await c.sessions.status(session.id);
      assert.deepEqual(
        listed.leases.map((l) => [l.kind, l.key, l.token]),
        [["lock", k, lease.token]],
        "GET /v1/sessions/{id} lists the lease",
      );
      throw new Error("boom");
    }),
    /boom/,
    "the callback's own error comes out",
  );
  assert.equal((await c.locks.status(k)).held, false, "released with the session");
  assert.ok(held);
  assert.equal(held.open, false);
  assert.equal(held.lost.aborted, false, "a close is not a loss");
  await assert.rejects(held.lock(k), SessionLostError, "a closed session takes nothing");
  assert.equal(await held.close(), false, "closing again: nothing to close");
  c.close();
});

test("c23 a session closed from outside is lost once, within one TTL, with every lease of it; the new holder keeps the key", async () => {
  const c = client();
  const k = key("c23");
  const session = await c.session({ ttlMs: TTL_MS });
  const lease = await session.lock(k, { waitMs: 5000 });
  let fired = 0;
  session.lost.addEventListener("abort", () => fired++);

  const closed = performance.now();
  await closeFromOutside(session.id);
  const next = await c.lock(k, { ttlMs: 10_000, waitMs: 5000 });
  const reason = await aborted(session.lost, TTL_MS + 1000);
  const after = performance.now() - closed;
  assert.ok(after <= TTL_MS, `lost within one TTL: ${after} ms`);
  assert.ok(reason instanceof LeaseLostError, `the reason is a LeaseLostError: ${String(reason)}`);
  assert.equal(reason.code, "session_not_found");
  assert.throws(() => session.throwIfLost(), LeaseLostError);
  assert.equal(session.open, false);

  assert.equal(lease.lost.aborted, true, "the session's lease is lost with it");
  assert.ok(lease.lost.reason instanceof LeaseLostError);
  assert.equal(lease.held, false);
  assert.throws(() => lease.throwIfLost(), LeaseLostError);

  assert.equal(await session.close(), false, "closing the lost session: nothing to close, no error");
  assert.equal(await lease.release(), false, "releasing its lease: nothing to release, no error");
  const status = await c.locks.status(k);
  assert.equal(status.owner, next.owner, "the new holder still holds it");
  assert.equal(status.token, next.token);
  assert.equal(status.session, null);
  assert.ok(next.token > lease.token);
  assert.equal(fired, 1, "lost fired once");
  assert.equal(await next.release(), true);
  c.close();
});

test("c23 an acquire in a session that ended at the broker is refused with session_not_found, nothing granted", async () => {
  const c = client();
  const k = key("c23");
  // A long TTL: the keepalive does not notice before the acquire does.
  const session = await c.session({ ttlMs: 60_000 });
  await closeFromOutside(session.id);
  await assert.rejects(session.lock(k, { waitMs: 0 }), (err: unknown) => {
    assert.ok(err instanceof SessionLostError, `a SessionLostError, got ${String(err)}`);
    assert.equal(err.status, 404);
    assert.equal(err.code, "session_not_found");
    return true;
  });
  assert.equal((await c.locks.status(k)).held, false);
  assert.equal(await session.close(), false, "the close learns it had ended, and does not throw");
  assert.equal(session.lost.aborted, true, "and counts it as lost");
  c.close();
});

test("a session whose keepalives cannot be confirmed is lost before its TTL has passed since the last confirmed one was sent", async () => {
  const e = client();
  const forwarder = await Forwarder.start(e.url);
  const c = client({ url: forwarder.url });
  const k = key("session-silent");
  const session = await c.session({ ttlMs: TTL_MS });
  const lease = await session.lock(k, { waitMs: 0 });
  await eventually("a keepalive was confirmed", () => session.keepalives >= 1);
  forwarder.silence();
  const reason = await aborted(session.lost, 2 * TTL_MS);
  const firedAt = performance.now();
  assert.ok(firedAt <= session.deadline, `lost ${firedAt - session.deadline} ms after the last confirmed send plus the TTL`);
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.code, "lease_expired");
  assert.equal(lease.lost.aborted, true, "its lease is lost with it");
  assert.equal(lease.deadline, session.deadline, "a lease in a session ends when the session does");
  // The broker still had it until then: the session runs out by itself now, and its lock with it.
  await eventually("the session ran out on the broker", async () => !(await e.locks.status(k)).held);
  await forwarder.close();
  c.close();
  e.close();
});
