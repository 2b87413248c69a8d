/**
 * Who holds a lease. The broker treats the same owner acquiring a lock it
 * holds as re-entry, so two tasks of one process must not share an owner by
 * accident: every acquire gets a fresh owner (`host:pid:n`) unless the
 * caller names one. A fresh owner is also what lets an acquire whose answer
 * was lost find out, from the key's status, whether it was granted.
 */
import { hostname } from "node:os";

let next = 1;

/** `host:pid`, the default identity of a client. */
export function defaultIdentity(): string {
  return `${hostname() || "localhost"}:${process.pid}`;
}

/** `{identity}:{n}`, with `n` unique in this process. */
export function uniqueOwner(identity: string): string {
  return `${identity}:${next++}`;
}
