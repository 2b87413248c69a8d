/**
 * {@link Client}: one broker, one API key. Guards by their usual names
 * (`lock`, `tryLock`, `withLock`, and the same for semaphores, rwlocks,
 * multi-locks and elections) over the one lease model (`acquire.ts`,
 * `lease.ts`, `kinds.ts`); sessions, which keep many leases with one
 * keepalive (`session.ts`); the reads of each kind (`client.locks`,
 * `client.semaphores`, `client.rwlocks`, `client.elections`,
 * `client.sessions`); the event stream; the admin calls.
 */
import { type AcquireOptions, type Acquirer, DEFAULT_WAIT_MS, acquire, tryAcquire, withLease } from "./acquire.js";
import { Admin } from "./admin.js";
import { Caller, DEFAULT_SLACK_MS } from "./caller.js";
import { Elections } from "./elections.js";
import { type ChangeEvent, type EventsOptions, openEvents } from "./events.js";
import { ELECTION, LOCK, MULTILOCK, RWLOCK, SEMAPHORE } from "./kinds.js";
import type { Lease } from "./lease.js";
import { defaultIdentity } from "./owner.js";
import { Locks, RecordedResources, Resources } from "./resources.js";
import { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
import { type Session, type SessionOptions, openSession, withSession } from "./session.js";
import type { SseStream } from "./sse.js";
import { Transport } from "./transport.js";
import type {
  Leadership,
  LockGrant,
  MultiLockGrant,
  RwGrant,
  RwLockStatus,
  RwMode,
  SemaphoreGrant,
  SemaphoreStatus,
  SessionInfo,
  SessionStatus,
} from "./types.js";

export interface ClientOptions {
  /** The broker: `http://host:port` or `https://host:port` (a path prefix allowed). */
  url: string;
  /** The bearer token: a tenant's API key, or the admin token. */
  apiKey?: string | undefined;
  /** PEM file of the CAs to trust for `https://` instead of Node's bundled roots. */
  caFile?: string | undefined;
  /** PEM files of a client certificate and its key, for brokers that require mutual TLS. */
  clientCert?: string | undefined;
  clientKey?: string | undefined;
  /** How 503s, 429s and connection failures are retried (default {@link DEFAULT_RETRY}). */
  retry?: Partial<RetryPolicy> | undefined;
  /** How long an answer may take beyond the request's own wait, in ms (default 10 000). */
  slackMs?: number | undefined;
  /** The prefix of the owners made up for acquires (`{identity}:{n}`); default `host:pid`. */
  identity?: string | undefined;
}

/** A lock's lease. */
export type LockLease = Lease<LockGrant>;
/** A semaphore permit: `grant.slot` is its slot. */
export type PermitLease = Lease<SemaphoreGrant>;
/** A read or write lease of a reader-writer lock. */
export type RwLease = Lease<RwGrant>;
/** Several locks held as one lease; `grant.locks` has each key's token. */
export type MultiLease = Lease<MultiLockGrant>;
/** A leadership: `token` is the term; releasing it resigns. */
export type LeaderLease = Lease<Leadership>;

/** A client of one broker with one API key. Close it (or let the process end) when done. */
export class Client {
  /** Lock reads: `status`, `list`, `listAll`, `history`, `validate`. */
  readonly locks: Locks;
  /** Semaphore reads: `status`, `list`, `listAll`, `history`. */
  readonly semaphores: RecordedResources<SemaphoreStatus>;
  /** Reader-writer lock reads: `status`, `list`, `listAll`, `history`. */
  readonly rwlocks: RecordedResources<RwLockStatus>;
  /** Election reads: `status`, `list`, `listAll`, `observe`. */
  readonly elections: Elections;
  /** Session reads: `status(id)` (with its leases), `list`, `listAll` (by name prefix). */
  readonly sessions: Resources<SessionStatus, SessionInfo>;
  /** Calls that need the admin token. */
  readonly admin: Admin;

  private readonly from: Acquirer;
  private readonly options: ClientOptions;

  /** @throws LockbrokerError `invalid_options` for a bad URL or an unreadable TLS file. */
  constructor(options: ClientOptions);
  /** @internal */
  constructor(options: ClientOptions, caller: Caller);
  constructor(options: ClientOptions, caller?: Caller) {
    const retry = { ...DEFAULT_RETRY, ...options.retry };
    const made =
      caller ??
      new Caller(
        new Transport(options.url, { caFile: options.caFile, clientCert: options.clientCert, clientKey: options.clientKey }),
        options.apiKey,
        retry,
        options.slackMs ?? DEFAULT_SLACK_MS,
      );
    this.from = { caller: made, identity: options.identity ?? defaultIdentity() };
    this.locks = new Locks(made, "locks");
    this.semaphores = new RecordedResources<SemaphoreStatus>(made, "semaphores");
    this.rwlocks = new RecordedResources<RwLockStatus>(made, "rwlocks");
    this.elections = new Elections(made, "elections");
    this.sessions = new Resources<SessionStatus, SessionInfo>(made, "sessions");
    this.admin = new Admin(made);
    this.options = options;
  }

  /**
   * A client from the environment: `LOCKBROKER_URL` (default
   * `http://127.0.0.1:7420`), `LOCKBROKER_API_KEY`, `LOCKBROKER_CA_FILE`,
   * `LOCKBROKER_CLIENT_CERT`, `LOCKBROKER_CLIENT_KEY`; `overrides` win.
   */
  static fromEnv(overrides: Partial<ClientOptions> = {}, env: NodeJS.ProcessEnv = process.env): Client {
    const set = (name: string): string | undefined => (env[name] === "" ? undefined : env[name]);
    return new Client({
      url: set("LOCKBROKER_URL") ?? "http://127.0.0.1:7420",
      apiKey: set("LOCKBROKER_API_KEY"),
      caFile: set("LOCKBROKER_CA_FILE"),
      clientCert: set("LOCKBROKER_CLIENT_CERT"),
      clientKey: set("LOCKBROKER_CLIENT_KEY"),
      ...overrides,
    });
  }

  /** The same broker and connections with another bearer token (the admin token, another tenant's key). */
  withApiKey(apiKey: string): Client {
    return new Client({ ...this.options, apiKey }, this.from.caller.withBearer(apiKey));
  }

  /** The broker's URL. */
  get url(): string {
    return this.from.caller.transport.url.href;
  }

  /** Closes idle pooled connections. Leases still held keep renewing on new ones. */
  close(): void {
    this.from.caller.transport.close();
  }

  // -- locks --

  /**
   * Takes the lock `key`, waiting up to `waitMs` (default 30 s), and keeps it
   * renewed until released.
   *
   * @throws HeldError when it is still held by another owner after the wait.
   */
  lock(key: string, options: AcquireOptions = {}): Promise<LockLease> {
    return acquire(this.from, LOCK, key, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries the lock `key` once, without waiting: null when another owner holds it. */
  tryLock(key: string, options: AcquireOptions = {}): Promise<LockLease | null> {
    return tryAcquire(this.from, LOCK, key, options);
  }

  /** Runs `body` holding the lock `key`; released when `body` ends, also when it throws. */
  async withLock<R>(key: string, options: AcquireOptions, body: (lease: LockLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.lock(key, options), body);
  }

  // -- semaphores --

  /** Takes one of `permits` slots of the semaphore `key` (waiting as {@link Client.lock} does). */
  semaphore(key: string, permits: number, options: AcquireOptions = {}): Promise<PermitLease> {
    return acquire(this.from, SEMAPHORE, { key, permits }, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries one slot of the semaphore `key` once: null when every slot is taken. */
  trySemaphore(key: string, permits: number, options: AcquireOptions = {}): Promise<PermitLease | null> {
    return tryAcquire(this.from, SEMAPHORE, { key, permits }, options);
  }

  /** Runs `body` holding one slot of the semaphore `key`; released when it ends. */
  async withSemaphore<R>(key: string, permits: number, options: AcquireOptions, body: (lease: PermitLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.semaphore(key, permits, options), body);
  }

  // -- reader-writer locks --

  /** Takes a `read` (shared) or `write` (exclusive) lease of the rwlock `key`. */
  rwLock(key: string, mode: RwMode, options: AcquireOptions = {}): Promise<RwLease> {
    return acquire(this.from, RWLOCK, { key, mode }, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries a lease of the rwlock `key` once: null when a writer holds it (or, for a write, anyone). */
  tryRwLock(key: string, mode: RwMode, options: AcquireOptions = {}): Promise<RwLease | null> {
    return tryAcquire(this.from, RWLOCK, { key, mode }, options);
  }

  /** Runs `body` holding a lease of the rwlock `key`; released when it ends. */
  async withRwLock<R>(key: string, mode: RwMode, options: AcquireOptions, body: (lease: RwLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.rwLock(key, mode, options), body);
  }

  // -- multi-locks --

  /** Takes every lock of `keys` (1 to 64) at once, all or none, and keeps them renewed together. */
  multiLock(keys: readonly string[], options: AcquireOptions = {}): Promise<MultiLease> {
    return acquire(this.from, MULTILOCK, keys, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Tries the locks `keys` once: null when some key is held by another owner (none is taken then). */
  tryMultiLock(keys: readonly string[], options: AcquireOptions = {}): Promise<MultiLease | null> {
    return tryAcquire(this.from, MULTILOCK, keys, options);
  }

  /** Runs `body` holding every lock of `keys`; released when it ends. */
  async withMultiLock<R>(keys: readonly string[], options: AcquireOptions, body: (lease: MultiLease) => Promise<R> | R): Promise<R> {
    return withLease(await this.multiLock(keys, options), body);
  }

  // -- elections --

  /**
   * Campaigns in the election `name` (`owner` is the candidate), waiting up
   * to `waitMs` to lead; the leadership is renewed until released (which
   * resigns) or lost.
   *
   * @throws HeldError when another candidate still leads after the wait.
   */
  campaign(name: string, options: AcquireOptions = {}): Promise<LeaderLease> {
    return acquire(this.from, ELECTION, name, options, options.waitMs ?? DEFAULT_WAIT_MS);
  }

  /** Campaigns once: null when another candidate leads. */
  tryCampaign(name: string, options: AcquireOptions = {}): Promise<LeaderLease | null> {
    return tryAcquire(this.from, ELECTION, name, options);
  }

  // -- sessions --

  /**
   * Opens a session that keeps itself alive (a keepalive every third of
   * `ttlMs`) until closed; `session.lock(...)` holds leases in it, all lost
   * together (`session.lost`) and released together by `close()` or
   * `await using`.
   */
  session(options: SessionOptions = {}): Promise<Session> {
    return openSession(this.from, options);
  }

  /** Runs `body` with a session; closed (every lease in it released) when `body` ends, also when it throws. */
  async withSession<R>(options: SessionOptions, body: (session: Session) => Promise<R> | R): Promise<R> {
    return withSession(await this.session(options), body);
  }

  // -- events --

  /**
   * Every change of the tenant's locks, semaphores and rwlocks whose storage
   * key starts with `prefix`, from now on (or after the event id `after`),
   * as an async iterator that resumes after a broken connection. Connected
   * when this resolves.
   */
  events(options: EventsOptions = {}): Promise<SseStream<ChangeEvent>> {
    return openEvents(this.from.caller, options);
  }
}
