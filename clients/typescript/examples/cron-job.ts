// A cron job guarded by a lock: every machine's cron starts it, one runs it.
//
//   LOCKBROKER_URL=... LOCKBROKER_API_KEY=... node build/examples/cron-job.js
import { pathToFileURL } from "node:url";

import { Client } from "../src/index.js";

/**
 * Runs `job` if no other instance is running it now: true when it ran here.
 * The job gets the lease's fencing token (for what it writes) and its
 * `lost` signal (stop when it fires: someone else may run it then).
 */
export async function runExclusively(
  client: Client,
  name: string,
  job: (token: number, lost: AbortSignal) => Promise<void>,
): Promise<boolean> {
  const lease = await client.tryLock(`cron/${name}`, { ttlMs: 30_000 });
  if (lease === null) return false; // another instance has it
  try {
    await job(lease.token, lease.lost);
  } finally {
    await lease.release();
  }
  return true;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = Client.fromEnv();
  const ran = await runExclusively(client, "nightly-report", async (token) => {
    console.log(`building the nightly report (fencing token ${token})`);
  });
  console.log(ran ? "done" : "another instance is running it");
  client.close();
}
