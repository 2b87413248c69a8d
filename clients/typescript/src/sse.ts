/**
 * Server-Sent Events, the wire format of `/v1/events` and an election's
 * `observe`: {@link SseParser} turns text as it arrives into events (the
 * HTML spec's rules that matter here: `event:`, `id:` and `data:` fields,
 * several `data:` lines joined by `\n`, `:` comments, a blank line ends an
 * event, `\n`, `\r\n` or `\r` end a line), and {@link SseStream} reads a
 * stream as an async iterator that reconnects, resuming after the last id,
 * when the connection ends, breaks or stays silent too long.
 */
import type { IncomingMessage } from "node:http";
import { StringDecoder } from "node:string_decoder";

import { LockbrokerError, UnreachableError } from "./errors.js";
import { type RetryPolicy, retryDelay } from "./retry.js";
import { sleep } from "./time.js";

/** One dispatched event. */
export interface RawEvent {
  /** `message` when the event named none. */
  event: string;
  /** Its `id:` field, if it had one. */
  id: string | null;
  data: string;
}

/** An event longer than this ends the stream, so a broken one cannot grow the buffer without bound. */
export const MAX_EVENT_CHARS = 1 << 20;

/** The parser's state between chunks. */
export class SseParser {
  private line = "";
  private afterCr = false;
  private event: string | null = null;
  private id: string | null = null;
  private data: string | null = null;

  /** Feeds a chunk of text; the events it completed, in order. */
  feed(text: string): RawEvent[] {
    const events: RawEvent[] = [];
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      const afterCr = this.afterCr;
      this.afterCr = c === 13;
      if (c !== 10 && c !== 13) continue;
      if (c === 10 && afterCr) {
        // The `\n` of a `\r\n` whose `\r` ended the line already.
        start = i + 1;
        continue;
      }
      const line = this.line + text.slice(start, i);
      this.line = "";
      start = i + 1;
      const event = this.endLine(line);
      if (event) events.push(event);
    }
    this.line += text.slice(start);
    if (this.line.length + (this.data?.length ?? 0) > MAX_EVENT_CHARS) {
      throw new LockbrokerError("unexpected_answer", `an event of the stream is longer than ${MAX_EVENT_CHARS} characters`);
    }
    return events;
  }

  private endLine(line: string): RawEvent | null {
    if (line === "") {
      const event = this.data === null ? null : { event: this.event ?? "message", id: this.id, data: this.data };
      this.event = null;
      this.id = null;
      this.data = null;
      return event;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "id") this.id = value;
    else if (field === "data") this.data = this.data === null ? value : `${this.data}\n${value}`;
    return null;
  }
}

/** How an {@link SseStream} opens its connection and reads its events. */
export interface SseSource<T> {
  /** Opens the stream, resuming after `lastId` when there is one; `signal` closes it. */
  open(lastId: string | null, signal: AbortSignal): Promise<IncomingMessage>;
  /** The item for an event, or undefined to skip it. */
  item(raw: RawEvent): T | undefined;
}

export interface SseOptions {
  /** Closes the stream (the iteration ends). */
  signal?: AbortSignal | undefined;
  /** A connection silent for this long (the broker's keep-alives included) is reopened; default 45 000 ms. */
  idleTimeoutMs?: number | undefined;
}

/**
 * A stream of events that reconnects: when the connection ends, breaks, or
 * stays silent past the idle timeout, it is opened again, after a backoff,
 * resuming after the last event id received. It gives up (throws
 * `UnreachableError`) when the stream could not be opened again, or when
 * connections ended before anything arrived as many times in a row as the
 * retry policy's `attempts`. Iterate it once; leaving the loop (or
 * `close()`, or the signal) closes it.
 */
export class SseStream<T> implements AsyncIterable<T>, AsyncDisposable {
  private readonly closing = new AbortController();
  private response: IncomingMessage | null = null;
  private last: string | null;

  /** @internal Opened by the client (`events`, `observe`), connected before it is handed out. */
  constructor(
    private readonly source: SseSource<T>,
    private readonly retry: RetryPolicy,
    private readonly options: SseOptions,
    lastId: string | null,
  ) {
    this.last = lastId;
    options.signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** @internal Opens the first connection: once it resolves, every later change is in the stream. */
  async connect(): Promise<IncomingMessage> {
    const response = await this.source.open(this.last, this.closing.signal);
    const idle = this.options.idleTimeoutMs ?? 45_000;
    response.setTimeout(idle, () => response.destroy(new Error(`the stream was silent for ${idle} ms`)));
    this.response = response;
    return response;
  }

  /** The id of the last event received: where a new connection resumes. */
  get lastId(): string | null {
    return this.last;
  }

  /** Closes the connection; the iteration ends. */
  close(): void {
    this.closing.abort();
    this.response?.destroy();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    let silentEnds = 0;
    try {
      while (!this.closing.signal.aborted) {
        let response: IncomingMessage;
        try {
          response = this.response ?? (await this.connect());
        } catch (err) {
          if (this.closing.signal.aborted) return;
          throw err;
        }
        const decoder = new StringDecoder("utf8");
        const parser = new SseParser();
        let received = false;
        let why = "the broker ended the stream";
        try {
          for await (const chunk of response) {
            received = true;
            for (const raw of parser.feed(decoder.write(chunk as Buffer))) {
              if (raw.id !== null) this.last = raw.id;
              const item = this.source.item(raw);
              if (item !== undefined) yield item;
            }
          }
        } catch (err) {
          if (err instanceof LockbrokerError) throw err;
          why = err instanceof Error ? err.message : String(err);
        }
        response.destroy();
        this.response = null;
        if (this.closing.signal.aborted) return;
        silentEnds = received ? 0 : silentEnds + 1;
        if (silentEnds >= this.retry.attempts) {
          throw new UnreachableError("unreachable", `the event stream ended ${silentEnds} times in a row before anything arrived: ${why}`);
        }
        try {
          await sleep(retryDelay(this.retry, silentEnds + 1, null), this.closing.signal);
        } catch {
          return;
        }
      }
    } finally {
      this.close();
    }
  }
}
