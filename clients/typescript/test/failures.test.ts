// Conformance scenarios C09–C12 (clients/CONFORMANCE.md, "Failures and retries"):
// stand-in servers where the network or the broker must misbehave, the real
// broker for the rest.
import assert from "node:assert/strict";
import * as net from "node:net";
import { test } from "node:test";

import {
  Client,
  DeadlockError,
  HeldError,
  LockbrokerError,
  OutcomeUnknownError,
  RateLimitedError,
  UnavailableError,
  UnreachableError,
} from "../src/index.js";
import { client, env, key } from "./helpers.js";
import { StandIn, deadPort, errorBody } from "./standins.js";

const UNAVAILABLE = { status: 503, body: errorBody("unavailable", "the database is down") } as const;

test("c09 503s are retried with growing, jittered delays and the third try succeeds", async () => {
  const e = env();
  const standIn = await StandIn.start((_, n) => (n <= 2 ? UNAVAILABLE : "forward"), e.url);
  const c = client({ url: standIn.url, retry: { attempts: 4, baseDelayMs: 100 } });
  const k = key("c09");
  const lease = await c.lock(k, { ttlMs: 10_000 });
  const acquires = standIn.received.filter((r) => r.path.endsWith("/acquire"));
  assert.equal(acquires.length, 3, "granted on the third try");
  const [a, b, third] = acquires.map((r) => r.at) as [number, number, number];
  const first = b - a;
  const second = third - b;
  // 50 to 100 ms, then 100 to 200 ms (jittered); the upper bounds leave room for a busy machine.
  assert.ok(first >= 45 && first <= 400, `the first delay is 50 to 100 ms: ${first}`);
  assert.ok(second >= 95 && second <= 600, `the second is 100 to 200 ms: ${second}`);
  assert.equal((await client().locks.status(k)).owner, lease.owner);
  await lease.release();
  c.close();
  await standIn.close();
});

test("c09 with a deadline shorter than the retries, the typed unavailable error comes by the deadline", async () => {
  const standIn = await StandIn.start(() => UNAVAILABLE);
  const c = new Client({ url: standIn.url, apiKey: "k", retry: { attempts: 20, baseDelayMs: 100 } });
  const started = performance.now();
  const err = await c.locks.status(key("c09"), { timeoutMs: 400 }).catch((e: unknown) => e);
  const took = performance.now() - started;
  assert.ok(err instanceof UnavailableError, `UnavailableError, got ${String(err)}`);
  assert.equal((err as UnavailableError).status, 503);
  assert.ok(took <= 400 + 150, `by the deadline: ${took} ms`);
  assert.ok(standIn.received.length >= 2 && standIn.received.length < 20, `retried within it: ${standIn.received.length} tries`);
  c.close();
  await standIn.close();
});

test("c09 connection failures are retried: refused connections, and broken ones for reads", async () => {
  // Nothing listens: every try is refused, then the typed error.
  const port = await deadPort();
  const refused = new Client({ url: `http://127.0.0.1:${port}`, apiKey: "k", retry: { attempts: 3, baseDelayMs: 50 } });
  const started = performance.now();
  const err = await refused.lock(key("c09")).catch((e: unknown) => e);
  assert.ok(err instanceof UnreachableError && err instanceof UnavailableError, `UnreachableError, got ${String(err)}`);
  assert.equal(err.status, null);
  assert.ok(performance.now() - started >= 25 + 50, "after two backoff delays");
  const late = await refused.locks.status("x", { timeoutMs: 150 }).catch((e: unknown) => e);
  assert.ok(late instanceof UnreachableError);

  // A server that accepts and resets the first two connections, then forwards: a read succeeds on the third.
  const e = env();
  let connections = 0;
  const target = new URL(e.url);
  const flaky = net.createServer((socket) => {
    connections++;
    if (connections <= 2) {
      socket.on("error", () => undefined);
      socket.once("data", () => socket.resetAndDestroy());
      return;
    }
    const upstream = net.connect(Number(target.port), target.hostname);
    socket.on("error", () => upstream.destroy());
    upstream.on("error", () => socket.destroy());
    socket.pipe(upstream).pipe(socket);
  });
  await new Promise<void>((resolve) => flaky.listen(0, "127.0.0.1", resolve));
  const c = client({ url: `http://127.0.0.1:${(flaky.address() as net.AddressInfo).port}` });
  const status = await c.locks.status(key("c09"));
  assert.equal(status.held, false);
  assert.equal(connections, 3, "two broken connections, then the answer");
  c.close();
  flaky.close();
});

test("c10 400, 401, 404, 409 and 422 are returned as typed errors after exactly one request", async () => {
  const cases: Array<[number, string]> = [
    [400, "bad_request"],
    [401, "unauthenticated"],
    [404, "not_found"],
    [409, "lock_held"],
    [422, "invalid_key"],
  ];
  for (const [status, code] of cases) {
    const standIn = await StandIn.start(() => ({ status, body: errorBody(code, `refused with ${status}`, status === 409 ? 120 : undefined) }));
    const c = new Client({ url: standIn.url, apiKey: "k" });
    const err = await c.lock(key("c10"), { waitMs: 0 }).catch((e: unknown) => e);
    assert.ok(err instanceof LockbrokerError, `${status}: a LockbrokerError, got ${String(err)}`);
    assert.equal(err.status, status);
    assert.equal(err.code, code);
    if (status === 409) {
      assert.ok(err instanceof HeldError);
      assert.equal(err.retryAfterMs, 120);
    }
    assert.equal(standIn.count("/acquire"), 1, `${status}: one request`);
    assert.equal(standIn.received.length, 1, `${status}: nothing else either`);
    c.close();
    await standIn.close();
  }
  // A deadlock refusal of a waiting acquire is not retried either, whatever is left of its wait.
  const cycle = [
    { session: "s-b", owner: "b", kind: "lock", storage_key: "k1" },
    { session: "s-a", owner: "a", kind: "lock", storage_key: "k2" },
  ];
  const refusing = await StandIn.start(() => ({ status: 409, body: { error: { code: "deadlock", message: "cycle", cycle } } }));
  const waiting = new Client({ url: refusing.url, apiKey: "k" });
  const deadlock = await waiting.lock(key("c10"), { waitMs: 10_000 }).catch((e: unknown) => e);
  assert.ok(deadlock instanceof DeadlockError, `a DeadlockError, got ${String(deadlock)}`);
  assert.deepEqual(deadlock.cycle, cycle);
  assert.equal(refusing.count("/acquire"), 1, "deadlock: one request");
  assert.equal(refusing.received.length, 1, "deadlock: nothing else either");
  waiting.close();
  await refusing.close();
  // And from the real broker: a wrong key, a key the naming policy refuses.
  const stranger = client({ apiKey: "not-a-key" });
  await assert.rejects(stranger.locks.status(key("c10")), { code: "unauthenticated", status: 401 });
  await assert.rejects(client().lock("bad\u0001key"), { code: "invalid_key", status: 422 });
  stranger.close();
});

test("c11 an acquire whose connection closed after it was sent is not sent again", async () => {
  const standIn = await StandIn.start((request) =>
    request.path.endsWith("/acquire")
      ? "hang-up"
      : { status: 200, body: { key: "k", storage_key: "k", held: false, owner: null, token: null, hold_count: null, acquired_at: null, expires_at: null, waiters: 0 } },
  );
  const c = new Client({ url: standIn.url, apiKey: "k" });
  const err = await c.lock(key("c11"), { waitMs: 1000 }).catch((e: unknown) => e);
  assert.ok(err instanceof OutcomeUnknownError, `OutcomeUnknownError, got ${String(err)}`);
  assert.equal(err.code, "outcome_unknown");
  assert.equal(standIn.count("/acquire"), 1, "exactly one acquire reached the server");
  assert.ok(
    standIn.received.some((r) => r.method === "GET"),
    "the client asked the key's status to find out whether its owner was granted it",
  );
  c.close();
  await standIn.close();
});

test("c12 429 rate_limited is honoured: the client waits retry_after_ms and the calls succeed", async () => {
  const e = env();
  const limited = client({ apiKey: e.limitedApiKey });
  // 2 requests a second, burst 2: 6 at once need about 2 s.
  const started = performance.now();
  const statuses = await Promise.all(Array.from({ length: 6 }, (_, i) => limited.locks.status(key(`c12-${i}`))));
  const took = performance.now() - started;
  assert.equal(statuses.length, 6);
  assert.ok(took >= 1500, `the burst was spread by the broker's hints: ${took} ms`);

  // A deadline shorter than the hint: the typed error, at once, with the hint.
  await Promise.allSettled([limited.locks.status("a", { timeoutMs: 50 }), limited.locks.status("b", { timeoutMs: 50 })]);
  const short = performance.now();
  const err = await limited.locks.status(key("c12"), { timeoutMs: 100 }).catch((x: unknown) => x);
  assert.ok(err instanceof RateLimitedError, `RateLimitedError, got ${String(err)}`);
  assert.equal(err.code, "rate_limited");
  assert.equal(err.status, 429);
  assert.ok((err.retryAfterMs ?? 0) > 0, `carries retry_after_ms: ${err.retryAfterMs}`);
  assert.ok(performance.now() - short <= 100 + 150, "by the deadline");
  limited.close();
});

test("c12 Retry-After alone is honoured too", async () => {
  const standIn = await StandIn.start((_, n) =>
    n === 1 ? { status: 429, body: errorBody("rate_limited", "slow down"), headers: { "retry-after": "1" } } : "forward",
    env().url,
  );
  const c = client({ url: standIn.url });
  await c.locks.status(key("c12"));
  const [first, second] = standIn.received.map((r) => r.at) as [number, number];
  assert.equal(standIn.received.length, 2);
  assert.ok(second - first >= 990, `waited the header's second: ${second - first} ms`);
  c.close();
  await standIn.close();
});
