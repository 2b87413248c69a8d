// The console's contention views (issue #32): the overview's charts, the
// hot keys, the wait-for graph, and the parts of a key's page that show
// who waits (its queue) and who held it when (its history as bars). They
// draw the broker's own answers (`GET /v1/contention`, `/v1/waits-for`,
// `/v1/{kind}/{key}/waiters`) as inline SVG; the page's helpers come from
// app.js (which imports this module: the views are only called once both
// are loaded). Each view polls through the page's one-second tick (a wait
// makes no event) and ends with its AbortController.

import { call, query, skewMs } from './api.js';
import {
  changed, countdown, every, h, keyHref, list, sessionHref, showError, stamp, svg, table, tenantNav, view,
} from './app.js';

/// Seconds between two asks of the overview, the hot keys, the graph.
const OVERVIEW_EVERY = 2;
const HOT_EVERY = 5;
const GRAPH_EVERY = 3;
/// The overview keeps (and draws) this much of its past.
const KEEP_MS = 5 * 60_000;
/// Samples further apart than this (the page was left) are not joined.
const GAP_MS = 10_000;
/// The windows the hot keys offer: seconds and what they are called.
const WINDOWS = [[10, '10 s'], [60, '1 min'], [300, '5 min']];
const HELD_KINDS = ['lock', 'semaphore', 'rwlock', 'election'];

/// A number for a person: whole from 100 on, else three digits at most.
const num = (v) => (v >= 100 || Number.isInteger(v) ? String(Math.round(v)) : String(Number(v.toPrecision(3))));
/// Milliseconds, in seconds from one second on.
const ms = (v) => (v >= 1000 ? `${num(v / 1000)} s` : `${v} ms`);
/// A long id, shortened for a graph's label.
const short = (text, most = 22) => (text.length > most ? `${text.slice(0, most - 1)}…` : text);
const linkTo = (href, text) => (href ? h('a', { href }, text) : text);

/// Who holds or waits: its owner, or its session's id (a link) when the
/// lease or wait is in one.
const partyCell = (p) => (p.session
  ? [p.owner === p.session ? '' : `${p.owner} in `, h('a', { href: sessionHref(p.session) }, 'session ', h('code', {}, p.session))]
  : p.owner);

/// Runs `render` of `el`, then puts the keyboard focus back on the link it
/// was on (a live table is drawn anew).
function keepFocus(el, render) {
  const href = el.contains(document.activeElement) ? document.activeElement.getAttribute('href') : null;
  render();
  if (href) [...el.querySelectorAll('a')].find((a) => a.getAttribute('href') === href)?.focus();
}

/// A search form: `fields` (label, control) pairs, Filter and Refresh, and
/// a "Live" checkbox (returned: polls skip while it is off).
function controls(fields, apply, refresh, seconds) {
  const auto = h('input', { id: 'auto', type: 'checkbox', checked: true });
  const form = h('form', {
    role: 'search', class: 'filter',
    onsubmit: (e) => { e.preventDefault(); apply(); },
  }, fields.map(([label, control]) => [h('label', { for: control.id }, label), control]),
  h('button', { type: 'submit' }, 'Filter'), h('button', { type: 'button', onclick: refresh }, 'Refresh'),
  h('label', { class: 'auto' }, auto, ` Live (every ${seconds} s)`));
  return [form, auto];
}

/// A prefix field, as the listings have.
const prefixField = (prefix) => h('input', { id: 'prefix', type: 'search', value: prefix, autocomplete: 'off', spellcheck: 'false' });

// ——— The overview: time series drawn from GET /v1/contention ———

/// The overview's samples (`t`: this clock's ms), kept while the console
/// is open, for one secret.
const samples = { secret: null, points: [] };

/// Its charts: id, title, the unit of the y axis, and the lines (name, value of a sample).
const CHARTS = [
  { id: 'grants', title: 'Grants per second', unit: 'grants/s', lines: [['grants', (p) => p.grants]] },
  { id: 'handoffs', title: 'Handoffs per second', unit: 'handoffs/s', lines: [['handoffs', (p) => p.handoffs]] },
  { id: 'refusals', title: 'Refusals per second', unit: 'refusals/s', lines: [['refusals', (p) => p.refusals]] },
  { id: 'wait', title: 'Wait p99 (slowest key)', unit: 'ms', lines: [['p99', (p) => p.p99]] },
  { id: 'held', title: 'Held leases by kind', unit: 'leases', lines: HELD_KINDS.map((k) => [k, (p) => p.held?.[k]]) },
];

/// One sample of an answer over `window_s`: rates summed over its keys,
/// the slowest key's p99, the held leases (null until counted).
function sample(c, t) {
  const rate = (field) => c.keys.reduce((n, k) => n + k[field], 0) / c.window_s;
  return {
    t, grants: rate('grants'), handoffs: rate('handoffs'), refusals: rate('refusals'),
    p99: Math.max(0, ...c.keys.map((k) => k.wait_p99_ms)), held: c.held,
  };
}

/// The least of 1, 2, 5 × 10ⁿ not under `max` (the top of a y axis).
function nice(max) {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  return [1, 2, 5, 10].map((m) => m * power).find((top) => top >= max);
}

/// A chart's size (its viewBox) and the room around its plot.
const W = 360;
const H = 180;
const PAD = { left: 46, right: 12, top: 24, bottom: 38 };

/// The axes: the y axis from 0 to `top` (`unit` over it), the x axis the
/// last five minutes (`now` at the right).
function axes(top, x, y, unit, now) {
  const grid = [0, top / 2, top].map((v) => [
    svg('line', { class: 'grid', x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }),
    svg('text', { class: 'tick', x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, num(v))]);
  const minutes = [5, 4, 3, 2, 1, 0].map((m) => svg('text', {
    class: 'tick', x: x(now - m * 60_000), y: H - PAD.bottom + 15, 'text-anchor': 'middle',
  }, m ? `−${m}` : 'now'));
  return [
    svg('rect', { class: 'plot', x: PAD.left, y: PAD.top, width: W - PAD.left - PAD.right, height: H - PAD.top - PAD.bottom }),
    grid, minutes,
    svg('text', { class: 'axis', x: 4, y: 13 }, unit),
    svg('text', { class: 'axis', x: (PAD.left + W - PAD.right) / 2, y: H - 4, 'text-anchor': 'middle' }, 'minutes ago'),
  ];
}

/// One line of a chart: a path through its points (broken where samples
/// are missing), a dot on the latest.
function plot({ cls, at }, x, y) {
  if (!at.length) return null;
  let d = '';
  let last = -Infinity;
  for (const [t, v] of at) {
    d += `${t - last <= GAP_MS ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
    last = t;
  }
  const [t, v] = at[at.length - 1];
  return svg('g', { class: `series ${cls}` },
    svg('path', { class: 'line', d }),
    svg('circle', { class: 'dot', cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 3, 'data-value': v }));
}

/// The latest and the highest value of a line.
const latest = (s) => s.at[s.at.length - 1][1];
const highest = (s) => Math.max(...s.at.map(([, v]) => v));

/// What a chart shows, in words: its text alternative.
function describe(title, unit, series) {
  const said = series.map((s) => {
    const name = series.length > 1 ? `${s.name} ` : '';
    return s.at.length ? `${name}${num(latest(s))} now (highest ${num(highest(s))})` : `${name}no data yet`;
  });
  return `${title} (${unit}) over the last 5 minutes: ${said.join(', ')}.`;
}

/// One chart of the overview: a figure with an SVG (its text alternative
/// in words) and a caption with the latest values.
function chart({ id, title, unit, lines }, points, now) {
  const series = lines.map(([name, value], i) => ({
    name, cls: `s${i}`, at: points.filter((p) => value(p) !== undefined && value(p) !== null).map((p) => [p.t, value(p)]),
  }));
  const top = nice(Math.max(0, ...series.flatMap((s) => s.at.map(([, v]) => v))));
  const x = (t) => PAD.left + ((t - now + KEEP_MS) / KEEP_MS) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const text = describe(title, unit, series);
  const legend = series.map((s) => h('span', { class: `legend ${s.cls}` }, h('span', { class: 'swatch', 'aria-hidden': 'true' }),
    `${series.length > 1 ? `${s.name} ` : ''}${s.at.length ? num(latest(s)) : '—'}`));
  return h('figure', { class: 'chart', 'data-chart': id },
    svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': text },
      svg('title', {}, text), axes(top, x, y, unit, now), series.map((s) => plot(s, x, y))),
    h('figcaption', {}, h('strong', {}, title), ' now: ', legend.map((l, i) => [i ? ' ' : '', l])));
}

/// The columns of a hot key (the overview shows the first few).
const HOT_COLUMNS = [
  ['Kind', (k) => k.kind],
  ['Key', (k) => linkTo(keyHref(k.kind, k.storage_key), k.storage_key)],
  ['Grants', (k) => k.grants], ['Handoffs', (k) => k.handoffs], ['Refusals', (k) => k.refusals],
  ['Wait p50', (k) => ms(k.wait_p50_ms)], ['Wait p99', (k) => ms(k.wait_p99_ms)],
  ['Waiting now', (k) => k.waiters], ['Held by', (k) => list(k.holders.map(partyCell))],
];

/// Says when an answer is missing a broker's part.
const incomplete = (c, what) => (c.complete ? null : h('p', { class: 'error' }, `A broker did not answer: ${what} missing.`));

/// The overview (`#/overview`): asks `GET /v1/contention` for the last ten
/// seconds every OVERVIEW_EVERY seconds while open, keeps five minutes of
/// samples and draws them; below, the hottest keys now.
export function overview({ signal, secret }) {
  if (samples.secret !== secret) Object.assign(samples, { secret, points: [] });
  const charts = h('div', { class: 'charts' });
  const hottest = h('div', { class: 'results' });
  const asOf = h('p', { class: 'hint' });
  const draw = (now) => charts.replaceChildren(...CHARTS.map((spec) => chart(spec, samples.points, now)));

  async function load() {
    if (signal.aborted) return;
    try {
      const c = await call(`/v1/contention${query({ window_s: 10, top: 100 })}`, { secret, signal });
      const now = Date.now();
      samples.points = [...samples.points.filter((p) => p.t > now - KEEP_MS), sample(c, now)];
      draw(now);
      asOf.replaceChildren(`As of ${new Date(now).toLocaleTimeString()}; rates are the last ten seconds' counts (every broker's) of the 100 hottest keys, per second.`);
      const top = c.keys.slice(0, 5);
      changed(hottest, c, () => keepFocus(hottest, () => hottest.replaceChildren(
        table(HOT_COLUMNS, top, null, 'Nothing contended in the last ten seconds.'), incomplete(c, 'its counts are') ?? '')));
    } catch (err) {
      showError(err);
    }
  }

  view.replaceChildren(
    h('h2', { tabindex: '-1' }, 'Overview'), tenantNav('overview'),
    h('p', { class: 'status', role: 'status' }, `Live: asked every ${OVERVIEW_EVERY} s while this page is open.`),
    asOf, charts,
    h('h3', {}, 'Hottest keys now'), hottest, h('p', {}, h('a', { href: '#/hot' }, 'All hot keys →')));
  draw(Date.now());
  load();
  return every(OVERVIEW_EVERY, load);
}

// ——— Hot keys: the table of GET /v1/contention ———

/// The hot keys (`#/hot?prefix=&window=`): the most contended keys of the
/// window, each linking to its page; asked again every HOT_EVERY seconds
/// while Live is checked, or on Refresh.
export function hotKeys({ signal, secret, prefix, windowS }) {
  let seconds = WINDOWS.some(([s]) => String(s) === windowS) ? Number(windowS) : 60;
  const results = h('div', { class: 'results' });
  const asOf = h('p', { class: 'hint' });
  const bar = h('div', {}, tenantNav('hot', prefix));
  const input = prefixField(prefix);
  const select = h('select', { id: 'window', onchange: () => apply() },
    WINDOWS.map(([s, label]) => h('option', { value: s, selected: s === seconds }, label)));
  let loads = 0;

  async function load() {
    const seq = ++loads;
    if (signal.aborted) return;
    try {
      const c = await call(`/v1/contention${query({ prefix, window_s: seconds, top: 100 })}`, { secret, signal });
      if (seq !== loads) return;
      const over = WINDOWS.find(([s]) => s === seconds)[1];
      asOf.replaceChildren(`${c.keys.length} keys over the last ${over}, most contended (handoffs and refusals) first; `
        + `as of ${new Date().toLocaleTimeString()}. Waits are the upper end of a doubling bucket (at most twice the true wait).`);
      changed(results, c, () => keepFocus(results, () => results.replaceChildren(
        table(HOT_COLUMNS, c.keys, null, `Nothing contended in the last ${over}.`), incomplete(c, 'its counts are') ?? '')));
    } catch (err) {
      showError(err);
    }
  }

  function apply() {
    prefix = input.value;
    seconds = Number(select.value);
    history.replaceState(null, '', `#/hot${query({ prefix, window: seconds })}`);
    bar.replaceChildren(tenantNav('hot', prefix));
    load();
  }

  const [form, auto] = controls([['Key prefix', input], ['Window', select]], apply, load, HOT_EVERY);
  view.replaceChildren(
    h('h2', { tabindex: '-1' }, 'Hot keys'), bar, form,
    h('p', { class: 'status', role: 'status' }, `Live: asked every ${HOT_EVERY} s while checked.`), asOf, results);
  load();
  return every(HOT_EVERY, () => (auto.checked ? load() : undefined));
}

// ——— A key's page: its queue and its holds over time ———

/// A key's queue (`GET /v1/{kind}/{key}/waiters`) as a table, first served
/// first, and what it may be missing.
export function queueTable(q, kind) {
  const columns = [
    ['#', (w) => w.position + 1], ['Owner', (w) => w.owner],
    ['Session', (w) => (w.session ? h('a', { href: sessionHref(w.session) }, h('code', {}, w.session)) : '—')],
    ['Priority', (w) => w.priority],
    ...(kind === 'rwlocks' ? [['Mode', (w) => w.mode ?? '—']] : []),
    ['Waiting since', (w) => stamp(w.waiting_since)], ['Gives up in', (w) => countdown(w.deadline)],
    ['Broker', (w) => w.broker], ['In memory', (w) => (w.in_memory ? 'yes' : 'no')],
  ];
  return [
    table(columns, q.waiters, null, 'Nobody waits.'),
    q.truncated ? h('p', { class: 'hint' }, `More wait: the first ${q.waiters.length} are shown.`) : null,
    q.complete ? null : h('p', { class: 'error' }, 'A broker did not answer: the waiters in its memory are missing.'),
  ].filter(Boolean);
}

/// The leases of a history (newest first), each from its grant (or
/// handoff) to its end (null: held still), oldest first. One that began
/// before the oldest event shown begins there.
function leasesOf(events) {
  const oldest = events.length ? Date.parse(events[events.length - 1].at) : 0;
  const open = new Map();
  const done = [];
  for (const e of [...events].reverse()) {
    const at = Date.parse(e.at);
    if (e.event === 'granted' || e.event === 'handed_off') {
      open.set(e.token, { owner: e.owner, token: e.token, from: at, how: e.event, end: null, to: null });
    } else if (e.event !== 'session_ended') {
      done.push({ owner: e.owner, token: e.token, from: oldest, how: 'earlier', ...open.get(e.token), end: e.event, to: at });
      open.delete(e.token);
    }
  }
  return [...done, ...open.values()].sort((a, b) => a.from - b.from);
}

/// Rows for `leases` so that none overlaps another in its row.
function rows(leases, now) {
  const ends = [];
  return leases.map((l) => {
    let row = ends.findIndex((end) => end <= l.from);
    if (row < 0) row = ends.push(0) - 1;
    ends[row] = l.to ?? now;
    return row;
  });
}

/// A key's history as bars over time: each lease from its grant to its
/// end, a row per lease held at once (semaphores, readers), coloured by
/// how it ended. The list below it says the same in words. Null without
/// events.
export function holdsChart(events) {
  const leases = leasesOf(events);
  if (!leases.length) return null;
  const now = Date.now() + skewMs;
  const row = rows(leases, now);
  const [width, left, right, lane] = [720, 8, 8, 22];
  const height = 16 + (Math.max(...row) + 1) * lane + 22;
  const from = leases[0].from;
  const to = Math.max(now, ...leases.map((l) => l.to ?? now));
  const x = (t) => left + ((t - from) / Math.max(1, to - from)) * (width - left - right);
  const bars = leases.map((l, i) => {
    const [x1, x2] = [x(l.from), Math.max(x(l.to ?? now), x(l.from) + 2)];
    const until = l.to === null ? 'held still' : `until ${new Date(l.to).toLocaleTimeString()} (${l.end.replace('_', ' ')})`;
    const text = `${l.owner}, token ${l.token}: ${l.how === 'earlier' ? 'from before' : `${l.how.replace('_', ' ')} at ${new Date(l.from).toLocaleTimeString()}`}, ${until}`;
    return svg('g', { class: `hold ${l.end ?? 'held'}` },
      svg('title', {}, text),
      svg('rect', { x: x1.toFixed(1), y: 8 + row[i] * lane, width: (x2 - x1).toFixed(1), height: lane - 6, rx: 3 }),
      x2 - x1 > 70 ? svg('text', { x: (x1 + 4).toFixed(1), y: 8 + row[i] * lane + 12 }, short(`${l.owner} #${l.token}`, Math.floor((x2 - x1) / 7))) : null);
  });
  const ticks = [from, (from + to) / 2, to].map((t, i) => svg('text', {
    class: 'tick', x: x(t), y: height - 6, 'text-anchor': ['start', 'middle', 'end'][i],
  }, i === 2 ? 'now' : new Date(t).toLocaleTimeString()));
  return h('figure', { class: 'holds-chart' },
    svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': `Who held it when: ${leases.length} leases, listed below.` },
      bars, ticks),
    h('figcaption', { class: 'hint' }, 'Who held it when (a bar per lease, from its grant to its end; the events are listed below).'));
}

// ——— Who waits for whom: GET /v1/waits-for drawn as a graph ———

/// A party's node: its session, or its owner.
const partyId = (p) => (p.session ? `session:${p.session}` : `owner:${p.owner}`);
const partyLabel = (p) => (p.session && p.owner === p.session ? `session ${short(p.session, 11)}` : short(p.owner));

/// The graph's nodes (id → party, in a cycle?), cycles first, each
/// cycle's parties together, then the others as they are reached from
/// each other (the order of a column's first parties).
function nodesOf({ edges, cycles }) {
  const nodes = new Map();
  const add = (p, cycle = false) => {
    const id = partyId(p);
    if (!nodes.has(id)) nodes.set(id, { id, party: p, cycle });
    if (cycle) nodes.get(id).cycle = true;
  };
  for (const cycle of cycles) for (const p of cycle) add(p, true);
  const next = new Map();
  for (const e of edges) {
    for (const [a, b] of [[e.waiter, e.holder], [e.holder, e.waiter]]) {
      next.set(partyId(a), [...(next.get(partyId(a)) ?? []), b]);
    }
  }
  // Breadth first from each party in turn: neighbours come next.
  const seen = new Set();
  for (const start of [...cycles.flat(), ...edges.flatMap((e) => [e.waiter, e.holder])]) {
    const queue = [start];
    while (queue.length) {
      const p = queue.shift();
      if (seen.has(partyId(p))) continue;
      seen.add(partyId(p));
      add(p);
      queue.push(...(next.get(partyId(p)) ?? []));
    }
  }
  return [...nodes.values()];
}

/// The graph's edges: one per waiter and holder, with the keys it waits for.
function linksOf(edges) {
  const links = new Map();
  for (const e of edges) {
    const id = `${partyId(e.waiter)} ${partyId(e.holder)}`;
    const link = links.get(id) ?? { from: partyId(e.waiter), to: partyId(e.holder), keys: [], cycle: false, refused: false };
    if (!link.keys.includes(e.storage_key)) link.keys.push(e.storage_key);
    link.cycle ||= e.in_cycle;
    link.refused ||= Boolean(e.refused);
    links.set(id, link);
  }
  return [...links.values()];
}

const NODE = 7;
/// The room between two columns, two parties of a column, and around.
const COLUMN = 240;
const ROW = 36;
const MARGIN = { x: 95, y: 28 };

/// How many waits lead from each party to one who waits for nobody: its
/// column, counted from the right. A wait that closes a cycle (back to a
/// party on the way) is not counted: a cycle stands left to right.
function depths(nodes, links) {
  const next = new Map(nodes.map((n) => [n.id, []]));
  for (const l of links) next.get(l.from).push(l.to);
  const depth = new Map();
  const walking = new Set();
  const of = (id) => {
    if (walking.has(id)) return -1;
    if (depth.has(id)) return depth.get(id);
    walking.add(id);
    const d = Math.max(-1, ...next.get(id).map(of)) + 1;
    walking.delete(id);
    depth.set(id, d);
    return d;
  };
  nodes.forEach((n) => of(n.id));
  return { depth, next };
}

/// Places the parties in columns, each left of those it waits for (so
/// that arrows point right, but for the wait that closes a cycle), a
/// column's parties in the order of the rows of those they wait for.
function placeInColumns(nodes, links) {
  const { depth, next } = depths(nodes, links);
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const deepest = Math.max(...depth.values());
  const columns = Array.from({ length: deepest + 1 }, () => []);
  for (const n of nodes) columns[depth.get(n.id)].push(n);
  const tallest = Math.max(...columns.map((c) => c.length));
  const rowOf = (n) => {
    const to = next.get(n.id).filter((id) => depth.get(id) < depth.get(n.id)).map((id) => byId.get(id).y);
    return to.length ? to.reduce((a, b) => a + b) / to.length : Infinity;
  };
  columns.forEach((column, d) => {
    if (d > 0) column.sort((a, b) => rowOf(a) - rowOf(b));
    column.forEach((n, i) => Object.assign(n, {
      x: MARGIN.x + (deepest - d) * COLUMN,
      y: MARGIN.y + (i + (tallest - column.length) / 2) * ROW,
    }));
  });
  return { width: 2 * MARGIN.x + deepest * COLUMN, height: 2 * MARGIN.y + (tallest - 1) * ROW };
}

/// A point of the curve from `a` to `b` through `c`, at `t` (0 to 1).
const along = (a, c, b, t) => [0, 1].map((i) => (1 - t) ** 2 * a[i] + 2 * (1 - t) * t * c[i] + t ** 2 * b[i]);
const xy = (p) => `${p[0].toFixed(1)},${p[1].toFixed(1)}`;

/// The path of an edge from `a` to `b`, and where its label goes (nearer
/// the waiter, as many may wait for one): bent to its left, so that two
/// who wait for each other have two edges; a loop on the right for one
/// that waits for itself.
function arc(a, b) {
  if (a === b) {
    const at = (dx, dy) => xy([a.x + dx, a.y + dy]);
    return { d: `M${at(NODE, -3)} C${at(40, -24)} ${at(40, 24)} ${at(NODE + 2, 4)}`, label: [a.x + 44, a.y + 4] };
  }
  const [dx, dy] = [b.x - a.x, b.y - a.y];
  const length = Math.hypot(dx, dy);
  const bend = Math.abs(dx) < 1 ? 16 + length * 0.25 : Math.min(36, length * 0.12);
  const c = [(a.x + b.x) / 2 - (dy / length) * bend, (a.y + b.y) / 2 + (dx / length) * bend];
  const toward = (p, by) => {
    const l = Math.hypot(c[0] - p[0], c[1] - p[1]);
    return [p[0] + ((c[0] - p[0]) / l) * by, p[1] + ((c[1] - p[1]) / l) * by];
  };
  const [start, end] = [toward([a.x, a.y], NODE + 1), toward([b.x, b.y], NODE + 3)];
  const label = along([a.x, a.y], c, [b.x, b.y], Math.abs(dx) < 1 ? 0.5 : 0.3);
  return { d: `M${xy(start)} Q${xy(c)} ${xy(end)}`, label: [label[0], label[1] + 4] };
}

/// A node: a dot and its label over it.
function node(n) {
  const p = n.party;
  return svg('g', { class: `node${n.cycle ? ' cycle' : ''}`, 'data-party': p.session ?? p.owner },
    svg('title', {}, p.session ? `session ${p.session} (owner ${p.owner})` : `owner ${p.owner}`),
    svg('circle', { cx: n.x.toFixed(1), cy: n.y.toFixed(1), r: NODE }),
    svg('text', { x: n.x.toFixed(1), y: (n.y - NODE - 4).toFixed(1), 'text-anchor': 'middle' }, partyLabel(p)));
}

/// An edge: its arrow and its keys.
function edge(link, byId) {
  const [a, b] = [byId.get(link.from), byId.get(link.to)];
  const { d, label } = arc(a, b);
  const keys = link.keys.join(', ');
  const how = link.refused ? 'would have waited (refused)' : 'waits';
  return svg('g', { class: `edge${link.cycle ? ' cycle' : ''}${link.refused ? ' refused' : ''}`, 'data-waiter': a.party.session ?? a.party.owner, 'data-holder': b.party.session ?? b.party.owner },
    svg('title', {}, `${partyLabel(a.party)} ${how} for ${partyLabel(b.party)} (${keys})`),
    svg('path', { d, 'marker-end': `url(#wf-arrow${link.cycle ? '-cycle' : ''})` }),
    svg('text', { x: label[0].toFixed(1), y: label[1].toFixed(1), 'text-anchor': 'middle' }, short(keys, 24)));
}

/// The graph in SVG: parties in columns, an arrow from each waiter to each
/// holder it waits for (labelled with the key), cycles in red; `what`
/// begins its text alternative.
function graph(g, what = 'Wait-for graph') {
  const nodes = nodesOf(g);
  if (!nodes.length) return h('p', { class: 'empty' }, 'Nobody waits for anybody.');
  const links = linksOf(g.edges);
  const { width, height } = placeInColumns(nodes, links);
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const arrow = (id, cls) => svg('marker', {
    id, class: `arrow ${cls}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto',
  }, svg('path', { d: 'M0,0 L10,5 L0,10 z' }));
  const said = `${what}: ${nodes.length} parties, ${links.length} waits, ${g.cycles.length} cycles; listed below.`;
  return h('figure', { class: 'graph' },
    svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': said },
      svg('title', {}, said),
      svg('defs', {}, arrow('wf-arrow', ''), arrow('wf-arrow-cycle', 'cycle')),
      links.map((l) => edge(l, byId)), nodes.map(node)));
}

/// The cycles in words: each one's parties and the keys they wait for.
function cycleList({ edges, cycles }) {
  if (!cycles.length) return h('p', { class: 'empty' }, 'No cycles: nobody waits for anybody round.');
  return h('ol', { class: 'cycles' }, cycles.map((cycle) => {
    const ids = new Set(cycle.map(partyId));
    const keys = [...new Set(edges.filter((e) => e.in_cycle && ids.has(partyId(e.waiter)) && ids.has(partyId(e.holder)))
      .map((e) => e.storage_key))];
    return h('li', { class: 'cycle' }, `${cycle.length === 1 ? 'Waiting for itself' : 'Waiting for each other'}: `,
      cycle.map((p, i) => [i ? ', ' : '', partyCell(p)]), keys.length ? ` (keys ${keys.join(', ')})` : '');
  }));
}

/// A refused wait's cycle as a graph: each step's party waits for the
/// next step's (the last's for the first's), the refused wait (the first
/// step, never queued) dashed.
function refusedGraph({ cycle }) {
  const parties = cycle.map((step) => ({ session: step.session, owner: step.owner }));
  const edges = cycle.map((step, i) => ({
    waiter: parties[i], holder: parties[(i + 1) % parties.length], kind: step.kind,
    storage_key: step.storage_key, in_cycle: true, refused: i === 0,
  }));
  return graph({ edges, cycles: [parties] }, 'Refused cycle');
}

/// The waits refused lately as deadlocks: each one's cycle drawn, and in
/// words.
function refusedList(refused) {
  if (!refused.length) return h('p', { class: 'empty' }, 'No wait was refused as a deadlock in the last 10 minutes.');
  return h('ol', { class: 'refused' }, refused.map((r) => {
    const [first] = r.cycle;
    return h('li', { class: 'refused' },
      h('p', {}, stamp(r.at), ': ', partyCell(first), ` was refused a wait for ${first.kind} `,
        linkTo(keyHref(first.kind, first.storage_key), first.storage_key),
        ' (409 deadlock): it would have closed this cycle of ',
        `${r.cycle.length} sessions (the dashed arrow).`),
      refusedGraph(r));
  }));
}

/// Every edge in a table: the graph's text alternative.
const EDGE_COLUMNS = [
  ['Waiter', (e) => partyCell(e.waiter)], ['Waits for', (e) => partyCell(e.holder)], ['Kind', (e) => e.kind],
  ['Key', (e) => linkTo(keyHref(e.kind, e.storage_key), e.storage_key)], ['Since', (e) => stamp(e.since)],
  ['In a cycle', (e) => (e.in_cycle ? h('strong', { class: 'error' }, 'yes') : 'no')],
];

/// The wait-for graph (`#/waits-for?prefix=`): drawn, its cycles listed,
/// and every edge in a table; asked again every GRAPH_EVERY seconds while
/// Live is checked, or on Refresh.
export function waitsFor({ signal, secret, prefix }) {
  const drawing = h('div', {});
  const cycles = h('div', {});
  const refused = h('div', {});
  const results = h('div', { class: 'results' });
  const asOf = h('p', { class: 'hint' });
  const bar = h('div', {}, tenantNav('waits-for', prefix));
  const input = prefixField(prefix);
  let loads = 0;

  async function load() {
    const seq = ++loads;
    if (signal.aborted) return;
    try {
      const g = await call(`/v1/waits-for${query({ prefix })}`, { secret, signal });
      if (seq !== loads) return;
      asOf.replaceChildren(`As of ${new Date().toLocaleTimeString()}.`);
      changed(results, g, () => keepFocus(view, () => {
        drawing.replaceChildren(graph(g));
        cycles.replaceChildren(cycleList(g));
        refused.replaceChildren(refusedList(g.refused ?? []));
        results.replaceChildren(table(EDGE_COLUMNS, g.edges, null, 'Nobody waits.'),
          g.truncated ? h('p', { class: 'hint' }, 'More wait than shown: some edges are missing.') : '',
          incomplete(g, 'the waiters in its memory are') ?? '');
      }));
    } catch (err) {
      showError(err);
    }
  }

  function apply() {
    prefix = input.value;
    history.replaceState(null, '', `#/waits-for${query({ prefix })}`);
    bar.replaceChildren(tenantNav('waits-for', prefix));
    load();
  }

  const [form, auto] = controls([['Key prefix', input]], apply, load, GRAPH_EVERY);
  view.replaceChildren(
    h('h2', { tabindex: '-1' }, 'Who waits for whom'), bar, form,
    h('p', { class: 'status', role: 'status' }, `Live: asked every ${GRAPH_EVERY} s while checked.`), asOf,
    drawing, h('h3', {}, 'Cycles'), cycles, h('h3', {}, 'Waits'), results,
    h('h3', {}, 'Refused deadlocks'), refused);
  load();
  return every(GRAPH_EVERY, () => (auto.checked ? load() : undefined));
}
