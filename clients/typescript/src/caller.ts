/**
 * The one place where a call is sent, timed, retried and its answer
 * decoded: one broker, one bearer token. Every public call of the client
 * ends here.
 *
 * Deadline: each call has one, `timeoutMs` from its start (default: the
 * broker's `wait_ms` plus the client's slack); each try gets only what is
 * left of it, and a retry whose delay would end past it is not made: the
 * last failure is thrown at once. Abort: the caller's `AbortSignal` cuts a
 * call short at any point (its reason is thrown).
 */
import type { IncomingMessage } from "node:http";

import {
  DeadlineExceededError,
  LockbrokerError,
  OutcomeUnknownError,
  TlsError,
  UnreachableError,
  errorFromAnswer,
} from "./errors.js";
import { DEFAULT_RETRY, type RetryPolicy, retryDelay } from "./retry.js";
import { now, sleep } from "./time.js";
import { ExchangeFailure, Transport, readBody } from "./transport.js";

/** What every call of the client accepts. */
export interface CallOptions {
  /** Cancels the call: it rejects with the signal's reason (an acquire gives back what it may have been granted). */
  signal?: AbortSignal | undefined;
  /** The call's whole time in ms, retries included (default: its wait plus the client's `slackMs`). */
  timeoutMs?: number | undefined;
}

/** One request, as the kinds and resources describe it. */
export interface Request {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** Path and query under the base URL. */
  path: string;
  /** The JSON body; a function makes it afresh for each try (1 for the first). */
  body?: unknown;
}

export interface CallSpec extends Request, CallOptions {
  /** Whether sending it twice is harmless (reads, renewals): then it is retried after a broken connection too. */
  idempotent: boolean;
  /** How long the broker may hold the request (a waiting acquire); added to the default deadline. */
  waitMs?: number | undefined;
  /** Tries for 503s and connection failures, overriding the client's policy (a renewal: 1). */
  attempts?: number | undefined;
  headers?: Record<string, string> | undefined;
}

/** How long an answer may take beyond the request's own wait by default (the broker bounds its database work by 2 s). */
export const DEFAULT_SLACK_MS = 10_000;

const USER_AGENT = "lockbroker-typescript/0.1.0";

/** Sends calls to one broker with one bearer token. */
export class Caller {
  constructor(
    readonly transport: Transport,
    private readonly bearer: string | undefined,
    readonly retry: RetryPolicy = DEFAULT_RETRY,
    readonly slackMs: number = DEFAULT_SLACK_MS,
  ) {}

  /** The same broker, pool and policy with another bearer token. */
  withBearer(bearer: string): Caller {
    return new Caller(this.transport, bearer, this.retry, this.slackMs);
  }

  /**
   * Sends `spec` under the retry policy and its deadline; the decoded JSON
   * of a 2xx answer.
   *
   * @throws LockbrokerError (by class: see errors.ts), or the signal's reason.
   */
  async call<T>(spec: CallSpec): Promise<T> {
    return this.exchange(spec, async (response, signal) => {
      const text = await readBody(response, signal);
      try {
        return (text ? JSON.parse(text) : {}) as T;
      } catch (err) {
        throw new LockbrokerError("unexpected_answer", `the broker answered ${response.statusCode} with what is not JSON: ${text.slice(0, 200)}`, {
          status: response.statusCode ?? null,
          cause: err,
        });
      }
    });
  }

  /**
   * Opens a stream (Server-Sent Events): the 2xx response once its headers
   * are in, its body unread. Only the wait for the headers is under the
   * deadline; the stream lasts until the broker ends it or `spec.signal`
   * aborts (which closes it).
   */
  async open(spec: CallSpec): Promise<IncomingMessage> {
    return this.exchange({ ...spec, idempotent: true, stream: true }, async (response) => response);
  }

  private async exchange<T>(
    spec: CallSpec & { stream?: boolean },
    accept: (response: IncomingMessage, signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const started = now();
    const deadline = started + (spec.timeoutMs ?? (spec.waitMs ?? 0) + this.slackMs);
    const attempts = Math.max(1, spec.attempts ?? this.retry.attempts);
    let failures = 0;
    let last: LockbrokerError | undefined;
    for (let tries = 1; ; tries++) {
      spec.signal?.throwIfAborted();
      const left = deadline - now();
      if (left <= 0) throw last ?? this.deadlineError(spec, started);
      // One signal for the try: the caller's, or the deadline. (Linked by
      // hand rather than with AbortSignal.any, so that a long-lived caller
      // signal does not collect a dependent signal per call.)
      const attempt = new AbortController();
      const signal = attempt.signal;
      const timer = setTimeout(() => attempt.abort(), left);
      const onAbort = (): void => attempt.abort(spec.signal?.reason);
      spec.signal?.addEventListener("abort", onAbort, { once: true });
      let streaming = false;
      let error: LockbrokerError;
      try {
        const response = await this.transport.send({
          method: spec.method,
          path: spec.path,
          headers: this.headers(spec),
          body: bodyOf(spec.body, tries),
          signal,
          pooled: spec.idempotent && !spec.stream,
        });
        const status = response.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          const accepted = await accept(response, signal);
          // A stream stays tied to the caller's signal for as long as it lasts.
          streaming = spec.stream === true;
          return accepted;
        }
        const text = await readBody(response, signal);
        error = errorFromAnswer(status, text, header(response, "retry-after"));
      } catch (err) {
        if (!(err instanceof ExchangeFailure)) throw err;
        if (spec.signal?.aborted) throw spec.signal.reason;
        error = this.failure(spec, err, started);
        if (error instanceof OutcomeUnknownError || error instanceof TlsError) throw error;
        // The deadline passed during the try: the last answer, if any, says more than "no answer".
        if (err.kind === "aborted") throw last ?? error;
      } finally {
        clearTimeout(timer);
        if (!streaming) spec.signal?.removeEventListener("abort", onAbort);
      }
      const throttled = error.status === 429;
      if (!throttled && error.status !== 503 && !(error instanceof UnreachableError)) throw error;
      if (!throttled && ++failures >= attempts) throw error;
      const delay = retryDelay(this.retry, throttled ? tries : failures, error.retryAfterMs);
      if (now() + delay >= deadline) throw error;
      last = error;
      await sleep(delay, spec.signal);
    }
  }

  /** The error for an exchange that got no answer. */
  private failure(spec: CallSpec, failure: ExchangeFailure, started: number): LockbrokerError {
    const what = `${spec.method} ${spec.path.split("?")[0]}`;
    const cause = failure.cause ?? failure;
    if (failure.kind === "tls") return new TlsError("tls", `${what}: TLS handshake failed: ${failure.message}`, { cause });
    if (failure.sent && !spec.idempotent) {
      return new OutcomeUnknownError(
        "outcome_unknown",
        `${what}: the connection ${failure.kind === "aborted" ? "timed out" : "broke"} after the request was sent; it may or may not have taken effect (${failure.message})`,
        { cause },
      );
    }
    if (failure.kind === "aborted") return this.deadlineError(spec, started);
    return new UnreachableError("unreachable", `${what}: cannot reach the broker at ${this.transport.url.origin}: ${failure.message}`, { cause });
  }

  private deadlineError(spec: CallSpec, started: number): DeadlineExceededError {
    return new DeadlineExceededError(
      "deadline_exceeded",
      `${spec.method} ${spec.path.split("?")[0]}: no answer within ${Math.round(now() - started)} ms`,
    );
  }

  private headers(spec: CallSpec): Record<string, string> {
    const headers: Record<string, string> = {
      "user-agent": USER_AGENT,
      accept: "application/json",
      ...spec.headers,
    };
    if (this.bearer !== undefined) headers.authorization = `Bearer ${this.bearer}`;
    if (spec.body !== undefined) headers["content-type"] = "application/json";
    return headers;
  }
}

function bodyOf(body: unknown, tries: number): string | undefined {
  if (body === undefined) return undefined;
  return JSON.stringify(typeof body === "function" ? (body as (tries: number) => unknown)(tries) : body);
}

function header(response: IncomingMessage, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
