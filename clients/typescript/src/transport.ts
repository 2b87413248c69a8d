/**
 * One HTTP exchange with the broker over `node:http` / `node:https`: send a
 * request, hand back the response once its headers are in, and when there
 * is none, say why and whether the request may have reached the broker.
 * Retries, deadlines and the meaning of statuses are the caller's
 * (`caller.ts`).
 *
 * Why not `fetch`: Node 20's global fetch takes no TLS options (a CA file,
 * a client certificate) without the `undici` package, and it does not tell
 * a connection that was never made from one that broke after the request
 * went out, which decides whether an acquire may be sent again. One
 * transport for every call keeps one behaviour for both.
 *
 * Connections: calls that are safe to repeat share a keep-alive pool (a
 * pooled connection the broker closed meanwhile fails after "sending", and
 * such a call is simply retried). Calls that must not be repeated (acquires,
 * releases) and streams get a connection of their own, so that a failure
 * after sending really is ambiguous and not a stale pooled socket.
 */
import * as http from "node:http";
import * as https from "node:https";
import { readFileSync } from "node:fs";
import type { Socket } from "node:net";

import { LockbrokerError } from "./errors.js";

/** TLS files for `https://` URLs (PEM paths). */
export interface TlsFiles {
  /** Trusted CAs instead of Node's bundled roots. */
  caFile?: string | undefined;
  /** A client certificate (mutual TLS), with its key. */
  clientCert?: string | undefined;
  clientKey?: string | undefined;
}

/** Why an exchange got no answer. */
export type FailureKind =
  /** The connection could not be made: nothing was sent. */
  | "not_sent"
  /** The connection broke after the request may have gone out. */
  | "broken"
  /** The TLS handshake failed (a certificate refused on either side). */
  | "tls"
  /** The exchange's signal aborted it (the caller, or a deadline). */
  | "aborted";

export class ExchangeFailure extends Error {
  constructor(
    readonly kind: FailureKind,
    /** Whether the request may have reached the broker. */
    readonly sent: boolean,
    message: string,
    cause?: unknown,
  ) {
    super(message, { cause });
    this.name = "ExchangeFailure";
  }
}

export interface Exchange {
  method: string;
  /** The path and query, after the base URL's own path. */
  path: string;
  headers: Record<string, string>;
  body?: string | undefined;
  signal: AbortSignal;
  /** Whether a pooled keep-alive connection may carry it. */
  pooled: boolean;
}

/** Error codes of a TLS handshake that failed (OpenSSL's verification codes and Node's). */
const TLS_CODES = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "CERT_SIGNATURE_FAILURE",
  "HOSTNAME_MISMATCH",
]);

function isTlsFailure(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && (TLS_CODES.has(code) || code.startsWith("ERR_SSL_") || code.startsWith("ERR_TLS_"));
}

/** A connection pool to one broker. */
export class Transport {
  readonly url: URL;
  private readonly https: boolean;
  private readonly prefix: string;
  private readonly tls: { ca?: Buffer; cert?: Buffer; key?: Buffer };
  private readonly agent: http.Agent;

  /**
   * @throws LockbrokerError `invalid_options` for a URL that is not
   * `http(s)://host[:port][/prefix]`, or a TLS file that cannot be read.
   */
  constructor(url: string, files: TlsFiles = {}) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new LockbrokerError("invalid_options", `not a broker URL: ${JSON.stringify(url)}`);
    }
    if ((parsed.protocol !== "http:" && parsed.protocol !== "https:") || !parsed.hostname || parsed.search || parsed.hash) {
      throw new LockbrokerError("invalid_options", `not an http(s)://host[:port] URL: ${JSON.stringify(url)}`);
    }
    if ((files.clientCert === undefined) !== (files.clientKey === undefined)) {
      throw new LockbrokerError("invalid_options", "a client certificate needs its key, and a key its certificate");
    }
    this.url = parsed;
    this.https = parsed.protocol === "https:";
    this.prefix = parsed.pathname.replace(/\/+$/, "");
    this.tls = {
      ...(files.caFile === undefined ? {} : { ca: read(files.caFile, "CA file") }),
      ...(files.clientCert === undefined ? {} : { cert: read(files.clientCert, "client certificate") }),
      ...(files.clientKey === undefined ? {} : { key: read(files.clientKey, "client key") }),
    };
    this.agent = this.https ? new https.Agent({ keepAlive: true, ...this.tls }) : new http.Agent({ keepAlive: true });
  }

  /**
   * Sends one request; resolves with the response once its headers are in
   * (its body is the caller's to read or stream).
   *
   * @throws ExchangeFailure when no response came.
   */
  send(exchange: Exchange): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      // Set once the connection is up (after the TLS handshake for https):
      // from then on, bytes of the request may have reached the broker.
      let connected = false;
      const options: https.RequestOptions = {
        protocol: this.url.protocol,
        hostname: this.url.hostname.replace(/^\[(.*)\]$/, "$1"),
        port: this.url.port || (this.https ? 443 : 80),
        path: this.prefix + exchange.path,
        method: exchange.method,
        headers: exchange.headers,
        signal: exchange.signal,
        agent: exchange.pooled ? this.agent : false,
        ...(this.https ? this.tls : {}),
      };
      const request = (this.https ? https : http).request(options);
      request.on("socket", (socket: Socket) => {
        if (request.reusedSocket || !socket.connecting) {
          connected = true;
        } else {
          socket.once(this.https ? "secureConnect" : "connect", () => {
            connected = true;
          });
        }
      });
      request.on("response", resolve);
      request.on("error", (err: Error) => reject(classify(err, connected, exchange.signal)));
      request.end(exchange.body);
    });
  }

  /** Closes the pooled connections. */
  close(): void {
    this.agent.destroy();
  }
}

/** Why `send` (or reading an answer) failed, from the error and what was known then. */
export function classify(err: unknown, connected: boolean, signal: AbortSignal): ExchangeFailure {
  if (err instanceof ExchangeFailure) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (signal.aborted) return new ExchangeFailure("aborted", connected, message, err);
  if (isTlsFailure(err)) return new ExchangeFailure("tls", connected, message, err);
  return new ExchangeFailure(connected ? "broken" : "not_sent", connected, message, err);
}

/** The whole body of a response, at most `limit` bytes (the rest is cut off). */
export async function readBody(response: http.IncomingMessage, signal: AbortSignal, limit = 1 << 20): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of response) {
      const buffer = chunk as Buffer;
      if (size < limit) chunks.push(buffer);
      size += buffer.length;
    }
  } catch (err) {
    throw classify(err, true, signal);
  }
  if (!response.complete) {
    throw new ExchangeFailure(signal.aborted ? "aborted" : "broken", true, "the answer was cut off");
  }
  return Buffer.concat(chunks).toString("utf8").slice(0, limit);
}

function read(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new LockbrokerError("invalid_options", `cannot read the ${what} ${path}: ${(err as Error).message}`, { cause: err });
  }
}
