// Conformance scenarios C20–C21 (clients/CONFORMANCE.md, "Transport"):
// mutual TLS, and cancellation of a waiting acquire.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, LockbrokerError, TlsError } from "../src/index.js";
import { client, env, eventually, key } from "./helpers.js";
import { Forwarder } from "./standins.js";

test("c20 mutual TLS: acquire and release with the CA and a client certificate; typed errors without them", async () => {
  const e = env();
  const tls = new Client({ url: e.tlsUrl, apiKey: e.apiKey, caFile: e.caFile, clientCert: e.clientCert, clientKey: e.clientKey });
  const k = key("c20");
  const lease = await tls.lock(k, { ttlMs: 10_000 });
  assert.equal((await client().locks.status(k)).owner, lease.owner, "the same database as the plain broker");
  assert.equal(await lease.release(), true);

  // The same from the environment, as Client.fromEnv reads it.
  const fromEnv = Client.fromEnv(
    {},
    {
      LOCKBROKER_URL: e.tlsUrl,
      LOCKBROKER_API_KEY: e.apiKey,
      LOCKBROKER_CA_FILE: e.caFile,
      LOCKBROKER_CLIENT_CERT: e.clientCert,
      LOCKBROKER_CLIENT_KEY: e.clientKey,
    },
  );
  assert.equal((await fromEnv.locks.status(k)).held, false);

  const refused = async (what: string, options: { caFile?: string; clientCert?: string; clientKey?: string }): Promise<LockbrokerError> => {
    const c = new Client({ url: e.tlsUrl, apiKey: e.apiKey, ...options });
    const started = performance.now();
    const err = await c.lock(key("c20"), { waitMs: 0 }).catch((x: unknown) => x);
    c.close();
    assert.ok(err instanceof LockbrokerError, `${what}: a typed error, got ${String(err)}`);
    assert.ok(performance.now() - started < 5000, `${what}: no hang`);
    assert.ok(["tls", "unreachable", "outcome_unknown"].includes(err.code), `${what}: a connection/TLS error, got ${err.code}: ${err.message}`);
    return err;
  };
  await refused("without a client certificate", { caFile: e.caFile });
  await refused("with the stranger's certificate", { caFile: e.caFile, clientCert: e.strangerCert, clientKey: e.strangerKey });
  const untrusted = await refused("without the CA file", { clientCert: e.clientCert, clientKey: e.clientKey });
  assert.ok(untrusted instanceof TlsError, `the broker's certificate is not trusted: ${untrusted.message}`);
  tls.close();
  fromEnv.close();
});

test("c21 an acquire aborted while it waits leaves no lease behind", async () => {
  const c = client();
  const k = key("c21");
  const holder = await c.lock(k, { ttlMs: 10_000 });
  const controller = new AbortController();
  const waiting = c.lock(k, { ttlMs: 10_000, waitMs: 20_000, signal: controller.signal });
  await eventually("the acquire waits", async () => (await c.locks.status(k)).waiters === 1);
  const started = performance.now();
  controller.abort();
  await assert.rejects(waiting, { name: "AbortError" });
  assert.ok(performance.now() - started < 2000, "the abort ends the call at once");
  await holder.release();
  await eventually("the key is free", async () => {
    const status = await c.locks.status(k);
    return !status.held && status.waiters === 0;
  });
  c.close();
});

test("c21 an acquire aborted after it was granted, with the answer still on its way, gives the lease back", async () => {
  const direct = client();
  const forwarder = await Forwarder.start(direct.url);
  const c = client({ url: forwarder.url });
  const k = key("c21");
  const owner = `${key("c21-owner")}`;
  const holder = await direct.lock(k, { ttlMs: 10_000 });
  const controller = new AbortController();
  const waiting = c.lock(k, { ttlMs: 10_000, waitMs: 20_000, owner, signal: controller.signal });
  await eventually("the acquire waits", async () => (await direct.locks.status(k)).waiters === 1);
  forwarder.holdAnswers();
  await holder.release();
  await eventually("granted to the waiting acquire, its answer held back", async () => (await direct.locks.status(k)).owner === owner);
  controller.abort();
  await assert.rejects(waiting, { name: "AbortError" });
  await eventually("the client gave the grant back", async () => !(await direct.locks.status(k)).held);
  const history = await direct.locks.history(k, { limit: 1 });
  assert.equal(history[0]?.event, "released");
  assert.equal(history[0]?.owner, owner);
  await forwarder.close();
  c.close();
  direct.close();
});
