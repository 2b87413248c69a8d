/**
 * What the suite shares: the brokers the harness hands it (clients/CONFORMANCE.md),
 * fresh keys, `eventually` (wait for a condition, never for a time), and the
 * small stand-ins CONFORMANCE.md allows where the network must misbehave
 * (`standins.ts`).
 *
 * The suite runs from tests/typescript_client.rs, which starts the brokers
 * and sets the variables. Without them every broker test fails, saying so:
 * nothing is skipped.
 */
import { randomBytes } from "node:crypto";

import { Client, type ClientOptions } from "../src/index.js";

/** The variables of CONFORMANCE.md. */
export interface Env {
  url: string;
  apiKey: string;
  otherApiKey: string;
  limitedApiKey: string;
  adminToken: string;
  tlsUrl: string;
  caFile: string;
  clientCert: string;
  clientKey: string;
  strangerCert: string;
  strangerKey: string;
}

const NAMES: Record<keyof Env, string> = {
  url: "LOCKBROKER_URL",
  apiKey: "LOCKBROKER_API_KEY",
  otherApiKey: "LOCKBROKER_OTHER_API_KEY",
  limitedApiKey: "LOCKBROKER_LIMITED_API_KEY",
  adminToken: "LOCKBROKER_ADMIN_TOKEN",
  tlsUrl: "LOCKBROKER_TLS_URL",
  caFile: "LOCKBROKER_TEST_CA_FILE",
  clientCert: "LOCKBROKER_TEST_CLIENT_CERT",
  clientKey: "LOCKBROKER_TEST_CLIENT_KEY",
  strangerCert: "LOCKBROKER_TEST_STRANGER_CERT",
  strangerKey: "LOCKBROKER_TEST_STRANGER_KEY",
};

/**
 * The brokers' variables.
 *
 * @throws when one is unset: the suite needs the brokers of
 * tests/typescript_client.rs (`cargo test -p lockbroker-tests --test typescript_client`).
 */
export function env(): Env {
  const missing = Object.values(NAMES).filter((name) => !process.env[name]);
  if (missing.length > 0) {
    throw new Error(
      `${missing.join(", ")} unset: this test needs the brokers that tests/typescript_client.rs starts ` +
        "(cargo test -p lockbroker-tests --test typescript_client)",
    );
  }
  return Object.fromEntries(Object.entries(NAMES).map(([field, name]) => [field, process.env[name]])) as unknown as Env;
}

/** A client of the plain broker as tenant `default` (or as `options` say). */
export function client(options: Partial<ClientOptions> = {}): Client {
  const e = env();
  return new Client({ url: e.url, apiKey: e.apiKey, ...options });
}

/** The admin's client of the plain broker. */
export function admin(): Client {
  return client({ apiKey: env().adminToken });
}

/** A key no other test (nor another run, nor another language's suite) uses. */
export function key(name: string): string {
  return `ts-${name}-${randomBytes(6).toString("hex")}`;
}

/**
 * Polls `check` until it returns something other than undefined or false,
 * and returns it.
 *
 * @throws when `timeoutMs` passes first, naming `what`.
 */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      last = err;
    }
    if (performance.now() > deadline) {
      throw new Error(`not within ${timeoutMs} ms: ${what}${last ? ` (last error: ${String(last)})` : ""}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Resolves with the signal's reason when it aborts, or rejects after `timeoutMs`. */
export function aborted(signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      resolve(signal.reason);
      return;
    }
    const timer = setTimeout(() => reject(new Error(`the signal did not abort within ${timeoutMs} ms`)), timeoutMs);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve(signal.reason);
      },
      { once: true },
    );
  });
}

/** The next item of `items` that `accept` takes, within `timeoutMs` (the error lists the items passed over). */
export async function nextMatching<T>(items: AsyncIterator<T>, accept: (item: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const passed: T[] = [];
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no matching item within ${timeoutMs} ms; passed over: ${JSON.stringify(passed)}`)), timeoutMs);
  });
  try {
    for (;;) {
      const next = await Promise.race([items.next(), timeout]);
      if (next.done) throw new Error(`the stream ended; passed over: ${JSON.stringify(passed)}`);
      if (accept(next.value)) return next.value;
      passed.push(next.value);
    }
  } finally {
    clearTimeout(timer);
  }
}
