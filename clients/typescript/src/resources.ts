/**
 * The reads of every lease kind, written once over the kind's path:
 * `client.locks`, `client.semaphores`, `client.rwlocks` and
 * `client.elections` each have `status`, `list` (one page) and `listAll`
 * (every page, following cursors); the kinds whose changes the broker
 * records add `history`, locks add `validate` (the fencing check), and
 * elections add `observe` (`elections.ts`). `client.sessions` has the same
 * three; its listing's items are sessions without their leases.
 */
import type { Caller, CallOptions } from "./caller.js";
import { segment } from "./kinds.js";
import type { LockEvent, LockHistory, LockStatus, Page, Validity } from "./types.js";

/** Which page of a listing. */
export interface ListOptions extends CallOptions {
  /** Only storage keys that start with these bytes (matched literally: `%` and `_` are not wildcards). */
  prefix?: string | undefined;
  /** Items per page, 1 to 1000 (default: the broker's 100). */
  limit?: number | undefined;
  /** The previous page's `next`. */
  cursor?: string | null | undefined;
}

/** The reads of one kind; `S` is its status, `I` a listing's item (the status, but for sessions). */
export class Resources<S, I = S> {
  /** @internal */
  constructor(
    protected readonly caller: Caller,
    /** The API's path segment: `locks`, `semaphores`, `rwlocks`, `elections`. */
    readonly kind: "locks" | "semaphores" | "rwlocks" | "elections" | "sessions",
  ) {}

  protected path(key: string, action = ""): string {
    return `/v1/${this.kind}/${segment(key)}${action}`;
  }

  protected get<T>(path: string, options: CallOptions): Promise<T> {
    return this.caller.call<T>({ method: "GET", path, idempotent: true, signal: options.signal, timeoutMs: options.timeoutMs });
  }

  /** `GET /v1/{kind}/{key}`: the holders and waiters now (by the database clock). */
  status(key: string, options: CallOptions = {}): Promise<S> {
    return this.get<S>(this.path(key), options);
  }

  /**
   * One page of the tenant's live leases of this kind under `prefix`, in
   * storage-key order. A page may hold fewer than `limit`: follow `next`
   * until it is null, or use {@link Resources.listAll}.
   *
   * @throws LockbrokerError `bad_request` for a limit out of range or a malformed cursor.
   */
  list(options: ListOptions = {}): Promise<Page<I>> {
    const query = new URLSearchParams({ prefix: options.prefix ?? "" });
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    if (options.cursor) query.set("cursor", options.cursor);
    return this.get<Page<I>>(`/v1/${this.kind}?${query.toString().replace(/\+/g, "%20")}`, options);
  }

  /**
   * Every live lease of this kind under `prefix`, page after page (`limit`
   * is the page size). One live for the whole scan is yielded exactly once.
   */
  async *listAll(options: Omit<ListOptions, "cursor"> = {}): AsyncGenerator<I, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: Page<I> = await this.list({ ...options, cursor });
      yield* page.items;
      cursor = page.next;
    } while (cursor !== null);
  }
}

/** A kind whose changes the broker records: locks, semaphores, rwlocks. */
export class RecordedResources<S> extends Resources<S> {
  /**
   * `GET /v1/{kind}/{key}/history`: the latest events (grants, releases,
   * expiries, handoffs, force-releases), newest first; `limit` 1 to 1000
   * (default: the broker's 100).
   */
  async history(key: string, options: CallOptions & { limit?: number | undefined } = {}): Promise<LockEvent[]> {
    const query = options.limit === undefined ? "" : `?limit=${options.limit}`;
    const answer = await this.get<LockHistory>(this.path(key, `/history${query}`), options);
    return answer.events;
  }
}

/** `client.locks`. */
export class Locks extends RecordedResources<LockStatus> {
  /**
   * `POST /v1/locks/{key}/validate`: whether `token` is the live grant of
   * `key` now — the check before a fenced write (the answer may be stale on
   * arrival: the resource itself should refuse tokens older than one it
   * has seen).
   */
  validate(key: string, token: number, options: CallOptions = {}): Promise<Validity> {
    return this.caller.call<Validity>({
      method: "POST",
      path: this.path(key, "/validate"),
      body: { token },
      idempotent: true,
      signal: options.signal,
      timeoutMs: options.timeoutMs,
    });
  }
}
