/**
 * The stand-ins CONFORMANCE.md allows for the scenarios where the network
 * must misbehave (C06, C09, C11, and the reconnections of C16, C19, C21): a
 * TCP forwarder to the real broker that the test can cut, silence, or stop
 * answering through, and an HTTP server whose answers the test scripts
 * (503s, 4xx, a closed connection), counting requests and forwarding the
 * rest to the real broker. The broker itself is never replaced.
 */
import * as http from "node:http";
import * as net from "node:net";

/** A TCP forwarder on 127.0.0.1 to `target` (`host:port`). */
export class Forwarder {
  private readonly server: net.Server;
  private readonly pairs = new Set<[net.Socket, net.Socket]>();
  private mode: "forward" | "silent" = "forward";
  private closing = false;
  /** Connections accepted so far. */
  accepted = 0;

  private constructor(private readonly target: { host: string; port: number }) {
    this.server = net.createServer((client) => this.accept(client));
  }

  /** Starts forwarding to the broker at `url` (`http://host:port`). */
  static async start(url: string): Promise<Forwarder> {
    const target = new URL(url);
    const forwarder = new Forwarder({ host: target.hostname, port: Number(target.port) });
    await new Promise<void>((resolve) => forwarder.server.listen(0, "127.0.0.1", resolve));
    return forwarder;
  }

  /** `http://127.0.0.1:PORT`. */
  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
  }

  /**
   * Stops forwarding anything, on every connection, old and new: they stay
   * open and silent (a partition that drops packets).
   */
  silence(): void {
    this.mode = "silent";
    for (const [client, upstream] of this.pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
    }
  }

  /**
   * Stops passing the broker's answers on the connections open now (new
   * ones forward as usual): what the broker sends them is held back.
   */
  holdAnswers(): void {
    for (const [client, upstream] of this.pairs) {
      upstream.unpipe(client);
      upstream.pause();
    }
  }

  /** Closes every connection open now (new ones forward as usual). */
  cut(): void {
    for (const [client, upstream] of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  /**
   * Stops listening and closes every connection. A connection a client
   * opens meanwhile (a stream reconnecting) is closed too: the server's
   * close waits for every connection it accepted.
   */
  async close(): Promise<void> {
    this.closing = true;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.cut();
    await closed;
  }

  private accept(client: net.Socket): void {
    if (this.closing) {
      client.destroy();
      return;
    }
    this.accepted++;
    client.on("error", () => undefined);
    if (this.mode === "silent") {
      client.pause();
      this.pairs.add([client, new net.Socket()]);
      return;
    }
    const upstream = net.connect(this.target.port, this.target.host);
    upstream.on("error", () => client.destroy());
    const pair: [net.Socket, net.Socket] = [client, upstream];
    this.pairs.add(pair);
    const forget = (): void => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", forget);
    upstream.on("close", forget);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

/** A request a {@link StandIn} received. */
export interface Received {
  method: string;
  path: string;
  body: string;
  at: number;
}

/** What a {@link StandIn} does with a request: answer it, forward it, or hang up. */
export type Script =
  | { status: number; body?: unknown; headers?: Record<string, string> }
  | "forward"
  | "hang-up";

/**
 * An HTTP server whose answers the test scripts: `script` decides for each
 * request (given it and its number, from 1) and `received` keeps them all.
 */
export class StandIn {
  readonly received: Received[] = [];
  private readonly server: http.Server;

  private constructor(
    private readonly broker: string | null,
    private readonly script: (request: Received, n: number) => Script,
  ) {
    this.server = http.createServer((req, res) => void this.handle(req, res));
  }

  /** Starts one; `broker` is where "forward" sends requests. */
  static async start(script: (request: Received, n: number) => Script, broker: string | null = null): Promise<StandIn> {
    const standIn = new StandIn(broker, script);
    await new Promise<void>((resolve) => standIn.server.listen(0, "127.0.0.1", resolve));
    return standIn;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
  }

  /** The requests whose path ends with `suffix`. */
  count(suffix: string): number {
    return this.received.filter((r) => r.path.split("?")[0]?.endsWith(suffix)).length;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const request: Received = { method: req.method ?? "", path: req.url ?? "", body: Buffer.concat(chunks).toString(), at: performance.now() };
    this.received.push(request);
    const action = this.script(request, this.received.length);
    if (action === "hang-up") {
      req.socket.destroy();
      return;
    }
    if (action === "forward") {
      if (this.broker === null) throw new Error("this stand-in forwards nowhere");
      const upstream = http.request(new URL(request.path, this.broker), { method: request.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      upstream.on("error", () => req.socket.destroy());
      upstream.end(request.body);
      return;
    }
    res.writeHead(action.status, { "content-type": "application/json", ...action.headers });
    res.end(action.body === undefined ? "" : JSON.stringify(action.body));
  }
}

/** The broker's error envelope. */
export function errorBody(code: string, message = code, retryAfterMs?: number): unknown {
  return { error: { code, message, ...(retryAfterMs === undefined ? {} : { retry_after_ms: retryAfterMs }) } };
}

/** A port nothing listens on (bound, then released). */
export async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
