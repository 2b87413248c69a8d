// Claiming shards in one session: a worker holds every shard it can get
// with one keepalive, and loses (or gives back) all of them together.
//
//   LOCKBROKER_URL=... LOCKBROKER_API_KEY=... node build/examples/shard-claims.js
import { pathToFileURL } from "node:url";

import { Client } from "../src/index.js";

/**
 * Takes each of `shards` that no other worker holds, in one session, and
 * runs `work` with their fencing tokens and the session's `lost` signal
 * (stop when it fires: other workers may take the shards then). Every
 * claim is given back when `work` ends, by closing the session. The
 * shards it claimed.
 */
export async function workOnShards(
  client: Client,
  shards: readonly string[],
  work: (tokens: Map<string, number>, lost: AbortSignal) => Promise<void>,
): Promise<string[]> {
  await using session = await client.session({ ttlMs: 15_000, name: "shard-worker" });
  const tokens = new Map<string, number>();
  for (const shard of shards) {
    const lease = await session.tryLock(`shards/${shard}`);
    if (lease !== null) tokens.set(shard, lease.token); // else another worker has it
  }
  await work(tokens, session.lost);
  return [...tokens.keys()];
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = Client.fromEnv();
  const claimed = await workOnShards(client, ["eu", "us", "ap"], async (tokens) => {
    for (const [shard, token] of tokens) console.log(`indexing shard ${shard} (fencing token ${token})`);
  });
  console.log(`worked on ${claimed.length} shards`);
  client.close();
}
