/**
 * `client.elections`: the election reads (`resources.ts`) and `observe`,
 * the changes of leader as an async iterator that reconnects when its
 * connection breaks. Each connection starts with the leadership at that
 * moment, so after a reconnect a leadership already yielded is skipped and
 * one that changed meanwhile is yielded.
 */
import { LockbrokerError } from "./errors.js";
import { Resources } from "./resources.js";
import { type RawEvent, SseStream, type SseOptions } from "./sse.js";
import type { ElectionStatus } from "./types.js";

/** `client.elections`. */
export class Elections extends Resources<ElectionStatus> {
  /**
   * `GET /v1/elections/{name}/observe`: the leadership now, then each
   * change of leader (`leader`, `term` and `expires_at` null while nobody
   * leads). Connected when this resolves.
   */
  async observe(name: string, options: SseOptions = {}): Promise<SseStream<ElectionStatus>> {
    const path = this.path(name, "/observe");
    let last: string | null = null;
    const stream = new SseStream<ElectionStatus>(
      {
        open: (_lastId, signal) =>
          this.caller.open({ method: "GET", path, idempotent: true, signal, headers: { accept: "text/event-stream" } }),
        item: (raw: RawEvent) => {
          if (raw.event !== "leader") return undefined;
          const status = parse(raw.data);
          const seen = `${status.leader ?? ""}\u0000${status.term ?? ""}`;
          if (seen === last) return undefined;
          last = seen;
          return status;
        },
      },
      this.caller.retry,
      options,
      null,
    );
    await stream.connect();
    return stream;
  }
}

function parse(data: string): ElectionStatus {
  try {
    return JSON.parse(data) as ElectionStatus;
  } catch (err) {
    throw new LockbrokerError("unexpected_answer", `a leader event's data is not JSON: ${data.slice(0, 200)}`, { cause: err });
  }
}
