/**
 * {@link Client}: one broker, one API key. Guards by their usual names
 * (`lock`, `tryLock`, `withLock`, and the same for semaphores, rwlocks,
 * multi-locks and elections: `guards.ts`, shared with sessions) over the
 * one lease model (`acquire.ts`, `lease.ts`, `kinds.ts`); sessions, which
 * keep leases of every kind with one keepalive (`session.ts`); the reads
 * of each kind (`client.locks`, `client.semaphores`, `client.rwlocks`,
 * `client.elections`, `client.sessions`); the event stream; the admin
 * calls.
 */
import type { AcquireOptions } from "./acquire.js";
import { Admin } from "./admin.js";
import { Caller, DEFAULT_SLACK_MS } from "./caller.js";
import { Elections } from "./elections.js";
import { type ChangeEvent, type EventsOptions, openEvents } from "./events.js";
import { Guards } from "./guards.js";
import { defaultIdentity } from "./owner.js";
import { Locks, RecordedResources, Resources } from "./resources.js";
import { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
import { type Session, type SessionOptions, openSession, withSession } from "./session.js";
import type { SseStream } from "./sse.js";
import { Transport } from "./transport.js";
import type { RwLockStatus, SemaphoreStatus, SessionInfo, SessionStatus } from "./types.js";

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

/**
 * A client of one broker with one API key. Close it (or let the process end)
 * when done. Its acquire calls (`lock`, `semaphore`, `rwLock`, `multiLock`,
 * `campaign`, their `try…` and `with…`) are {@link Guards}'; their leases
 * renew themselves until released.
 */
export class Client extends Guards<AcquireOptions> {
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
    super({ caller: made, identity: options.identity ?? defaultIdentity() });
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

  // -- sessions --

  /**
   * Opens a session that keeps itself alive (a keepalive every third of
   * `ttlMs`) until closed; `session.lock(...)`, `session.semaphore(...)`,
   * `session.rwLock(...)`, `session.multiLock(...)` and
   * `session.campaign(...)` hold leases in it, all lost together
   * (`session.lost`) and released together by `close()` or `await using`.
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
