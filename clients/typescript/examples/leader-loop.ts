// A leader loop: every node campaigns; the leader works in rounds until it
// loses the leadership or is told to stop, then resigns so another takes over.
//
//   LOCKBROKER_URL=... LOCKBROKER_API_KEY=... node build/examples/leader-loop.js node-1
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";

import { Client } from "../src/index.js";

/**
 * Waits to lead `election` as `node`, then calls `round` with the term until
 * `stop` aborts or the leadership is lost; resigns at the end. Rounds get a
 * signal that aborts on either, to cut a round short. Rejects with `stop`'s
 * reason when stopped before it leads.
 */
export async function lead(
  client: Client,
  election: string,
  node: string,
  round: (term: number, signal: AbortSignal) => Promise<void>,
  stop: AbortSignal,
): Promise<void> {
  const leader = await client.campaign(election, { owner: node, ttlMs: 10_000, waitMs: 300_000, signal: stop });
  const signal = AbortSignal.any([stop, leader.lost]);
  try {
    while (!signal.aborted) {
      await round(leader.token, signal);
    }
  } finally {
    await leader.release(); // resigns (a no-op once lost)
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = Client.fromEnv();
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  await lead(
    client,
    "scheduler",
    process.argv[2] ?? "node-1",
    async (term, signal) => {
      console.log(`leading in term ${term}`);
      await sleep(1000, undefined, { signal }).catch(() => undefined);
    },
    stop.signal,
  );
  client.close();
}
