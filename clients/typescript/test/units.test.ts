// The client's pure parts, without a broker: the SSE parser, backoff, error
// mapping, key encoding, configuration.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Client,
  DeadlockError,
  HeldError,
  LeaseLostError,
  LockbrokerError,
  RateLimitedError,
  SessionLostError,
  ThrottledError,
  UnavailableError,
} from "../src/index.js";
import { errorFromAnswer } from "../src/errors.js";
import { segment } from "../src/kinds.js";
import { DEFAULT_RETRY, retryDelay } from "../src/retry.js";
import { SseParser } from "../src/sse.js";

test("the SSE parser: fields, comments, several data lines, any line ending, events split across chunks", () => {
  const parser = new SseParser();
  const text = ": keep-alive\r\nid: 7\r\nevent: granted\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: leader\ndata: x\n\ndata:y\r\rid\n\n";
  const events = [];
  // One character at a time: every split point.
  for (const c of text) events.push(...parser.feed(c));
  assert.deepEqual(events, [
    { event: "granted", id: "7", data: '{"a":\n1}' },
    { event: "leader", id: null, data: "x" },
    { event: "message", id: null, data: "y" },
  ]);
  assert.deepEqual(new SseParser().feed(text), events, "the same in one chunk");
});

test("backoff delays grow, are jittered, stay under the cap; a broker's hint is honoured", () => {
  const policy = { ...DEFAULT_RETRY, baseDelayMs: 100, maxDelayMs: 1000 };
  assert.equal(retryDelay(policy, 1, null, () => 0), 50);
  assert.equal(retryDelay(policy, 1, null, () => 1), 100);
  assert.equal(retryDelay(policy, 3, null, () => 1), 400);
  for (let retry = 1; retry < 40; retry++) assert.ok(retryDelay(policy, retry, null) <= 1000);
  assert.equal(retryDelay(policy, 1, 730, () => 0), 730);
  assert.ok(retryDelay(policy, 1, 5000, () => 1) >= 5000, "a hint beyond the cap is still honoured");
});

test("answers become typed errors by code, else by status", () => {
  const held = errorFromAnswer(409, '{"error":{"code":"lock_held","message":"m","retry_after_ms":120}}', undefined);
  assert.ok(held instanceof HeldError);
  assert.equal(held.retryAfterMs, 120);
  assert.ok(errorFromAnswer(409, '{"error":{"code":"semaphore_full","message":"m"}}', undefined) instanceof HeldError);
  assert.ok(errorFromAnswer(409, '{"error":{"code":"lease_lost","message":"m"}}', undefined) instanceof LeaseLostError);
  const cycle = [
    { session: "s-b", owner: "b", kind: "lock", storage_key: "k1" },
    { session: "s-a", owner: "a", kind: "semaphore", storage_key: "k2" },
  ];
  const deadlock = errorFromAnswer(409, JSON.stringify({ error: { code: "deadlock", message: "m", cycle } }), undefined);
  assert.ok(deadlock instanceof DeadlockError && !(deadlock instanceof HeldError), "a deadlock is its own refusal");
  assert.equal(deadlock.code, "deadlock");
  assert.equal(deadlock.status, 409);
  assert.deepEqual(deadlock.cycle, cycle);
  const bare = errorFromAnswer(409, '{"error":{"code":"deadlock","message":"m","cycle":null}}', undefined);
  assert.ok(bare instanceof DeadlockError);
  assert.deepEqual(bare.cycle, [], "no cycle sent: an empty one");
  const ended = errorFromAnswer(404, '{"error":{"code":"session_not_found","message":"m"}}', undefined);
  assert.ok(ended instanceof SessionLostError && ended instanceof LeaseLostError, "an ended session is a loss of its leases");
  const limited = errorFromAnswer(429, '{"error":{"code":"rate_limited","message":"m"}}', "2");
  assert.ok(limited instanceof RateLimitedError && limited instanceof ThrottledError);
  assert.equal(limited.retryAfterMs, 2000, "from Retry-After");
  const proxy = errorFromAnswer(503, "<html>bad gateway</html>", undefined);
  assert.ok(proxy instanceof UnavailableError);
  assert.equal(proxy.code, "unavailable");
  const future = errorFromAnswer(418, '{"error":{"code":"teapot","message":"short and stout"}}', undefined);
  assert.ok(future instanceof LockbrokerError);
  assert.equal(future.code, "teapot");
  assert.equal(future.status, 418);
});

test("keys are one path segment", () => {
  assert.equal(segment("a/b c"), "a%2Fb%20c");
  assert.equal(segment("job-1_x.y~"), "job-1_x.y~");
  assert.equal(segment("✓!*'()"), "%E2%9C%93%21%2A%27%28%29");
});

test("configuration: URLs, TLS files, the environment", () => {
  for (const bad of ["ftp://x", "127.0.0.1:7420", "http://", "http://h?x=1", ""]) {
    assert.throws(() => new Client({ url: bad }), { code: "invalid_options" }, bad);
  }
  assert.throws(() => new Client({ url: "https://h", caFile: "/nonexistent/ca.pem" }), { code: "invalid_options" });
  assert.throws(() => new Client({ url: "https://h", clientCert: "/x.pem" }), { code: "invalid_options" }, "a cert needs its key");
  const c = Client.fromEnv({}, { LOCKBROKER_URL: "http://127.0.0.1:1/prefix/", LOCKBROKER_API_KEY: "k" });
  assert.equal(c.url, "http://127.0.0.1:1/prefix/");
  assert.equal(Client.fromEnv({}, {}).url, "http://127.0.0.1:7420/");
});
