// Conformance scenarios C22–C25 (clients/CONFORMANCE.md, "Sessions") against the real broker.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  type Client,
  type components,
  DeadlockError,
  type Lease,
  LeaseLostError,
  type Session,
  type SessionLease,
  SessionLostError,
} from "../src/index.js";
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

type QueuedWaiter = components["schemas"]["QueuedWaiter"];

/** `GET /v1/locks/{key}/waiters`, asked by the test itself (the client has no call for it). */
async function waitersOf(k: string): Promise<QueuedWaiter[]> {
  const e = env();
  const answer = await fetch(new URL(`/v1/locks/${encodeURIComponent(k)}/waiters`, e.url), { headers: { authorization: `Bearer ${e.apiKey}` } });
  assert.equal(answer.status, 200, `waiters of ${k}: ${await answer.clone().text()}`);
  return ((await answer.json()) as { waiters: QueuedWaiter[] }).waiters;
}

test("c25 a session's wait that would close a cycle of sessions is refused at once with a typed DeadlockError carrying the cycle", async () => {
  const c = client();
  const [k1, k2] = [key("c25"), key("c25")];
  const a = await c.session({ ttlMs: 10_000, name: "ts-c25-a" });
  const b = await c.session({ ttlMs: 10_000, name: "ts-c25-b" });
  try {
    await a.lock(k1, { waitMs: 5000 });
    await b.lock(k2, { waitMs: 5000 });
    const [aOwner, bOwner] = ["ts-c25-a-waits", "ts-c25-b-waits"];
    // A waits for k2 (B's) in the background...
    const aWaits = a.lock(k2, { waitMs: 10_000, owner: aOwner });
    aWaits.catch(() => undefined); // awaited below; not unhandled meanwhile
    await eventually("A's wait for k2 is listed", async () => (await waitersOf(k2)).some((w) => w.session === a.id && w.owner === aOwner));

    // ...so B's wait for k1 (A's) would close the cycle: refused at once, not retried.
    const started = performance.now();
    const err = await b.lock(k1, { waitMs: 10_000, owner: bOwner }).catch((e: unknown) => e);
    const took = performance.now() - started;
    assert.ok(err instanceof DeadlockError, `a DeadlockError, got ${String(err)}`);
    assert.ok(took < 2000, `refused at once, not after waiting or retrying: ${Math.round(took)} ms`);
    assert.equal(err.status, 409);
    assert.equal(err.code, "deadlock");
    const [s1, s2] = [(await c.locks.status(k1)).storage_key, (await c.locks.status(k2)).storage_key];
    assert.deepEqual(
      err.cycle,
      [
        { session: b.id, owner: bOwner, kind: "lock", storage_key: s1 },
        { session: a.id, owner: aOwner, kind: "lock", storage_key: s2 },
      ],
      "B waiting for k1, then A waiting for k2",
    );
    assert.equal((await c.locks.status(k1)).session, a.id, "nothing granted to B");
    assert.ok(!(await waitersOf(k1)).some((w) => w.session === b.id), "nor queued");

    // A's acquire still waits; closing B's session grants it k2.
    assert.ok((await waitersOf(k2)).some((w) => w.session === a.id && w.owner === aOwner), "A still waits");
    assert.equal(await b.close(), true);
    const granted = await aWaits;
    assert.equal(granted.owner, aOwner);
    const status = await c.locks.status(k2);
    assert.equal(status.held, true);
    assert.equal(status.session, a.id, "k2 is A's now");
    assert.equal(status.token, granted.token);
  } finally {
    await b.close().catch(() => undefined);
    await a.close().catch(() => undefined);
    c.close();
  }
});

/** The keys of one lease of each kind (C24): a semaphore, two rwlocks, a multi-lock's two keys, an election. */
interface Kinds {
  semaphore: string;
  read: string;
  write: string;
  multi: [string, string];
  election: string;
}

function kinds(scenario: string): Kinds {
  return {
    semaphore: key(`${scenario}-sem`),
    read: key(`${scenario}-read`),
    write: key(`${scenario}-write`),
    multi: [key(`${scenario}-multi`), key(`${scenario}-multi`)],
    election: key(`${scenario}-election`),
  };
}

/** One lease of each kind taken in `session`, through its own call for the kind (waiting, or trying). */
async function takeEveryKind(session: Session, k: Kinds) {
  const permit = await session.semaphore(k.semaphore, 2, { waitMs: 5000 });
  const read = await session.rwLock(k.read, "read", { waitMs: 5000 });
  const write = await session.tryRwLock(k.write, "write");
  assert.ok(write !== null, "the free rwlock's write lease is granted at once");
  const multi = await session.multiLock(k.multi, { waitMs: 5000 });
  const leader = await session.campaign(k.election, { owner: `${k.election}-node`, waitMs: 5000 });
  return { permit, read, write, multi, leader };
}

type Held = Awaited<ReturnType<typeof takeEveryKind>>;

function leasesOf(held: Held): Array<Lease<unknown>> {
  return Object.values(held) as Array<Lease<unknown>>;
}

/** A session's lease as one comparable line: kind, key, token, slot, mode. */
function line(l: Pick<SessionLease, "kind" | "key" | "token" | "slot" | "mode">): string {
  return JSON.stringify([l.kind, l.key, l.token, l.slot ?? null, l.mode ?? null]);
}

/** Each key's status shows the lease of `held` with its token, held in `session` (elections: the leader and term). */
async function assertHeld(c: Client, k: Kinds, held: Held, session: string): Promise<void> {
  const semaphore = await c.semaphores.status(k.semaphore);
  assert.equal(semaphore.permits, 2);
  assert.deepEqual(
    semaphore.holders.map((h) => [h.owner, h.token, h.slot, h.session]),
    [[held.permit.owner, held.permit.token, held.permit.grant.slot, session]],
    "the permit holds its slot",
  );
  const read = await c.rwlocks.status(k.read);
  assert.equal(read.writer, null);
  assert.deepEqual(
    read.readers.map((r) => [r.owner, r.token, r.session]),
    [[held.read.owner, held.read.token, session]],
    "the read lease holds",
  );
  const write = await c.rwlocks.status(k.write);
  assert.deepEqual(write.readers, []);
  assert.deepEqual(
    [write.writer?.owner, write.writer?.token, write.writer?.session],
    [held.write.owner, held.write.token, session],
    "the write lease holds",
  );
  for (const entry of held.multi.grant.locks) {
    const status = await c.locks.status(entry.key);
    assert.deepEqual(
      [status.held, status.owner, status.token, status.session],
      [true, held.multi.owner, entry.token, session],
      `multi-lock key ${entry.key} holds`,
    );
  }
  const election = await c.elections.status(k.election);
  assert.deepEqual([election.leader, election.term], [held.leader.owner, held.leader.token], "the candidate leads");
}

test("c24 every kind is held in one session: a permit, a read and a write lease, a multi-lock and a leadership, kept alive by it and freed by its close", async () => {
  const c = client();
  const k = kinds("c24");
  let id: string;
  let held: Held;
  {
    await using session = await c.session({ ttlMs: TTL_MS, name: "ts-c24" });
    id = session.id;
    held = await takeEveryKind(session, k);
    for (const lease of leasesOf(held)) {
      assert.ok(Number.isInteger(lease.token) && lease.token > 0, `a positive integer token, got ${lease.token}`);
      assert.equal((lease.grant as { ttl_ms: number }).ttl_ms, TTL_MS, "the session's TTL is the lease's");
    }
    assert.ok(held.permit.grant.slot === 0 || held.permit.grant.slot === 1, `a slot of 2: ${held.permit.grant.slot}`);
    assert.equal(held.read.grant.mode, "read");
    assert.equal(held.write.grant.mode, "write");
    assert.deepEqual(held.multi.grant.locks.map((l) => l.key).sort(), [...k.multi].sort(), "both keys");
    assert.equal(held.leader.grant.leader, `${k.election}-node`, "the campaign won");
    await assertHeld(c, k, held, id);

    const expected = [
      { kind: "semaphore", key: k.semaphore, token: held.permit.token, slot: held.permit.grant.slot },
      { kind: "rwlock", key: k.read, token: held.read.token, mode: "read" },
      { kind: "rwlock", key: k.write, token: held.write.token, mode: "write" },
      ...held.multi.grant.locks.map((l) => ({ kind: "lock", key: l.key, token: l.token })),
      { kind: "election", key: k.election, token: held.leader.token },
    ].map(line);
    const shown = await c.sessions.status(id);
    assert.equal(shown.leases.length, 6, `six leases: ${JSON.stringify(shown.leases)}`);
    assert.deepEqual(shown.leases.map(line).sort(), expected.sort(), "GET /v1/sessions/{id} lists every lease, with slot and modes");

    // Time is what is tested here: more than three TTLs pass without a call of the test's.
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    await assertHeld(c, k, held, id);
    for (const lease of leasesOf(held)) {
      assert.equal(lease.held, true);
      assert.equal(lease.lost.aborted, false, `lease lost: ${String(lease.lost.reason)}`);
      assert.equal(lease.renewals, 0, "no lease of the session was renewed on its own");
    }
    assert.equal(session.lost.aborted, false, `session lost: ${String(session.lost.reason)}`);
    assert.ok(session.keepalives >= 6, `kept alive about every third of its TTL: ${session.keepalives} keepalives in 10 s`);
  }
  // The session was closed at the end of the block: every lease of it released.
  assert.deepEqual((await c.semaphores.status(k.semaphore)).holders, [], "the semaphore has no holder");
  for (const rw of [k.read, k.write]) {
    const status = await c.rwlocks.status(rw);
    assert.deepEqual([status.writer, status.readers], [null, []], `rwlock ${rw} has no holder`);
  }
  for (const m of k.multi) assert.equal((await c.locks.status(m)).held, false, `multi-lock key ${m} is free`);
  assert.equal((await c.elections.status(k.election)).leader, null, "the election has no leader");
  for (const lease of leasesOf(held)) {
    assert.equal(lease.held, false, "ended with the session");
    assert.equal(lease.lost.aborted, false, "a close is not a loss");
  }
  await assert.rejects(c.sessions.status(id), (err: unknown) => err instanceof SessionLostError && err.status === 404);
  c.close();
});

test("every kind in a session is released through its own handle, the others staying held", async () => {
  const c = client();
  const k = kinds("session-release");
  await c.withSession({ ttlMs: TTL_MS }, async (session) => {
    const held = await takeEveryKind(session, k);
    const left = (): Promise<string[]> => c.sessions.status(session.id).then((s) => s.leases.map((l) => l.kind).sort());
    assert.deepEqual(await left(), ["election", "lock", "lock", "rwlock", "rwlock", "semaphore"]);

    assert.equal(await held.permit.release(), true);
    assert.deepEqual((await c.semaphores.status(k.semaphore)).holders, [], "the permit is free at once");
    assert.equal(await held.read.release(), true);
    assert.deepEqual((await c.rwlocks.status(k.read)).readers, []);
    assert.equal(await held.write.release(), true);
    assert.equal((await c.rwlocks.status(k.write)).writer, null);
    assert.deepEqual(await left(), ["election", "lock", "lock"], "the rest stay held in the session");
    assert.equal(await held.multi.release(), true);
    for (const m of k.multi) assert.equal((await c.locks.status(m)).held, false);
    assert.equal(await held.leader.release(), true, "resigned");
    assert.equal((await c.elections.status(k.election)).leader, null);
    assert.deepEqual(await left(), []);
    for (const lease of leasesOf(held)) assert.equal(await lease.release(), false, "released before: nothing to release");

    // The `with…` calls of a session release when their callback ends.
    const inside = await session.withSemaphore(k.semaphore, 2, {}, async (permit) => {
      const holders = (await c.semaphores.status(k.semaphore)).holders;
      return permit.held && holders.length === 1 && holders[0]?.session === session.id;
    });
    assert.equal(inside, true, "withSemaphore holds the permit in the session");
    assert.deepEqual((await c.semaphores.status(k.semaphore)).holders, [], "and releases it after");
    await session.withMultiLock(k.multi, { waitMs: 0 }, async () => {
      for (const m of k.multi) assert.equal((await c.locks.status(m)).session, session.id);
    });
    for (const m of k.multi) assert.equal((await c.locks.status(m)).held, false);
    assert.equal(session.lost.aborted, false);
  });
  c.close();
});

test("every kind in a session is lost once with it when it is closed from outside; releasing them afterwards neither throws nor frees anything", async () => {
  const c = client();
  const k = kinds("session-lost");
  const session = await c.session({ ttlMs: TTL_MS });
  const held = await takeEveryKind(session, k);
  const fired = new Map<Lease<unknown>, number>();
  for (const lease of leasesOf(held)) lease.lost.addEventListener("abort", () => fired.set(lease, (fired.get(lease) ?? 0) + 1));

  const closed = performance.now();
  await closeFromOutside(session.id);
  // Another owner takes each key the session held.
  const next = {
    permit: await c.semaphore(k.semaphore, 2, { ttlMs: 10_000, waitMs: 5000 }),
    write: await c.rwLock(k.read, "write", { ttlMs: 10_000, waitMs: 5000 }),
    multi: await c.multiLock(k.multi, { ttlMs: 10_000, waitMs: 5000 }),
    leader: await c.campaign(k.election, { owner: "next-node", ttlMs: 10_000, waitMs: 5000 }),
  };
  const reason = await aborted(session.lost, TTL_MS + 1000);
  assert.ok(performance.now() - closed <= TTL_MS, "lost within one TTL");
  assert.ok(reason instanceof LeaseLostError && reason.code === "session_not_found", `session_not_found: ${String(reason)}`);
  for (const lease of leasesOf(held)) {
    assert.equal(lease.lost.aborted, true, "every lease of it is lost with it");
    assert.equal(lease.lost.reason, reason, "with the session's reason");
    assert.equal(lease.held, false);
    assert.equal(fired.get(lease), 1, "lost fired once");
  }
  assert.equal(await session.close(), false);
  for (const lease of leasesOf(held)) assert.equal(await lease.release(), false, "nothing to release, no error");

  const semaphore = await c.semaphores.status(k.semaphore);
  assert.deepEqual(semaphore.holders.map((h) => h.owner), [next.permit.owner], "the new permit holder keeps it");
  assert.equal((await c.rwlocks.status(k.read)).writer?.owner, next.write.owner);
  for (const m of k.multi) assert.equal((await c.locks.status(m)).owner, next.multi.owner);
  assert.equal((await c.elections.status(k.election)).leader, "next-node");
  for (const lease of Object.values(next) as Array<Lease<unknown>>) assert.equal(await lease.release(), true);
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
