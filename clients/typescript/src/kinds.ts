/**
 * What each kind of lease adds to the one model of a lease (`lease.ts`,
 * `acquire.ts`): the requests that take, renew and give it back, where its
 * token and TTL are in a grant, which refusal means "taken now", and how to
 * find, by owner, a grant whose answer never arrived. Locks, semaphores,
 * reader-writer locks, multi-locks and elections are each one {@link Kind}.
 */
import type { Caller, CallOptions, Request } from "./caller.js";
import type {
  ElectionStatus,
  HeldKey,
  Leadership,
  LeaseTerms,
  LockGrant,
  LockStatus,
  MultiLockGrant,
  RwGrant,
  RwLockStatus,
  RwMode,
  SemaphoreGrant,
  SemaphoreStatus,
} from "./types.js";

/** A kind of lease: `G` is its grant, `T` what an acquire names (a key, a key and a size, keys). */
export interface Kind<G, T> {
  /** For messages: `lock`, `semaphore`, ... */
  readonly noun: string;
  /** Codes that mean "held by others now": a try answers null. */
  readonly busy: readonly string[];
  /** What the acquire names, for messages. */
  describe(target: T): string;
  acquire(target: T, owner: string, terms: LeaseTerms): Request;
  renew(grant: G): Request;
  release(grant: G): Request;
  /** The fencing token (an election's term; a multi-lock's first key's). */
  token(grant: G): number;
  owner(grant: G): string;
  ttlMs(grant: G): number;
  /**
   * The release of whatever `owner` holds of `target` now, found in its
   * status; null when it holds nothing. For an acquire whose answer was lost.
   */
  heldBy(caller: Caller, target: T, owner: string, options: CallOptions): Promise<Request | null>;
}

/**
 * What a held lease needs of its kind: renewing and releasing it, reading
 * its grants. `renewed` makes the next grant from a renewal's answer when
 * that answer is not a whole grant (a session's keepalive answers only its
 * new expiry); without it the answer is the grant.
 */
export type Renewable<G> = Pick<Kind<G, never>, "noun" | "renew" | "release" | "token" | "owner" | "ttlMs"> & {
  renewed?: (previous: G, answer: unknown) => G;
};

/** One percent-encoded path segment: every byte but `A-Za-z0-9-._~` encoded. */
export function segment(key: string): string {
  return encodeURIComponent(key).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function path(kind: string, key: string, action = ""): string {
  return `/v1/${kind}/${segment(key)}${action}`;
}

function get<S>(caller: Caller, at: string, options: CallOptions): Promise<S> {
  return caller.call<S>({ method: "GET", path: at, idempotent: true, ...options });
}

export const LOCK: Kind<LockGrant, string> = {
  noun: "lock",
  busy: ["lock_held"],
  describe: (key) => `lock ${JSON.stringify(key)}`,
  acquire: (key, owner, terms) => ({ method: "POST", path: path("locks", key, "/acquire"), body: { owner, ...terms } }),
  renew: (g) => ({ method: "POST", path: path("locks", g.key, "/renew"), body: { owner: g.owner, token: g.token, ttl_ms: g.ttl_ms } }),
  release: (g) => ({ method: "POST", path: path("locks", g.key, "/release"), body: { owner: g.owner, token: g.token } }),
  token: (g) => g.token,
  owner: (g) => g.owner,
  ttlMs: (g) => g.ttl_ms,
  async heldBy(caller, key, owner, options) {
    const status = await get<LockStatus>(caller, path("locks", key), options);
    if (!status.held || status.owner !== owner || status.token === null) return null;
    return { method: "POST", path: path("locks", key, "/release"), body: { owner, token: status.token } };
  },
};

/** A semaphore's key and size. */
export interface SemaphoreTarget {
  key: string;
  permits: number;
}

export const SEMAPHORE: Kind<SemaphoreGrant, SemaphoreTarget> = {
  noun: "semaphore",
  busy: ["semaphore_full"],
  describe: (t) => `semaphore ${JSON.stringify(t.key)}`,
  acquire: (t, owner, terms) => ({
    method: "POST",
    path: path("semaphores", t.key, "/acquire"),
    body: { owner, permits: t.permits, ...terms },
  }),
  renew: (g) => ({
    method: "POST",
    path: path("semaphores", g.key, "/renew"),
    body: { owner: g.owner, token: g.token, slot: g.slot, ttl_ms: g.ttl_ms },
  }),
  release: (g) => ({ method: "POST", path: path("semaphores", g.key, "/release"), body: { owner: g.owner, token: g.token, slot: g.slot } }),
  token: (g) => g.token,
  owner: (g) => g.owner,
  ttlMs: (g) => g.ttl_ms,
  async heldBy(caller, t, owner, options) {
    const status = await get<SemaphoreStatus>(caller, path("semaphores", t.key), options);
    const mine = status.holders.find((h) => h.owner === owner);
    if (!mine) return null;
    return { method: "POST", path: path("semaphores", t.key, "/release"), body: { owner, token: mine.token, slot: mine.slot } };
  },
};

/** A reader-writer lock's key and the mode asked for. */
export interface RwTarget {
  key: string;
  mode: RwMode;
}

export const RWLOCK: Kind<RwGrant, RwTarget> = {
  noun: "rwlock",
  busy: ["lock_held"],
  describe: (t) => `${t.mode} lease of rwlock ${JSON.stringify(t.key)}`,
  acquire: (t, owner, terms) => ({ method: "POST", path: path("rwlocks", t.key, "/acquire"), body: { owner, mode: t.mode, ...terms } }),
  renew: (g) => ({ method: "POST", path: path("rwlocks", g.key, "/renew"), body: { owner: g.owner, token: g.token, ttl_ms: g.ttl_ms } }),
  release: (g) => ({ method: "POST", path: path("rwlocks", g.key, "/release"), body: { owner: g.owner, token: g.token } }),
  token: (g) => g.token,
  owner: (g) => g.owner,
  ttlMs: (g) => g.ttl_ms,
  async heldBy(caller, t, owner, options) {
    const status = await get<RwLockStatus>(caller, path("rwlocks", t.key), options);
    const mine = [status.writer, ...status.readers].find((h) => h?.owner === owner);
    if (!mine) return null;
    return { method: "POST", path: path("rwlocks", t.key, "/release"), body: { owner, token: mine.token } };
  },
};

function heldKeys(grant: MultiLockGrant): HeldKey[] {
  return grant.locks.map((l) => ({ key: l.key, token: l.token }));
}

export const MULTILOCK: Kind<MultiLockGrant, readonly string[]> = {
  noun: "multi-lock",
  busy: ["lock_held"],
  describe: (keys) => `multi-lock ${JSON.stringify(keys)}`,
  acquire: (keys, owner, terms) => ({ method: "POST", path: "/v1/multilock/acquire", body: { keys, owner, ...terms } }),
  renew: (g) => ({ method: "POST", path: "/v1/multilock/renew", body: { owner: g.owner, ttl_ms: g.ttl_ms, locks: heldKeys(g) } }),
  release: (g) => ({ method: "POST", path: "/v1/multilock/release", body: { owner: g.owner, locks: heldKeys(g) } }),
  token: (g) => g.locks[0]?.token ?? 0,
  owner: (g) => g.owner,
  ttlMs: (g) => g.ttl_ms,
  async heldBy(caller, keys, owner, options) {
    const locks: HeldKey[] = [];
    for (const key of keys) {
      const status = await get<LockStatus>(caller, path("locks", key), options);
      if (status.held && status.owner === owner && status.token !== null) locks.push({ key, token: status.token });
    }
    return locks.length === 0 ? null : { method: "POST", path: "/v1/multilock/release", body: { owner, locks } };
  },
};

export const ELECTION: Kind<Leadership, string> = {
  noun: "election",
  busy: ["lock_held"],
  describe: (name) => `election ${JSON.stringify(name)}`,
  acquire: (name, candidate, terms) => ({ method: "POST", path: path("elections", name, "/campaign"), body: { candidate, ...terms } }),
  renew: (g) => ({ method: "POST", path: path("elections", g.name, "/renew"), body: { candidate: g.leader, term: g.term, ttl_ms: g.ttl_ms } }),
  release: (g) => ({ method: "POST", path: path("elections", g.name, "/resign"), body: { candidate: g.leader, term: g.term } }),
  token: (g) => g.term,
  owner: (g) => g.leader,
  ttlMs: (g) => g.ttl_ms,
  async heldBy(caller, name, candidate, options) {
    const status = await get<ElectionStatus>(caller, path("elections", name), options);
    if (status.leader !== candidate || status.term === null) return null;
    return { method: "POST", path: path("elections", name, "/resign"), body: { candidate, term: status.term } };
  },
};
