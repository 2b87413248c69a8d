// Drives the console (/ui/) in Debian's chromium against a real broker
// (started by tests/console.rs, which took job-1, job-2, other-1, a
// semaphore, an rwlock and an election for tenant LB_KEY, and opened the
// sessions nightly-batch, holding the locks batch-a and batch-b,
// nightly-report and adhoc-1). It makes contention itself, through the
// API, for the contention views: hot-1 held, tried, waited for and handed
// off, and two owners that wait for each other's key (not sessions: the
// broker refuses a wait that would close a cycle of sessions). Every step waits
// on a condition (playwright's auto-waiting locators, waitForFunction, an
// API answer asked again), never for a fixed time. Exits non-zero on the
// first failed check.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { inflateSync } from 'node:zlib';
import { chromium } from 'playwright-core';

const base = process.env.LB_URL;
const apiBase = process.env.LB_API ?? base;
const key = process.env.LB_KEY;
const admin = process.env.LB_ADMIN;
// A shadow candidate for tenant LB_KEY's (a .wasm that stores keys with
// `boom` as `renamed/KEY`, and agrees on every other key).
const shadowWasm = process.env.LB_SHADOW_WASM;
const executablePath = process.env.LB_CHROMIUM ?? '/usr/bin/chromium';
assert.ok(base && key && admin && shadowWasm, 'LB_URL, LB_KEY, LB_ADMIN and LB_SHADOW_WASM are required');

/// A call to the broker's API from here, expecting 2xx (`wasm`: a
/// component's bytes as the body).
async function api(path, { method = 'GET', secret = key, body, wasm } = {}) {
  const type = wasm ? { 'Content-Type': 'application/wasm' } : body ? { 'Content-Type': 'application/json' } : {};
  const res = await fetch(apiBase + path, {
    method,
    headers: { Authorization: `Bearer ${secret}`, ...type },
    body: wasm ?? (body && JSON.stringify(body)),
  });
  const json = await res.json();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

/// `POST path` with `body` (as LB_KEY), whatever it answers: its status
/// and JSON. Waiting acquires are kept in `pending`, to be settled before
/// the end (the script cannot end while one waits).
const pending = [];
const giveUp = new AbortController(); // A failed run leaves nothing waiting.
function attempt(path, body) {
  const answer = fetch(apiBase + path, {
    method: 'POST',
    signal: giveUp.signal,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  }).then(async (res) => [res.status, await res.json()]);
  pending.push(answer);
  return answer;
}

/// Asks `GET path` again until `check(answer)` holds (15 s at most).
async function until(path, check, what) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const answer = await api(path);
    if (check(answer)) return answer;
    assert.ok(Date.now() < deadline, `${what}: ${JSON.stringify(answer)}`);
    await new Promise((resolve) => { setTimeout(resolve, 50); });
  }
}

/// A PNG (as page.screenshot makes them: 8-bit RGB or RGBA, not
/// interlaced) decoded: its width, height, bytes per pixel and pixels.
function decodePng(png) {
  assert.equal(png.toString('latin1', 1, 4), 'PNG', 'a PNG');
  let [width, height, bpp] = [0, 0, 0];
  const data = [];
  for (let at = 8; at < png.length;) {
    const length = png.readUInt32BE(at);
    const type = png.toString('latin1', at + 4, at + 8);
    const chunk = png.subarray(at + 8, at + 8 + length);
    if (type === 'IHDR') {
      [width, height] = [chunk.readUInt32BE(0), chunk.readUInt32BE(4)];
      assert.ok(chunk[8] === 8 && [2, 6].includes(chunk[9]) && chunk[12] === 0, 'an 8-bit RGB(A) PNG, not interlaced');
      bpp = chunk[9] === 6 ? 4 : 3;
    } else if (type === 'IDAT') {
      data.push(chunk);
    }
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(data));
  const stride = width * bpp;
  const pixels = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y += 1) {
    const filter = raw[y * (stride + 1)];
    for (let x = 0; x < stride; x += 1) {
      const a = x >= bpp ? pixels[y * stride + x - bpp] : 0;
      const b = y > 0 ? pixels[(y - 1) * stride + x] : 0;
      const c = x >= bpp && y > 0 ? pixels[(y - 1) * stride + x - bpp] : 0;
      const p = a + b - c;
      const paeth = Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c) ? a
        : Math.abs(p - b) <= Math.abs(p - c) ? b : c;
      const predicted = [0, a, b, (a + b) >> 1, paeth][filter];
      pixels[y * stride + x] = (raw[y * (stride + 1) + 1 + x] + predicted) & 0xff;
    }
  }
  return { width, height, bpp, pixels };
}

/// How many pixels of a screenshot are within `near` of `rgb`, and how
/// many are not of its commonest colour (the background).
function pixelsOf(png, rgb, near = 40) {
  const { width, height, bpp, pixels } = decodePng(png);
  let matching = 0;
  const colours = new Map();
  for (let i = 0; i < width * height * bpp; i += bpp) {
    const [r, g, b] = pixels.subarray(i, i + 3);
    if (Math.hypot(r - rgb[0], g - rgb[1], b - rgb[2]) <= near) matching += 1;
    const colour = (r << 16) | (g << 8) | b;
    colours.set(colour, (colours.get(colour) ?? 0) + 1);
  }
  const all = width * height;
  return { matching, inked: all - Math.max(...colours.values()), all };
}

/// The status and error code of a `GET path` expected to fail.
async function apiError(path) {
  const res = await fetch(apiBase + path, { headers: { Authorization: `Bearer ${key}` } });
  return [res.status, (await res.json()).error?.code];
}

/// Asks tests/console.rs to `cut` or `restore` the page's connections.
const stdin = createInterface({ input: process.stdin });
const answers = stdin[Symbol.asyncIterator]();
async function control(command) {
  console.log(`@@ ${command}`);
  assert.equal((await answers.next()).value, 'ok', `${command} done`);
}

function step(name) {
  console.log(`console.mjs: ${name}`);
}

/// With LB_SCREENSHOTS=DIR, a picture of the page at each step, to look at.
async function shot(page, name) {
  if (process.env.LB_SCREENSHOTS) await page.screenshot({ path: `${process.env.LB_SCREENSHOTS}/${name}.png`, fullPage: true });
}

/// The console's colours (style.css, light): a chart's first line, a cycle.
const ACCENT = [0x1f, 0x5f, 0x99];
const DANGER = [0xa3, 0x23, 0x1c];
const LEASE = { ttl_ms: 120_000 };

/// One round of contention on hot-1 (free before and after): a holder, a
/// try refused, a waiter handed the lease by the holder's release.
async function contendOnce(n) {
  const holder = await api('/v1/locks/hot-1/acquire', { method: 'POST', body: { owner: `holder-${n}`, ...LEASE } });
  const [refused, why] = await attempt('/v1/locks/hot-1/acquire', { owner: `try-${n}`, ...LEASE, wait_ms: 0 });
  assert.equal(refused, 409, JSON.stringify(why));
  const waiter = attempt('/v1/locks/hot-1/acquire', { owner: `waiter-${n}`, ...LEASE, wait_ms: 60_000 });
  await until('/v1/locks/hot-1/waiters', (q) => q.waiters.length === 1, 'the waiter queues');
  await api('/v1/locks/hot-1/release', { method: 'POST', body: { owner: holder.owner, token: holder.token } });
  const [status, lease] = await waiter;
  assert.equal(status, 200, JSON.stringify(lease));
  await api('/v1/locks/hot-1/release', { method: 'POST', body: { owner: lease.owner, token: lease.token } });
}

/// In the page: each chart of the overview named in `ids` has a line with
/// a point above its zero (a value over 0), and the grants chart at least
/// two points.
function chartsHaveData(ids) {
  const plotted = (figure) => {
    const plot = figure.querySelector('rect.plot');
    const zero = Number(plot.getAttribute('y')) + Number(plot.getAttribute('height'));
    const points = [...figure.querySelectorAll('path.line')].map((path) => path.getAttribute('d').match(/[\d.]+,[\d.]+/g) ?? []);
    return { points: points.flat().length, above: points.flat().some((p) => Number(p.split(',')[1]) < zero - 0.5) };
  };
  const figures = ids.map((id) => document.querySelector(`figure[data-chart="${id}"]`));
  return figures.every((f) => f && plotted(f).above) && plotted(document.querySelector('figure[data-chart="grants"]')).points >= 2;
}

/// The contention views, with contention made through the API: the
/// overview's charts, the hot keys, a key's queue and history, the
/// wait-for graph with a cycle. Leaves nothing held or waiting.
async function contention(page, { row, cell, fact, noHorizontalScroll }) {
  step('the overview draws grants, handoffs, refusals, wait p99 and held leases as they happen');
  await page.goto(`${base}/ui/#/overview`);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'Overview' }).getAttribute('aria-current'), 'page');
  await page.locator('figure[data-chart]').nth(4).waitFor();
  // Rounds of contention until the charts have drawn them (the overview
  // asks every 2 s for the last ten seconds).
  const rates = ['grants', 'handoffs', 'refusals', 'wait'];
  for (let n = 0; !(await page.evaluate(chartsHaveData, rates)); n += 1) {
    assert.ok(n < 100, 'the charts show the contention within 100 rounds');
    await contendOnce(n);
  }
  // The broker counts held leases every 15 s (at its start, before
  // tests/console.rs took any, then again).
  await page.waitForFunction(chartsHaveData, ['held'], { timeout: 20_000 });
  for (const [id, title] of [['grants', 'Grants per second'], ['handoffs', 'Handoffs per second'],
    ['refusals', 'Refusals per second'], ['wait', 'Wait p99']]) {
    const label = await page.locator(`figure[data-chart="${id}"] svg`).getAttribute('aria-label');
    const [, highest] = label.match(/^.+ over the last 5 minutes: [\d.]+ now \(highest ([\d.]+)\)\.$/) ?? [];
    assert.ok(label.startsWith(title) && Number(highest) > 0, `${id}: its text alternative says its values: ${label}`);
  }
  const held = await page.locator('figure[data-chart="held"] svg').getAttribute('aria-label');
  const locks = Number(held.match(/lock (\d+) now/)?.[1]);
  assert.ok(locks > 0, `the held chart counts the locks held: ${held}`);
  await page.locator('figure[data-chart="held"] figcaption', { hasText: `lock ${locks}` }).waitFor();
  // The picture: the grants chart's line is drawn above its zero line.
  const plot = await page.locator('figure[data-chart="grants"] rect.plot').boundingBox();
  const png = await page.screenshot({ clip: { x: plot.x, y: plot.y, width: plot.width, height: plot.height - 4 } });
  const ink = pixelsOf(png, ACCENT);
  assert.ok(ink.matching >= 20, `the grants line is drawn in the accent colour above zero: ${JSON.stringify(ink)}`);
  const whole = pixelsOf(await page.locator('.charts').screenshot(), ACCENT);
  assert.ok(whole.inked > whole.all / 50 && whole.matching > 100, `the charts are not blank: ${JSON.stringify(whole)}`);
  await noHorizontalScroll('overview at 1280px');
  await shot(page, 'overview');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('overview at 360px');
  await shot(page, 'overview-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  step('hot-1 is held and waited for in order; two owners wait for each other');
  const holder = await api('/v1/locks/hot-1/acquire', { method: 'POST', body: { owner: 'hot-holder', ...LEASE } });
  const [refused] = await attempt('/v1/locks/hot-1/acquire', { owner: 'hot-try', ...LEASE, wait_ms: 0 });
  assert.equal(refused, 409);
  const waiting = [];
  for (const [i, owner] of ['waiter-a', 'waiter-b', 'waiter-c'].entries()) {
    waiting.push(attempt('/v1/locks/hot-1/acquire', { owner, ...LEASE, wait_ms: 120_000, priority: 2 - i }));
    await until('/v1/locks/hot-1/waiters', (q) => q.waiters.length === i + 1, `${owner} queues`);
  }
  const x = await api('/v1/locks/cyc-a/acquire', { method: 'POST', body: { owner: 'cycle-x', ...LEASE } });
  const y = await api('/v1/locks/cyc-b/acquire', { method: 'POST', body: { owner: 'cycle-y', ...LEASE } });
  const crossed = [attempt('/v1/locks/cyc-b/acquire', { owner: 'cycle-x', ...LEASE, wait_ms: 120_000 }),
    attempt('/v1/locks/cyc-a/acquire', { owner: 'cycle-y', ...LEASE, wait_ms: 120_000 })];
  await until('/v1/waits-for', (g) => g.cycles.length === 1 && g.edges.length === 5, 'the cycle and hot-1 in the graph');

  step('the hot keys list hot-1 first, with its counts');
  await page.getByRole('link', { name: 'Hot keys', exact: true }).click();
  await page.getByRole('heading', { name: 'Hot keys' }).waitFor();
  await page.getByLabel('Window').selectOption('300');
  assert.match(page.url(), /#\/hot\?window=300$/);
  const hot = (await api('/v1/contention?window_s=300&top=100')).keys;
  assert.equal(hot[0].storage_key, 'hot-1', `hot-1 is the most contended: ${JSON.stringify(hot)}`);
  assert.ok(hot[0].handoffs > 0 && hot[0].refusals > 0 && hot[0].waiters === 3, JSON.stringify(hot[0]));
  await page.locator('tbody tr').first().locator('td[data-label="Key"]', { hasText: /^hot-1$/ }).waitFor();
  for (const [label, field] of [['Grants', 'grants'], ['Handoffs', 'handoffs'], ['Refusals', 'refusals'], ['Waiting now', 'waiters']]) {
    await cell('hot-1', label, String(hot[0][field]));
  }
  await cell('hot-1', 'Kind', 'lock');
  await cell('hot-1', 'Held by', 'hot-holder');
  await page.getByLabel('Key prefix').fill('cyc-');
  await page.getByRole('button', { name: 'Filter' }).click();
  await row('hot-1').waitFor({ state: 'detached' });
  await row('cyc-a').waitFor();
  assert.match(page.url(), /#\/hot\?prefix=cyc-&window=300$/);
  await page.getByLabel('Key prefix').fill('');
  await page.getByRole('button', { name: 'Filter' }).click();
  await noHorizontalScroll('hot keys at 1280px');
  await shot(page, 'hot-keys');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('hot keys at 360px');
  await shot(page, 'hot-keys-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  step("hot-1's page shows its queue in order and its history");
  await page.getByRole('link', { name: 'hot-1', exact: true }).first().click();
  await page.getByRole('heading', { name: 'Lock hot-1' }).waitFor();
  const queue = await api('/v1/locks/hot-1/waiters');
  assert.deepEqual(queue.waiters.map((w) => w.owner), ['waiter-a', 'waiter-b', 'waiter-c']);
  const owners = () => page.locator('tbody td[data-label="Owner"]').allTextContents();
  await page.waitForFunction(() => document.querySelectorAll('tbody td[data-label="Owner"]').length === 3);
  assert.deepEqual(await owners(), ['waiter-a', 'waiter-b', 'waiter-c'], 'the queue in the order it is served');
  for (const w of queue.waiters) {
    await cell(w.owner, '#', String(w.position + 1));
    await cell(w.owner, 'Priority', String(w.priority));
    await cell(w.owner, 'Broker', w.broker);
    await cell(w.owner, 'In memory', w.in_memory ? 'yes' : 'no');
    await cell(w.owner, 'Session', '—');
    assert.equal(await row(w.owner).locator('td[data-label="Waiting since"] time').getAttribute('datetime'), w.waiting_since);
    await row(w.owner).locator('td[data-label="Gives up in"] time', { hasText: /^(1 min )?\d+ s$/ }).waitFor();
  }
  assert.equal(await fact('Holder').textContent(), 'hot-holder');
  await page.locator('.timeline li', { hasText: /handed off waiter-\d+, token/ }).first().waitFor();
  // The bars: a lease per round, and hot-holder's, held still.
  await page.locator('.holds-chart g.hold.held title', { hasText: 'hot-holder' }).waitFor({ state: 'attached' });
  assert.ok(await page.locator('.holds-chart g.hold.released').count() >= 2, "the rounds' leases are drawn");
  await noHorizontalScroll('key page with its queue at 1280px');
  await shot(page, 'key-queue');

  step("a handoff shows on the key's page: the queue moves up");
  await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor();
  await api('/v1/locks/hot-1/release', { method: 'POST', body: { owner: 'hot-holder', token: holder.token } });
  const [handed, lease] = await waiting[0];
  assert.equal(handed, 200, JSON.stringify(lease));
  await page.locator('.timeline li', { hasText: `handed off waiter-a, token ${lease.token}` }).waitFor();
  await fact('Holder').filter({ hasText: /^waiter-a$/ }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('tbody td[data-label="Owner"]').length === 2);
  assert.deepEqual(await owners(), ['waiter-b', 'waiter-c']);
  await cell('waiter-b', '#', '1');

  step('the wait-for graph draws the cycle in red, and lists it');
  await page.getByRole('link', { name: '← Locks' }).click();
  await page.getByRole('link', { name: 'Who waits', exact: true }).click();
  await page.getByRole('heading', { name: 'Who waits for whom' }).waitFor();
  const graph = page.locator('figure.graph svg');
  await graph.locator('g.edge').nth(3).waitFor();
  assert.equal(await graph.locator('g.node').count(), 5, 'waiter-a, -b, -c, cycle-x and cycle-y');
  assert.equal(await graph.locator('g.node.cycle').count(), 2);
  for (const [waiter, holds] of [['cycle-x', 'cycle-y'], ['cycle-y', 'cycle-x']]) {
    const arrow = graph.locator(`g.edge.cycle[data-waiter="${waiter}"][data-holder="${holds}"]`);
    assert.equal(await arrow.count(), 1, `${waiter} waits for ${holds}, in the cycle`);
    assert.equal(await arrow.locator('path').evaluate((p) => getComputedStyle(p).stroke), `rgb(${DANGER.join(', ')})`);
    await graph.locator(`g.node.cycle[data-party="${waiter}"]`).waitFor();
  }
  for (const waiter of ['waiter-b', 'waiter-c']) {
    assert.equal(await graph.locator(`g.edge:not(.cycle)[data-waiter="${waiter}"][data-holder="waiter-a"]`).count(), 1);
    await graph.locator('g.edge text', { hasText: /^hot-1$/ }).first().waitFor();
  }
  assert.equal(await graph.locator('g.edge.cycle text', { hasText: /^cyc-[ab]$/ }).count(), 2, "the cycle's keys label it");
  const cycles = page.locator('ol.cycles li');
  assert.equal(await cycles.count(), 1);
  const listed = await cycles.textContent();
  assert.match(listed, /^Waiting for each other: cycle-[xy], cycle-[xy] \(keys cyc-[ab], cyc-[ab]\)$/);
  await cell('waiter-b', 'In a cycle', 'no');
  assert.equal(await page.locator('td[data-label="In a cycle"]', { hasText: 'yes' }).count(), 2);
  const red = pixelsOf(await page.locator('figure.graph').screenshot(), DANGER);
  assert.ok(red.matching >= 50, `the cycle is drawn in red: ${JSON.stringify(red)}`);
  await noHorizontalScroll('graph at 1280px');
  await shot(page, 'waits-for');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('graph at 360px');
  await shot(page, 'waits-for-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  step('the graph follows: a broken cycle is gone');
  await api('/v1/locks/cyc-a/release', { method: 'POST', body: { owner: 'cycle-x', token: x.token } });
  const [handedA, cycA] = await crossed[1];
  assert.equal(handedA, 200, "cycle-y got cyc-a when cycle-x let it go");
  await page.getByText('No cycles: nobody waits for anybody round.').waitFor();
  assert.equal(await graph.locator('g.edge.cycle').count(), 0);
  assert.equal(await graph.locator('g.edge[data-waiter="cycle-x"][data-holder="cycle-y"]').count(), 1);

  // Nothing left held or waiting: hot-1 passes down its queue, cyc-b to
  // cycle-x.
  let last = lease;
  for (const next of waiting.slice(1)) {
    await api('/v1/locks/hot-1/release', { method: 'POST', body: { owner: last.owner, token: last.token } });
    [, last] = await next;
  }
  await api('/v1/locks/hot-1/release', { method: 'POST', body: { owner: last.owner, token: last.token } });
  await api('/v1/locks/cyc-a/release', { method: 'POST', body: { owner: 'cycle-y', token: cycA.token } });
  await api('/v1/locks/cyc-b/release', { method: 'POST', body: { owner: 'cycle-y', token: y.token } });
  const [handedB, cycB] = await crossed[0];
  assert.equal(handedB, 200, 'cycle-x got cyc-b');
  await api('/v1/locks/cyc-b/release', { method: 'POST', body: { owner: 'cycle-x', token: cycB.token } });
  await Promise.all(pending);
  await page.getByText('Nobody waits for anybody.').waitFor();

  step('a wait refused as a deadlock between two sessions is drawn, its refused wait dashed');
  const [one, two] = [await api('/v1/sessions', { method: 'POST', body: { ttl_ms: 60_000 } }),
    await api('/v1/sessions', { method: 'POST', body: { ttl_ms: 60_000 } })];
  await api('/v1/locks/dl-a/acquire', { method: 'POST', body: { owner: 'dl-one', session: one.id } });
  await api('/v1/locks/dl-b/acquire', { method: 'POST', body: { owner: 'dl-two', session: two.id } });
  const oneWaits = attempt('/v1/locks/dl-b/acquire', { owner: 'dl-one', session: one.id, wait_ms: 120_000 });
  await until('/v1/locks/dl-b/waiters', (q) => q.waiters.length === 1, 'dl-one waits for dl-b');
  const [status, body] = await attempt('/v1/locks/dl-a/acquire', { owner: 'dl-two', session: two.id, wait_ms: 120_000 });
  assert.deepEqual([status, body.error.code], [409, 'deadlock'], 'the wait closing the cycle is refused');
  const refusedFigure = page.locator('ol.refused li').first();
  await refusedFigure.waitFor({ timeout: 20_000 });
  const words = await refusedFigure.locator('p').textContent();
  assert.match(words, /dl-two.* was refused a wait for lock dl-a \(409 deadlock\): it would have closed this cycle of 2 sessions/);
  const dashed = refusedFigure.locator('g.edge.refused.cycle[data-waiter="' + two.id + '"][data-holder="' + one.id + '"] path');
  assert.equal(await dashed.count(), 1, 'the refused wait is drawn from dl-two to dl-one');
  assert.notEqual(await dashed.evaluate((p) => getComputedStyle(p).strokeDasharray), 'none', 'dashed');
  assert.equal(await refusedFigure.locator('g.edge.cycle:not(.refused)[data-waiter="' + one.id + '"] text').textContent(), 'dl-b');
  const drawn = pixelsOf(await refusedFigure.locator('figure.graph').screenshot(), DANGER);
  assert.ok(drawn.matching >= 30, `the refused cycle is drawn in red: ${JSON.stringify(drawn)}`);
  await shot(page, 'waits-for-refused');
  await api(`/v1/sessions/${two.id}`, { method: 'DELETE' });
  const [granted] = await oneWaits;
  assert.equal(granted, 200, 'dl-one got dl-b when the other session closed');
  await api(`/v1/sessions/${one.id}`, { method: 'DELETE' });
}

// Root cannot use chromium's sandbox; the page is our own, on loopback.
const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
const problems = [];
let cutting = false; // While the test cuts the page's connections, they fail.
// Paths the page is meant to find gone (a session that ended): chromium
// logs their 404 as an error.
const gone = new Set();
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const origin = new URL(base).origin;
  page.on('console', (msg) => {
    const cutOff = cutting && msg.text().includes('net::ERR_');
    const meant = msg.text().includes('status of 404') && gone.has(new URL(msg.location().url, base).pathname);
    if ((msg.type() === 'error' || msg.type() === 'warning') && !cutOff && !meant) {
      problems.push(`console ${msg.type()}: ${msg.text()} (${msg.location().url})`);
    }
  });
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('request', (req) => {
    if (new URL(req.url()).origin !== origin) problems.push(`request to another host: ${req.url()}`);
  });
  page.on('requestfailed', (req) => {
    // Streams and fetches of a view the console left are aborted on purpose.
    const cutOff = cutting && new URL(req.url()).pathname === '/v1/events';
    if (req.failure()?.errorText !== 'net::ERR_ABORTED' && !cutOff) problems.push(`failed: ${req.url()} ${req.failure()?.errorText}`);
  });
  const noProblems = (when) => assert.deepEqual(problems, [], `problems ${when}`);
  const row = (text) => page.getByRole('row').filter({ hasText: text });
  /// Waits until the row with `text` shows exactly `value` in its `label` column.
  const escape = (v) => String(v).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const cell = (text, label, value) => row(text)
    .locator(`td[data-label="${label}"]`, { hasText: new RegExp(`^${escape(value)}$`) }).waitFor();
  const noHorizontalScroll = async (what) => {
    const [scroll, width] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    assert.ok(scroll <= width, `${what}: the page is ${scroll}px wide in a ${width}px viewport`);
  };

  step('the page loads and asks for a key');
  await page.goto(`${base}/ui`);
  assert.equal(new URL(page.url()).pathname, '/ui/');
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.getByLabel('Tenant (API key)').check();
  await page.getByLabel('Key or token').fill(key);
  await page.getByLabel('Key or token').press('Enter');

  step('the held lock is listed with its owner and token');
  const job1 = (await api('/v1/locks/job-1'));
  await cell('job-1', 'Owner', 'worker-7');
  await cell('job-1', 'Token', String(job1.token));
  await row('other-1').waitFor();
  assert.equal(await page.evaluate(() => Object.keys(sessionStorage).length), 1, 'the key is in sessionStorage');
  assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');

  await shot(page, 'signin-done');
  step('the prefix filter narrows the list');
  await page.getByLabel('Key prefix').fill('job-');
  await page.getByRole('button', { name: 'Filter' }).click();
  await row('other-1').waitFor({ state: 'detached' });
  await row('job-2').waitFor();
  assert.match(page.url(), /#\/locks\?prefix=job-$/);

  step('paging follows the cursor');
  await page.getByLabel('Key prefix').fill('page-');
  await page.getByRole('button', { name: 'Filter' }).click();
  await row('page-49').waitFor();
  assert.equal(await page.getByRole('row').count(), 51, 'a header and 50 rows');
  assert.equal(await row('page-50').count(), 0);
  await page.getByRole('button', { name: 'Next page' }).click();
  await row('page-50').waitFor();
  await row('page-00').waitFor({ state: 'detached' });
  assert.ok(await page.getByRole('button', { name: 'Next page' }).isDisabled());
  await page.getByRole('button', { name: 'Previous page' }).click();
  await row('page-00').waitFor();
  assert.ok(await page.getByRole('button', { name: 'Previous page' }).isDisabled());
  await page.getByLabel('Key prefix').fill('job-');
  await page.getByRole('button', { name: 'Filter' }).click();
  await row('page-00').waitFor({ state: 'detached' });

  step('a lock taken while the page is open appears without a reload');
  await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor();
  await page.evaluate(() => { window.sameDocument = true; });
  const job3 = await api('/v1/locks/job-3/acquire', { method: 'POST', body: { owner: 'late-worker', ttl_ms: 120_000 } });
  await cell('job-3', 'Owner', 'late-worker');
  await api('/v1/locks/other-2/acquire', { method: 'POST', body: { owner: 'w', ttl_ms: 120_000 } });
  await cell('job-3', 'Token', String(job3.token));
  assert.equal(await page.evaluate(() => window.sameDocument), true, 'the page was not reloaded');
  assert.equal(await row('other-2').count(), 0, 'the filter still holds');

  await shot(page, 'live');
  step('a cut event stream comes back with Last-Event-ID and misses nothing in between');
  const resumedAfter = [];
  page.on('request', (req) => {
    if (new URL(req.url()).pathname === '/v1/events') resumedAfter.push(req.headers()['last-event-id']);
  });
  cutting = true;
  await control('cut');
  await page.getByRole('status').filter({ hasText: 'Reconnecting' }).waitFor();
  await api('/v1/locks/job-4/acquire', { method: 'POST', body: { owner: 'while-cut', ttl_ms: 120_000 } });
  await control('restore');
  await cell('job-4', 'Owner', 'while-cut');
  cutting = false;
  // Nothing happened after job-4 was taken: it shows because the stream
  // resumed after the last event the page had seen.
  assert.ok(resumedAfter.some((id) => /^\d+$/.test(id ?? '')), `a reconnect sent Last-Event-ID: ${resumedAfter}`);
  assert.equal(await page.evaluate(() => window.sameDocument), true, 'the page was not reloaded');

  step('the other kinds have their tabs');
  assert.equal(await page.getByRole('link', { name: 'Semaphores' }).getAttribute('href'), '#/semaphores?prefix=job-',
    'the tabs keep the prefix');
  await page.getByLabel('Key prefix').fill('');
  await page.getByRole('button', { name: 'Filter' }).click();
  await row('other-1').waitFor();
  await page.getByRole('link', { name: 'Semaphores' }).click();
  await row('pool-1').getByText('sem-holder (slot 0').waitFor();
  await page.getByRole('link', { name: 'pool-1', exact: true }).click();
  await page.getByRole('heading', { name: 'Semaphore pool-1' }).waitFor();
  await page.locator('.facts dd', { hasText: /^sem-holder \(slot 0, token \d+\), expires in \d+ min \d+ s$/ }).waitFor();
  await page.locator('.timeline li', { hasText: 'granted sem-holder' }).waitFor();
  await page.getByRole('link', { name: '← Semaphores' }).click();
  await page.getByRole('link', { name: 'RW locks' }).click();
  await row('table-1').getByText('reader-1 (token').waitFor();
  await page.getByRole('link', { name: 'table-1', exact: true }).click();
  await page.getByRole('heading', { name: 'RW lock table-1' }).waitFor();
  await page.locator('.facts dd', { hasText: /^reader-1 \(token \d+\), expires in / }).waitFor();
  await page.locator('.timeline li', { hasText: 'granted reader-1' }).waitFor();
  await page.getByRole('link', { name: '← RW locks' }).click();
  await page.getByRole('link', { name: 'Elections' }).click();
  const leader = await api('/v1/elections/leader-1');
  await cell('leader-1', 'Leader', 'node-1');
  await cell('leader-1', 'Term', String(leader.term));

  await shot(page, 'elections');
  await page.getByRole('link', { name: 'leader-1', exact: true }).click();
  await page.getByRole('heading', { name: 'Election leader-1' }).waitFor();
  await page.locator('.facts dd', { hasText: /^node-1$/ }).waitFor();
  await page.getByRole('status').filter({ hasText: 'Elections make no events' }).waitFor();
  await page.getByText('Nobody waits.').waitFor();
  await page.getByRole('link', { name: '← Elections' }).click();
  await cell('leader-1', 'Leader', 'node-1');
  step("a key's page shows its holder, a countdown and the history");
  await page.getByRole('link', { name: 'Locks', exact: true }).click();
  await page.getByRole('link', { name: 'job-1', exact: true }).click();
  await page.getByRole('heading', { name: 'Lock job-1' }).waitFor();
  const fact = (term) => page.locator('.facts dt', { hasText: term }).locator('xpath=following-sibling::dd[1]');
  assert.equal(await fact('Holder').textContent(), 'worker-7');
  assert.equal(await fact('Token').textContent(), String(job1.token));
  const countdown = fact('Expires in').locator('time');
  const first = await countdown.textContent();
  assert.match(first, /^(\d+ min )?\d+ s$/);
  await page.waitForFunction((text) => document.querySelector('.facts time').textContent !== text, first);
  await page.locator('.timeline li', { hasText: `granted worker-7, token ${job1.token}` }).waitFor();
  await noHorizontalScroll('key page at 1280px');

  await shot(page, 'key-page');
  step("the key's page follows a release live");
  await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor();
  await api('/v1/locks/job-1/release', { method: 'POST', body: { owner: 'worker-7', token: job1.token } });
  await page.locator('.timeline li', { hasText: `released worker-7, token ${job1.token}` }).waitFor();
  await fact('Holder').filter({ hasText: 'nobody' }).waitFor();

  step('a phone-sized viewport has no horizontal scroll');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('key page at 360px');
  await shot(page, 'key-phone');
  await page.getByRole('link', { name: '← Locks' }).click();
  await page.getByRole('link', { name: 'job-2', exact: true }).waitFor();
  await noHorizontalScroll('locks at 360px');
  await shot(page, 'locks-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  step('the Sessions tab lists each session: id, name, TTL, a countdown, created');
  const sessions = (await api('/v1/sessions')).items;
  const byName = (name) => sessions.find((s) => s.name === name);
  const batch = byName('nightly-batch');
  const report = byName('nightly-report');
  assert.ok(batch && report && byName('adhoc-1'), `the sessions tests/console.rs opened: ${JSON.stringify(sessions)}`);
  await page.getByRole('link', { name: 'Sessions', exact: true }).click();
  await page.getByRole('heading', { name: 'Sessions' }).waitFor();
  assert.match(page.url(), /#\/sessions$/);
  await cell('nightly-batch', 'Id', batch.id);
  await cell('nightly-batch', 'TTL', '600 s');
  await row('nightly-batch').locator('td[data-label="Expires in"] time', { hasText: /^\d+ min \d+ s$/ }).waitFor();
  assert.equal(await row('nightly-batch').locator('td[data-label="Created"] time').getAttribute('datetime'), batch.created_at);
  await cell('adhoc-1', 'Name', 'adhoc-1');
  await noHorizontalScroll('sessions at 1280px');
  await shot(page, 'sessions');

  step('the name prefix narrows the sessions');
  await page.getByLabel('Name prefix').fill('nightly-');
  await page.getByRole('button', { name: 'Filter' }).click();
  await row('adhoc-1').waitFor({ state: 'detached' });
  await cell('nightly-report', 'Id', report.id);
  await row('nightly-batch').waitFor();
  assert.match(page.url(), /#\/sessions\?prefix=nightly-$/);
  assert.equal(await page.getByRole('link', { name: 'Locks', exact: true }).getAttribute('href'), '#/locks?prefix=nightly-',
    'the tabs keep the prefix');

  step('a session that takes a lock shows without a reload; one that ends goes');
  await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor();
  await page.evaluate(() => { window.sameDocument = true; });
  const late = await api('/v1/sessions', { method: 'POST', body: { ttl_ms: 600_000, name: 'nightly-late' } });
  const elsewhere = await api('/v1/sessions', { method: 'POST', body: { ttl_ms: 600_000, name: 'elsewhere' } });
  await api('/v1/locks/elsewhere-1/acquire', { method: 'POST', body: { session: elsewhere.id } });
  await api('/v1/locks/batch-c/acquire', { method: 'POST', body: { session: late.id } });
  await cell('nightly-late', 'Id', late.id);
  assert.equal(await row('elsewhere').count(), 0, 'the name filter still holds');
  await api(`/v1/sessions/${late.id}`, { method: 'DELETE' });
  await row('nightly-late').waitFor({ state: 'detached' });
  await page.getByRole('status').filter({ hasText: `Live: session ${late.id} closed` }).waitFor();
  assert.equal(await page.evaluate(() => window.sameDocument), true, 'the page was not reloaded');
  assert.equal((await api('/v1/locks/batch-c')).held, false, "nightly-late's close released batch-c");

  step("a session's page shows it, its leases with their tokens, and a countdown");
  await row('nightly-batch').getByRole('link', { name: batch.id }).click();
  await page.getByRole('heading', { name: `Session ${batch.id}` }).waitFor();
  assert.match(page.url(), new RegExp(`#/session/${batch.id}$`));
  const [lockA, lockB] = [await api('/v1/locks/batch-a'), await api('/v1/locks/batch-b')];
  for (const [k, lock] of [['batch-a', lockA], ['batch-b', lockB]]) {
    assert.equal(lock.session, batch.id, `${k} is held in nightly-batch`);
    await cell(k, 'Token', String(lock.token));
    await cell(k, 'Kind', 'lock');
  }
  assert.equal(await page.locator('tbody tr').count(), 2, 'two leases');
  await fact('Name').filter({ hasText: /^nightly-batch$/ }).waitFor();
  assert.equal(await fact('TTL').textContent(), '600 s');
  assert.equal(await fact('Lock delay').textContent(), '0 s');
  assert.equal(await fact('Created').locator('time').getAttribute('datetime'), batch.created_at);
  const sessionCountdown = fact('Expires in').locator('time');
  const before = await sessionCountdown.textContent();
  assert.match(before, /^\d+ min \d+ s$/);
  await page.waitForFunction((text) => document.querySelector('.facts time[data-expires]').textContent !== text, before);
  await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor();
  await noHorizontalScroll('session page at 1280px');
  await shot(page, 'session-page');

  step("a lease links to its key's page, which links back to the session");
  await page.getByRole('link', { name: 'batch-a', exact: true }).click();
  await page.getByRole('heading', { name: 'Lock batch-a' }).waitFor();
  assert.equal(await fact('Token').textContent(), String(lockA.token));
  await fact('Session').getByRole('link', { name: batch.id }).click();
  await page.getByRole('heading', { name: `Session ${batch.id}` }).waitFor();
  await cell('batch-b', 'Token', String(lockB.token));

  step('a session ended elsewhere shows as ended, live');
  await page.getByRole('link', { name: '← Sessions' }).click();
  await row('nightly-report').getByRole('link', { name: report.id }).click();
  await page.getByRole('heading', { name: `Session ${report.id}` }).waitFor();
  await page.getByText('No leases held in it.').waitFor();
  await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor();
  await api(`/v1/sessions/${report.id}`, { method: 'DELETE' });
  await page.getByRole('status').filter({ hasText: 'This session has ended (closed)' }).waitFor();
  await fact('Expires in').filter({ hasText: /^ended$/ }).waitFor();
  assert.ok(await page.getByRole('button', { name: 'Close session' }).isDisabled(), 'an ended session cannot be closed');
  assert.equal(await page.locator('#alert').textContent(), '', 'no error');

  step('a link to a session that has ended shows it ended, not an error');
  gone.add(`/v1/sessions/${report.id}`);
  await page.reload();
  await page.getByRole('heading', { name: `Session ${report.id}` }).waitFor();
  await page.getByRole('status').filter({ hasText: 'This session has ended (closed or expired)' }).waitFor();
  assert.equal(await page.locator('#alert').textContent(), '', 'no error');
  assert.ok(await page.getByRole('button', { name: 'Close session' }).isDisabled());
  await shot(page, 'session-ended');

  step('Close session asks first, then releases its leases');
  await page.getByRole('link', { name: '← Sessions' }).click();
  await row('nightly-batch').getByRole('link', { name: batch.id }).click();
  await cell('batch-a', 'Token', String(lockA.token));
  const closeSession = page.getByRole('button', { name: 'Close session' });
  page.once('dialog', (d) => d.dismiss());
  await closeSession.click();
  await page.getByRole('button', { name: 'Refresh' }).click();
  await cell('batch-b', 'Token', String(lockB.token));
  assert.equal((await api(`/v1/sessions/${batch.id}`)).leases.length, 2, 'a dismissed close leaves the session open');
  assert.equal((await api('/v1/locks/batch-a')).held, true);
  const asked = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  gone.add(`/v1/sessions/${batch.id}`); // Should the page ask once more (it should not: checked below).
  let askedAfter = 0;
  page.on('request', (req) => {
    if (new URL(req.url()).pathname === `/v1/sessions/${batch.id}` && req.method() === 'GET') askedAfter += 1;
  });
  await closeSession.focus();
  await page.keyboard.press('Enter');
  assert.match(await asked, /nightly-batch.*2 leases/);
  await page.getByRole('status').filter({ hasText: 'Session closed: 2 leases released.' }).waitFor();
  await fact('Expires in').filter({ hasText: /^ended$/ }).waitFor();
  await page.getByText('None: its leases were released when it ended.').waitFor();
  assert.ok(await closeSession.isDisabled());
  assert.deepEqual(await apiError(`/v1/sessions/${batch.id}`), [404, 'session_not_found']);
  for (const k of ['batch-a', 'batch-b']) assert.equal((await api(`/v1/locks/${k}`)).held, false, `${k} was released`);
  await shot(page, 'session-closed');

  step("the released lock's history says its session's close released it");
  await page.goto(`${base}/ui/#/key/locks/batch-a`);
  await page.getByRole('heading', { name: 'Lock batch-a' }).waitFor();
  await page.locator('.timeline li', { hasText: `released ${batch.id}, token ${lockA.token} (session closed)` }).waitFor();
  await fact('Session').filter({ hasText: /^—$/ }).waitFor();
  assert.equal(askedAfter, 0, 'the closed session was not asked for again');

  step('the sessions list no longer shows it');
  await page.goto(`${base}/ui/#/sessions`);
  await row('adhoc-1').waitFor();
  await row('elsewhere').waitFor();
  assert.equal(await row('nightly-').count(), 0, 'no nightly session is open');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('sessions at 360px');
  await shot(page, 'sessions-phone');
  await row('adhoc-1').getByRole('link').click();
  await page.getByRole('heading', { name: /^Session / }).waitFor();
  await page.getByText('No leases held in it.').waitFor();
  await noHorizontalScroll('session page at 360px');
  await shot(page, 'session-phone');
  await page.setViewportSize({ width: 1280, height: 800 });
  await contention(page, { row, cell, fact, noHorizontalScroll });
  noProblems('in the tenant views');

  step('the admin sees every tenant and its policy');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Admin (admin token)').check();
  await page.getByLabel('Key or token').fill(admin);
  await page.getByRole('button', { name: 'Open' }).click();
  await page.getByRole('heading', { name: 'Tenants' }).waitFor();
  const { tenants } = await api('/v1/admin/tenants', { secret: admin });
  assert.ok(tenants.length >= 2);
  for (const t of tenants) {
    await cell(t.name, 'Policy', t.policy.name);
    await cell(t.name, 'Version', t.policy.version);
    await cell(t.name, 'Last error', t.last_error ?? 'none');
  }
  await shot(page, 'tenants');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('tenants at 360px');
  await shot(page, 'tenants-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  step("choosing a tenant shows its leases; force-release asks first");
  await page.getByRole('link', { name: 'default', exact: true }).click();
  await page.getByRole('heading', { name: 'Tenant default' }).waitFor();
  await page.getByRole('status').filter({ hasText: 'Not live' }).waitFor();
  const release = page.getByRole('button', { name: 'Force release job-2' });
  await cell('job-2', 'Owner', 'worker-8');
  page.once('dialog', (dialog) => dialog.dismiss());
  await release.focus();
  await page.keyboard.press('Enter');
  // Dismissed: nothing was sent, the lock is still held.
  await page.getByRole('button', { name: 'Refresh' }).click();
  await cell('job-2', 'Owner', 'worker-8');
  assert.equal((await api('/v1/locks/job-2')).held, true, 'a dismissed force-release leaves the lock held');

  const dialog = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  await release.focus();
  await page.keyboard.press('Enter');
  assert.match(await dialog, /job-2.*worker-8/);
  await page.getByRole('status').filter({ hasText: 'Released job-2 from worker-8' }).waitFor();
  await row('job-2').waitFor({ state: 'detached' });
  const job2 = await api('/v1/locks/job-2');
  assert.equal(job2.held, false, 'the broker says job-2 is free');
  const { events } = await api('/v1/locks/job-2/history');
  assert.equal(events[0].event, 'force_released');
  await shot(page, 'force-released');
  noProblems('in the admin views');

  step("a tenant's policy page shows its versions and its shadow's report");
  const tenantApi = (path, opts = {}) => api(`/v1/admin/tenants/default/policy${path}`, { secret: admin, ...opts });
  const loaded = await tenantApi('?mode=shadow', { method: 'PUT', wasm: await readFile(shadowWasm) });
  const candidate = loaded.shadow;
  assert.equal(candidate.name, 'rename');
  const inForce = loaded.policy.id;
  // Three naming calls: the candidate names two keys otherwise.
  for (const k of ['shadow-boom-1', 'shadow-2', 'shadow-boom-3']) {
    const lease = await api(`/v1/locks/${k}/acquire`, { method: 'POST', body: { owner: 'shadow-test', ttl_ms: 120_000 } });
    assert.equal(lease.storage_key, k, 'the policy in force names the key');
  }
  // Until the candidate has judged all three (a condition, polled).
  for (;;) {
    const { counts } = await tenantApi('/shadow');
    const n = counts.naming;
    if (n.agree + n.disagree + n.failed + n.dropped >= 3) break;
    await new Promise((resolve) => { setTimeout(resolve, 50); });
  }
  await page.getByRole('link', { name: 'Policy versions and shadow' }).click();
  await page.getByRole('heading', { name: 'Policy of default' }).waitFor();
  await cell(inForce, 'Active', 'in force');
  await cell('naming', 'Agree', '1');
  await cell('naming', 'Disagree', '2');
  await cell('naming', 'Failed', '0');
  await cell('backoff', 'Agree', '0');
  await row('renamed/shadow-boom-3').locator('td[data-label="In force"]', { hasText: '"shadow-boom-3"' }).waitFor();
  await noHorizontalScroll('policy page at 1280px');
  await shot(page, 'policy-shadow');
  await page.setViewportSize({ width: 360, height: 740 });
  await noHorizontalScroll('policy page at 360px');
  await shot(page, 'policy-shadow-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  step('Promote asks first, then puts the candidate in force');
  const promote = page.getByRole('button', { name: `Promote ${candidate.id}` });
  page.once('dialog', (d) => d.dismiss());
  await promote.click();
  await page.getByRole('button', { name: 'Refresh' }).click();
  await cell(inForce, 'Active', 'in force');
  assert.equal((await tenantApi('/versions')).versions.find((v) => v.active).id, inForce, 'a dismissed promote changes nothing');
  const promoted = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  await promote.focus();
  await page.keyboard.press('Enter');
  assert.match(await promoted, /Promote rename/);
  await page.getByRole('status').filter({ hasText: `Promoted ${candidate.id}` }).waitFor();
  await cell(candidate.id, 'Active', 'in force');
  await cell(candidate.id, 'By', 'promote');
  await cell(inForce, 'Active', '—');
  await page.getByText('No shadow candidate is loaded').waitFor();
  assert.equal((await tenantApi('/versions')).versions.find((v) => v.active).id, candidate.id);
  await shot(page, 'policy-promoted');

  step('Roll back puts the previous version back in force');
  const dialog2 = new Promise((resolve) => page.once('dialog', async (d) => { resolve(d.message()); await d.accept(); }));
  await page.getByRole('button', { name: `Roll back to ${inForce}` }).click();
  assert.match(await dialog2, new RegExp(`version ${inForce}`));
  await page.getByRole('status').filter({ hasText: `Rolled back to ${inForce}` }).waitFor();
  await cell(inForce, 'Active', 'in force');
  await cell(inForce, 'By', 'rollback');
  await cell(candidate.id, 'Active', '—');
  await page.getByRole('button', { name: `Roll back to ${candidate.id}` }).waitFor();
  assert.equal((await tenantApi('/versions')).versions.find((v) => v.active).id, inForce);
  await shot(page, 'policy-rolled-back');
  noProblems('in the policy page');
  console.log('console.mjs: all checks passed');
} catch (err) {
  console.error(err);
  if (problems.length) console.error(problems.join('\n'));
  process.exitCode = 1;
} finally {
  stdin.close();
  giveUp.abort();
  await Promise.allSettled(pending);
  await browser.close();
}
