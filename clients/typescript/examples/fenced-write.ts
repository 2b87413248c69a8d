// A fenced write: the store refuses writes carrying a token older than one it
// has seen, so a writer whose lease ran out (a long pause, a partition)
// cannot overwrite the work of the writer that holds the lock now.
import { Client } from "../src/index.js";

/** A store that keeps the highest fencing token it has seen (what a real database would keep in a column). */
export class FencedStore {
  value: string | null = null;
  private highest = 0;

  /** Writes `value` if `token` is not older than any seen; false when refused. */
  write(value: string, token: number): boolean {
    if (token < this.highest) return false;
    this.highest = token;
    this.value = value;
    return true;
  }
}

/**
 * Takes the lock `key`, checks its token with the broker (`validate`, which
 * catches a lease lost before the write) and writes with it; the store's own
 * check catches what happens between the two.
 */
export async function fencedWrite(client: Client, key: string, store: FencedStore, value: string): Promise<boolean> {
  return client.withLock(key, { ttlMs: 10_000 }, async (lease) => {
    const { valid } = await client.locks.validate(key, lease.token);
    return valid && store.write(value, lease.token);
  });
}
