// The examples of the README (examples/*.ts), run against the real broker.
import assert from "node:assert/strict";
import { test } from "node:test";

import { runExclusively } from "../examples/cron-job.js";
import { FencedStore, fencedWrite } from "../examples/fenced-write.js";
import { lead } from "../examples/leader-loop.js";
import { workOnShards } from "../examples/shard-claims.js";
import { admin, client, eventually, key } from "./helpers.js";

test("example: a cron job guarded by a lock runs on one instance at a time", async () => {
  const c = client();
  const name = key("cron");
  let release!: () => void;
  const blocked = new Promise<void>((resolve) => (release = resolve));
  const tokens: number[] = [];
  const first = runExclusively(c, name, async (token) => {
    tokens.push(token);
    await blocked;
  });
  await eventually("the first instance runs", () => tokens.length === 1);
  assert.equal(await runExclusively(c, name, async () => assert.fail("ran twice")), false, "the second skips");
  release();
  assert.equal(await first, true);
  assert.equal(await runExclusively(c, name, async (token) => void tokens.push(token)), true, "the next run runs");
  assert.ok(tokens[1]! > tokens[0]!);
  assert.equal((await c.locks.status(`cron/${name}`)).held, false);
  c.close();
});

test("example: a leader loop hands over when the leader stops", async () => {
  const c = client();
  const election = key("leader");
  const rounds: Array<[string, number]> = [];
  const round = (node: string) => async (term: number, signal: AbortSignal) => {
    rounds.push([node, term]);
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, 50);
      signal.addEventListener("abort", () => (clearTimeout(timer), resolve(undefined)), { once: true });
    });
  };
  const stopA = new AbortController();
  const stopB = new AbortController();
  const a = lead(c, election, "node-a", round("node-a"), stopA.signal);
  await eventually("node-a leads", () => rounds.some(([n]) => n === "node-a"));
  const b = lead(c, election, "node-b", round("node-b"), stopB.signal);
  stopA.abort();
  await a;
  await eventually("node-b leads", () => rounds.some(([n]) => n === "node-b"));
  stopB.abort();
  await b;
  const termA = rounds.find(([n]) => n === "node-a")![1];
  const termB = rounds.find(([n]) => n === "node-b")![1];
  assert.ok(termB > termA, "a new term");
  assert.equal((await c.elections.status(election)).leader, null, "both resigned");
  c.close();
});

test("example: a fenced write refuses the writer whose lease was lost", async () => {
  const c = client();
  const k = key("fenced");
  const store = new FencedStore();
  assert.equal(await fencedWrite(c, k, store, "first"), true);

  // A writer pauses while holding the lock; its lease is ended and another writes.
  const paused = await c.lock(k, { ttlMs: 10_000 });
  await admin().admin.forceRelease("default", k);
  assert.equal(await fencedWrite(c, k, store, "second"), true);
  // It wakes up and writes with its old token: the broker and the store refuse it.
  assert.equal((await c.locks.validate(k, paused.token)).valid, false);
  assert.equal(store.write("stale", paused.token), false);
  assert.equal(store.value, "second");
  await paused.release();
  c.close();
});

test("example: a shard worker claims the free shards in one session and gives them all back", async () => {
  const c = client();
  const [a, b, d] = [key("shard"), key("shard"), key("shard")];
  const other = await c.lock(`shards/${b}`, { ttlMs: 10_000 });
  const claimed = await workOnShards(c, [a, b, d], async (tokens, lost) => {
    assert.deepEqual([...tokens.keys()], [a, d], "the shard another worker holds is skipped");
    const sessions = await Promise.all([a, d].map(async (shard) => (await c.locks.status(`shards/${shard}`)).session));
    assert.ok(sessions[0] !== null && sessions[0] === sessions[1], "both held in one session");
    assert.equal(lost.aborted, false);
  });
  assert.deepEqual(claimed, [a, d]);
  for (const shard of [a, d]) assert.equal((await c.locks.status(`shards/${shard}`)).held, false, "given back with the session");
  assert.equal((await c.locks.status(`shards/${b}`)).owner, other.owner, "the other worker's shard untouched");
  await other.release();
  c.close();
});
