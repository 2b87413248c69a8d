/**
 * `GET /v1/events`: every change of the tenant's locks, semaphores and
 * rwlocks under a prefix, as an async iterator that resumes with
 * `Last-Event-ID` after a broken connection, so nothing the broker still
 * keeps is missed or seen twice.
 */
import type { Caller } from "./caller.js";
import { LockbrokerError } from "./errors.js";
import { type RawEvent, SseStream, type SseOptions } from "./sse.js";
import type { StreamEvent } from "./types.js";

/** The broker's history no longer reaches back to where the stream resumed: changes were missed. */
export interface ResetEvent {
  event: "reset";
}

/** One item of an event stream: a change (`granted`, `released`, `expired`, `handed_off`, `force_released`) or a reset. */
export type ChangeEvent = StreamEvent | ResetEvent;

export interface EventsOptions extends SseOptions {
  /** Only storage keys that start with these bytes (matched literally). */
  prefix?: string | undefined;
  /** Resume after this event id; default: from now on. */
  after?: number | undefined;
}

const CHANGES = new Set(["granted", "released", "expired", "handed_off", "force_released"]);

/** Opens the stream; once this resolves, every later change is in it. */
export async function openEvents(caller: Caller, options: EventsOptions): Promise<SseStream<ChangeEvent>> {
  const path = `/v1/events?prefix=${encodeURIComponent(options.prefix ?? "")}`;
  const stream = new SseStream<ChangeEvent>(
    {
      open: (lastId, signal) =>
        caller.open({
          method: "GET",
          path,
          idempotent: true,
          signal,
          headers: { accept: "text/event-stream", ...(lastId === null ? {} : { "last-event-id": lastId }) },
        }),
      item: change,
    },
    caller.retry,
    options,
    options.after === undefined ? null : String(options.after),
  );
  await stream.connect();
  return stream;
}

function change(raw: RawEvent): ChangeEvent | undefined {
  if (raw.event === "reset") return { event: "reset" };
  if (!CHANGES.has(raw.event)) return undefined;
  try {
    return JSON.parse(raw.data) as StreamEvent;
  } catch (err) {
    throw new LockbrokerError("unexpected_answer", `an event's data is not JSON: ${raw.data.slice(0, 200)}`, { cause: err });
  }
}
