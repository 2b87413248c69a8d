// Conformance scenarios C17–C19 (clients/CONFORMANCE.md, "Other kinds and reads"):
// history, listing, events.
import assert from "node:assert/strict";
import { test } from "node:test";

import type { ChangeEvent, StreamEvent } from "../src/index.js";
import { client, env, key, nextMatching } from "./helpers.js";
import { Forwarder } from "./standins.js";

test("c17 a key's history lists its grant and release, newest first", async () => {
  const c = client();
  const k = key("c17");
  const lease = await c.lock(k, { ttlMs: 10_000 });
  await lease.release();
  const events = await c.locks.history(k);
  assert.deepEqual(
    events.map((e) => [e.event, e.owner, e.token]),
    [
      ["released", lease.owner, lease.token],
      ["granted", lease.owner, lease.token],
    ],
  );
  assert.ok(events[0]!.at >= events[1]!.at, "newest first");
  assert.equal((await c.locks.history(k, { limit: 1 })).length, 1);
  c.close();
});

test("c18 listing by prefix follows cursors, and a tenant never lists another's leases", async () => {
  const c = client();
  const prefix = `${key("c18")}/`;
  const names = Array.from({ length: 5 }, (_, i) => `${prefix}${i}`);
  const leases = await Promise.all(names.map((k) => c.lock(k, { ttlMs: 30_000 })));
  await c.withLock(key("c18-elsewhere"), { ttlMs: 10_000 }, async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = await c.locks.list({ prefix, limit: 2, cursor });
      assert.ok(page.items.length <= 2);
      seen.push(...page.items.map((i) => i.storage_key));
      cursor = page.next;
      pages++;
    } while (cursor !== null);
    assert.deepEqual(seen, names, "every key once, in order");
    assert.ok(pages >= 3, `followed the cursor: ${pages} pages`);
    const all: string[] = [];
    for await (const item of c.locks.listAll({ prefix, limit: 2 })) {
      assert.equal(item.owner, leases[all.length]!.owner);
      all.push(item.storage_key);
    }
    assert.deepEqual(all, names);
  });
  const other = client({ apiKey: env().otherApiKey });
  assert.deepEqual((await other.locks.list({ prefix })).items, [], "tenant other sees none of them");
  assert.deepEqual((await other.locks.list({ prefix: "ts-" })).items, []);
  await Promise.all(leases.map((l) => l.release()));
  assert.deepEqual((await c.locks.list({ prefix })).items, []);
  other.close();
  c.close();
});

function isChange(e: ChangeEvent): e is StreamEvent {
  return e.event !== "reset";
}

test("c19 events: a grant and release with ids; resuming after the last id yields nothing already seen", async () => {
  const c = client();
  const prefix = `${key("c19")}/`;
  const stream = await c.events({ prefix });
  const events = stream[Symbol.asyncIterator]();
  const first = `${prefix}one`;
  await (await c.lock(first, { ttlMs: 10_000 })).release();
  const granted = await nextMatching(events, (e) => isChange(e) && e.storage_key === first);
  const released = await nextMatching(events, (e) => isChange(e) && e.storage_key === first);
  assert.ok(isChange(granted) && isChange(released));
  assert.equal(granted.event, "granted");
  assert.equal(released.event, "released");
  assert.equal(granted.kind, "lock");
  assert.ok(released.id > granted.id, "ids increase");
  assert.equal(stream.lastId, String(released.id));
  stream.close();

  // Reopened after the last id: the next event is the next change, never one seen.
  const resumed = await c.events({ prefix, after: released.id });
  const second = `${prefix}two`;
  await (await c.lock(second, { ttlMs: 10_000 })).release();
  const next = await nextMatching(resumed[Symbol.asyncIterator](), () => true);
  assert.ok(isChange(next));
  assert.equal(next.storage_key, second);
  assert.equal(next.event, "granted");
  assert.ok(next.id > released.id);
  resumed.close();

  // A stream whose connection breaks resumes with Last-Event-ID by itself.
  const forwarder = await Forwarder.start(c.url);
  const through = await client({ url: forwarder.url }).events({ prefix });
  const items = through[Symbol.asyncIterator]();
  const third = `${prefix}three`;
  await (await c.lock(third, { ttlMs: 10_000 })).release();
  const before = await nextMatching(items, (e) => isChange(e) && e.storage_key === third && e.event === "released");
  forwarder.cut();
  const fourth = `${prefix}four`;
  await (await c.lock(fourth, { ttlMs: 10_000 })).release();
  const after = await nextMatching(items, () => true);
  assert.ok(isChange(before) && isChange(after));
  assert.equal(after.storage_key, fourth, "nothing seen twice, nothing missed");
  assert.equal(after.event, "granted");
  assert.ok(after.id > before.id);
  through.close();
  await forwarder.close();
  c.close();
});
