// The console: a tenant's leases and sessions (live), one key's page (its
// queue and history), one session's page (its leases, Close session), the
// contention views (contention.js), and the admin's tenants with their
// policies and leases, and a tenant's policy page (versions with
// rollback, the shadow report with promote). Views are
// picked by the URL's hash; each view's fetches, stream and timers end
// with its AbortController. The helpers other modules use are exported.

import { call, follow, query, segment, session, skewMs } from './api.js';
import { holdsChart, hotKeys, overview, queueTable, waitsFor } from './contention.js';

const PAGE = 50;
export const view = document.getElementById('view');
const alert = document.getElementById('alert');
const who = document.getElementById('who');
let current = null;

/// `el` with attributes (`on...` are listeners) and children.
function build(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : value);
  }
  el.append(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
  return el;
}

/// An element with attributes (`on...` are listeners) and children.
export const h = (tag, attrs = {}, ...children) => build(document.createElement(tag), attrs, children);
/// The same for an SVG element (charts and graphs).
export const svg = (tag, attrs = {}, ...children) =>
  build(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs, children);

/// Time left until `at` by the broker's clock, in words.
function left(at) {
  const s = Math.ceil((Date.parse(at) - Date.now() - skewMs) / 1000);
  if (s <= 0) return 'expired';
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export const countdown = (at) => (at ? h('time', { datetime: at, 'data-expires': at, title: at }, left(at)) : '—');
const keyOf = (item) => item.key ?? item.storage_key;
const holder = (x) => (x ? `${x.owner} (token ${x.token})` : '—');
export const list = (lines) => (lines.length ? h('ul', { class: 'plain' }, lines.map((l) => h('li', {}, l))) : '—');
const keyCell = (item, href) => (href?.(item) ? h('a', { href: href(item) }, keyOf(item)) : keyOf(item));
const when = (at) => new Date(at).toLocaleString();
export const stamp = (at) => h('time', { datetime: at }, when(at));
/// A duration in milliseconds, as the API gave it: whole seconds in `s`.
const span = (ms) => (ms % 1000 ? `${ms} ms` : `${ms / 1000} s`);
const count = (n, what) => `${n} ${what}${n === 1 ? '' : 's'}`;
const fact = (term, value) => [h('dt', {}, term), h('dd', {}, value)];
export const sessionHref = (id) => `#/session/${segment(id)}`;
/// Why a session ended, from an event's `reason`.
const endedBy = (reason) => (reason === 'session_expired' ? 'expired' : 'closed');

/// What each tab lists: its columns (label, cell), the `kind` of its
/// events (`event`; elections make none), the kind as the API names it
/// (`name`) and, for a key page, what one is called (`one`). Sessions are
/// matched by name (`byName`), follow every event of a session (`wants`,
/// what the status line `says` of one) and are a tenant's only
/// (`tenantOnly`: the admin has no such listing).
const KINDS = {
  locks: {
    title: 'Locks', event: 'lock', name: 'lock', one: 'Lock',
    columns: [['Key', keyCell], ['Owner', (i) => i.owner], ['Token', (i) => i.token],
      ['Holds', (i) => i.hold_count], ['Expires in', (i) => countdown(i.expires_at)], ['Waiters', (i) => i.waiters]],
  },
  semaphores: {
    title: 'Semaphores', event: 'semaphore', name: 'semaphore', one: 'Semaphore',
    columns: [['Key', keyCell], ['In use', (i) => `${i.holders.length} of ${i.permits}`],
      ['Holders', (i) => list(i.holders.map((x) => `${x.owner} (slot ${x.slot}, token ${x.token})`))],
      ['Waiters', (i) => i.waiters]],
  },
  rwlocks: {
    title: 'RW locks', event: 'rwlock', name: 'rwlock', one: 'RW lock',
    columns: [['Key', keyCell], ['Writer', (i) => holder(i.writer)],
      ['Readers', (i) => list(i.readers.map(holder))], ['Waiters', (i) => i.waiters]],
  },
  elections: {
    title: 'Elections', event: null, name: 'election', one: 'Election',
    columns: [['Name', keyCell], ['Leader', (i) => i.leader ?? '—'], ['Term', (i) => i.term ?? '—'],
      ['Expires in', (i) => countdown(i.expires_at)]],
  },
  sessions: {
    title: 'Sessions', event: null, byName: true, tenantOnly: true, empty: 'No sessions open.',
    wants: (d) => d.kind === 'session' || Boolean(d.session),
    says: (name, d) => (d.kind === 'session' ? `session ${d.session} ${endedBy(d.reason)}`
      : `${name} ${d.storage_key} in session ${d.session}`),
    columns: [['Id', (i) => h('a', { href: sessionHref(i.id) }, h('code', {}, i.id))], ['Name', (i) => i.name ?? '—'],
      ['TTL', (i) => span(i.ttl_ms)], ['Expires in', (i) => countdown(i.expires_at)], ['Created', (i) => stamp(i.created_at)]],
  },
};

/// The tabs `base` lists (the admin's routes have no sessions).
const kindsOf = (base) => Object.entries(KINDS).filter(([, s]) => base === '/v1' || !s.tenantOnly);

/// A tenant's pages besides the listings: their hash and title; `prefix`
/// says whether they take the key prefix along.
const PAGES = [['overview', 'Overview', false], ['hot', 'Hot keys', true], ['waits-for', 'Who waits', true]];

/// The tabs: the kinds `base` lists, then (a tenant's) the other pages;
/// `here` is marked as the current one, `hash(k, prefix)` links a kind.
function tabs(base, here, prefix, hash) {
  const tab = (k, title, href) => h('li', {}, h('a', { href, 'aria-current': k === here ? 'page' : null }, title));
  return h('ul', { class: 'tabs' }, kindsOf(base).map(([k, s]) => tab(k, s.title, hash(k, prefix))),
    base === '/v1' ? PAGES.map(([k, title, keeps]) => tab(k, title, `#/${k}${keeps ? query({ prefix }) : ''}`)) : []);
}

/// A tenant's view `k` with `prefix`.
const tenantHash = (k, prefix) => `#/${k}${query({ prefix })}`;

/// A tenant's tab bar, on the page `here`.
export const tenantNav = (here, prefix = '') => h('nav', { 'aria-label': 'Views' }, tabs('/v1', here, prefix, tenantHash));

/// The page of the key `key` of `kind` (as the API names kinds: `lock`…),
/// if the console has one for that kind.
export function keyHref(kind, key) {
  const found = Object.keys(KINDS).find((k) => KINDS[k].name === kind && KINDS[k].one);
  return found ? `#/key/${found}/${segment(key)}` : null;
}

/// Where a lease's key has its page (`kind` as sessions name it).
const leasePage = (lease) => keyHref(lease.kind, lease.key);

export function table(columns, items, href, empty = 'Nothing held.') {
  if (!items.length) return h('p', { class: 'empty' }, empty);
  return h('table', {},
    h('thead', {}, h('tr', {}, columns.map(([label]) => h('th', { scope: 'col' }, label)))),
    h('tbody', {}, items.map((item) => h('tr', {},
      columns.map(([label, cell]) => h('td', { 'data-label': label }, cell(item, href)))))));
}

export function showError(err) {
  if (err.name === 'AbortError') return; // A view that was left.
  if (err.status === 401) {
    session.clear();
    route();
  }
  alert.textContent = err.message;
}

function note(text) {
  alert.textContent = '';
  view.querySelector('.status')?.replaceChildren(text);
}

/// Says in `status` whether the event stream is open.
const streamState = (status) => (state) => {
  status.textContent = state === 'live' ? 'Live: following changes' : 'Reconnecting…';
};

/// Calls `fn` once, a moment after the last of a burst of calls.
function debounced(fn, ms = 150) {
  let timer;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

/// A tick function (see `onTick`) that runs `load` every `seconds` ticks,
/// never two at once.
export function every(seconds, load) {
  let ticks = 0;
  let busy = false;
  return async () => {
    if (busy || ++ticks < seconds) return;
    ticks = 0;
    busy = true;
    try {
      await load();
    } finally {
      busy = false;
    }
  };
}

const shown = new WeakMap();
/// Runs `render` unless `el` shows `data` already (a poll that brings
/// nothing new leaves the page, and the keyboard focus, alone).
export function changed(el, data, render) {
  const text = JSON.stringify(data);
  if (shown.get(el) === text) return;
  shown.set(el, text);
  render();
}

/// A listing with tabs, a prefix filter and paging. `base` is the API path
/// the kind is appended to; `hash(kind, prefix)` the URL of a tab; `href`
/// a key's page, if any; `actions(item, reload)` extra cells of a row.
function listing({ signal, secret, kind, prefix, base, hash, heading, href, actions, back: up, aside }) {
  const spec = KINDS[kind];
  let cursor = null;
  let next = null;
  let loads = 0;
  const back = [];
  const expired = new Set();
  const results = h('div', { class: 'results' });
  const status = h('p', { class: 'status', role: 'status' });
  const prev = h('button', { type: 'button', onclick: () => { cursor = back.pop() ?? null; load(); } }, 'Previous page');
  const more = h('button', { type: 'button', onclick: () => { back.push(cursor); cursor = next; load(); } }, 'Next page');
  const input = h('input', { id: 'prefix', type: 'search', value: prefix, autocomplete: 'off', spellcheck: 'false' });
  const columns = actions && kind === 'locks' ? [...spec.columns, ['Actions', (i) => actions(i, load)]] : spec.columns;

  async function load() {
    const seq = ++loads;
    if (signal.aborted) return;
    try {
      const page = await call(`${base}/${kind}${query({ prefix, cursor, limit: PAGE })}`, { secret, signal });
      if (seq !== loads) return;
      next = page.next;
      results.replaceChildren(table(columns, page.items, href, spec.empty));
      prev.disabled = cursor === null;
      more.disabled = !next;
    } catch (err) {
      showError(err);
    }
  }
  const soon = debounced(load);

  const wants = spec.wants ?? (spec.event && ((data) => data.kind === spec.event));
  const says = spec.says ?? ((name, data) => `${name} ${data.storage_key} (${data.owner}, token ${data.token})`);
  let stream = null;
  function live() {
    if (!wants || base !== '/v1') {
      status.textContent = wants ? 'Not live (the event stream needs a tenant key): use Refresh.' : `${spec.title} make no events: use Refresh.`;
      return;
    }
    status.textContent = 'Connecting…';
    stream?.abort();
    stream = new AbortController();
    signal.addEventListener('abort', () => stream.abort(), { once: true });
    // A name prefix is no key prefix: a session's leases may have any key.
    follow(spec.byName ? '' : prefix, secret, stream.signal, (name, data) => {
      if (name === 'reset') soon(); // Events were missed: show what is.
      if (!wants(data)) return;
      status.textContent = `Live: ${says(name, data)}`;
      soon();
    }, streamState(status));
  }

  const nav = h('nav', { 'aria-label': 'Views' }, tabs(base, kind, prefix, hash));

  view.replaceChildren(
    ...(up ? [h('p', {}, h('a', { href: up[0] }, up[1]), ...(aside ? [' · ', h('a', { href: aside[0] }, aside[1])] : []))] : []),
    h('h2', { tabindex: '-1' }, heading),
    nav,
    h('form', {
      role: 'search', class: 'filter',
      onsubmit: (e) => {
        e.preventDefault();
        prefix = input.value;
        cursor = null;
        back.length = 0;
        history.replaceState(null, '', hash(kind, prefix));
        nav.replaceChildren(tabs(base, kind, prefix, hash));
        load();
        live();
      },
    }, h('label', { for: 'prefix' }, spec.byName ? 'Name prefix' : 'Key prefix'), input, h('button', { type: 'submit' }, 'Filter'),
    h('button', { type: 'button', onclick: load }, 'Refresh')),
    status, results, h('div', { class: 'pager' }, prev, more));
  load();
  live();
  // A lease that runs out makes no event until the key changes again.
  return () => {
    for (const t of results.querySelectorAll('[data-expires]')) {
      if (t.textContent === 'expired' && !expired.has(t.dateTime)) {
        expired.add(t.dateTime);
        soon();
      }
    }
  };
}

/// What a key's page says of who holds it, by kind (`s`: its status).
const HOLDING = {
  locks: (s) => [fact('Holder', s.held ? s.owner : 'nobody (free)'), fact('Token', s.token ?? '—'),
    fact('Holds', s.hold_count ?? '—'), fact('Expires in', countdown(s.expires_at)),
    fact('Session', s.session ? h('a', { href: sessionHref(s.session) }, h('code', {}, s.session)) : '—')],
  semaphores: (s) => [fact('Permits', s.permits ?? '—'), fact('Holders', list(s.holders.map((x) =>
    h('span', {}, `${x.owner} (slot ${x.slot}, token ${x.token}), expires in `, countdown(x.expires_at)))))],
  rwlocks: (s) => [fact('Writer', s.writer ? h('span', {}, `${holder(s.writer)}, expires in `, countdown(s.writer.expires_at)) : '—'),
    fact('Readers', list(s.readers.map((x) => h('span', {}, `${holder(x)}, expires in `, countdown(x.expires_at)))))],
  elections: (s) => [fact('Leader', s.leader ?? 'nobody'), fact('Term', s.term ?? '—'),
    fact('Expires in', countdown(s.expires_at))],
};

/// Seconds between two asks of a key's queue (joining a queue makes no event).
const QUEUE_EVERY = 3;

/// One key's page: who holds it, until when, its queue and its history
/// (elections keep none, and make no events: their page is asked again
/// with the queue).
function keyPage({ signal, secret, kind, key }) {
  const spec = KINDS[kind];
  const path = `/v1/${kind}/${segment(key)}`;
  const facts = h('dl', { class: 'facts' });
  const queue = h('div', { class: 'results' });
  const holds = h('div', { class: 'holds' });
  const timeline = h('ol', { class: 'timeline' });
  const status = h('p', { class: 'status', role: 'status' }, spec.event ? 'Connecting…'
    : `${spec.title} make no events: asked again every ${QUEUE_EVERY} s.`);
  let storageKey = null;
  let loads = 0;

  function history(events) {
    timeline.replaceChildren(...(events.length ? events.map((e) => h('li', { class: e.event },
      stamp(e.at), ' ', h('strong', {}, e.event.replace('_', ' ')),
      ` ${e.owner}, token ${e.token}${e.reason ? ` (${e.reason.replace('_', ' ')})` : ''}`))
      : [h('li', {}, 'No events recorded.')]));
  }

  async function load() {
    const seq = ++loads;
    if (signal.aborted) return;
    try {
      const [s, waiting, past] = await Promise.all([
        call(path, { secret, signal }),
        call(`${path}/waiters${query({ limit: 100 })}`, { secret, signal }),
        spec.event ? call(`${path}/history${query({ limit: 100 })}`, { secret, signal }) : null,
      ]);
      if (seq !== loads) return;
      changed(facts, s, () => facts.replaceChildren(...fact('Storage key', s.storage_key), ...HOLDING[kind](s).flat(),
        ...fact('Waiters', s.waiters ?? waiting.waiters.length)));
      changed(queue, waiting, () => queue.replaceChildren(...queueTable(waiting, kind)));
      if (past) {
        holds.replaceChildren(holdsChart(past.events) ?? ''); // Its "now" moves on.
        changed(timeline, past, () => history(past.events));
      }
      if (storageKey === null && spec.event) {
        storageKey = s.storage_key;
        follow(storageKey, secret, signal, (name, data) => {
          if (name === 'reset' || (data.kind === spec.event && data.storage_key === storageKey)) soon();
        }, streamState(status));
      }
    } catch (err) {
      showError(err);
    }
  }
  const soon = debounced(load);
  const poll = every(QUEUE_EVERY, load);

  view.replaceChildren(
    h('p', {}, h('a', { href: `#/${kind}` }, `← ${spec.title}`)),
    h('h2', { tabindex: '-1' }, `${spec.one} `, h('code', {}, key)),
    status, facts, h('h3', {}, 'Queue (served in this order)'), queue,
    ...(spec.event ? [h('h3', {}, 'History (newest first)'), holds, timeline] : []));
  load();
  return () => {
    if ([...facts.querySelectorAll('[data-expires]')].some((t) => t.textContent === 'expired')) soon();
    poll();
  };
}

/// One session's page: what it is, until when, the leases held in it (each
/// linking to its key's page) and a Close session button. Follows its
/// leases' events and its end; once it has ended it says so and asks the
/// broker nothing more (the session is gone: a 404).
function sessionPage({ signal, secret, id }) {
  const path = `/v1/sessions/${segment(id)}`;
  const facts = h('dl', { class: 'facts' }, fact('Id', h('code', {}, id)));
  const leases = h('div', { class: 'results' });
  const status = h('p', { class: 'status', role: 'status' }, 'Connecting…');
  const stream = new AbortController();
  signal.addEventListener('abort', () => stream.abort(), { once: true });
  let shown = null;
  let over = false; // Ended, or being closed: nothing more to load.
  let loads = 0;
  let loading = Promise.resolve();

  const describe = (s, expiry) => facts.replaceChildren(...[fact('Id', h('code', {}, s.id)),
    fact('Name', s.name ?? '—'), fact('TTL', span(s.ttl_ms)), fact('Lock delay', span(s.lock_delay_ms)),
    fact('Created', stamp(s.created_at)), fact('Expires in', expiry)].flat());

  function ended(text) {
    over = true;
    loads += 1; // An answer under way is of no use any more.
    stream.abort();
    if (shown) describe(shown, 'ended');
    leases.replaceChildren(h('p', { class: 'empty' }, 'None: its leases were released when it ended.'));
    close.disabled = true;
    refresh.disabled = true;
    status.textContent = text;
  }

  function load() {
    loading = reload();
    return loading;
  }

  async function reload() {
    const seq = ++loads;
    if (signal.aborted || over) return;
    try {
      const s = await call(path, { secret, signal });
      if (seq !== loads) return;
      shown = s;
      describe(s, countdown(s.expires_at));
      leases.replaceChildren(table([['Kind', (l) => l.kind], ['Key', keyCell], ['Token', (l) => l.token],
        ['Slot or mode', (l) => (Number.isInteger(l.slot) ? `slot ${l.slot}` : l.mode ?? '—')]],
      s.leases, leasePage, 'No leases held in it.'));
    } catch (err) {
      if (seq !== loads) return;
      if (err.code === 'session_not_found') ended('This session has ended (closed or expired): its leases were released.');
      else showError(err);
    }
  }
  const soon = debounced(load);

  const close = confirmed('Close session', { class: 'danger' },
    () => (shown ? `Close session ${shown.name ?? id}? Its ${count(shown.leases.length, 'lease')} will be released at once.`
      : `Close session ${id}? Every lease held in it will be released at once.`),
    async () => {
      over = true; // Its end's events need no reload.
      await loading; // Nor may a load under way meet the 404 of a closed session.
      try {
        const r = await call(path, { method: 'DELETE', secret, signal });
        ended(`Session closed: ${count(r.released, 'lease')} released.`);
      } catch (err) {
        if (err.code === 'session_not_found') return ended('This session had already ended: its leases were released.');
        over = false;
        throw err;
      }
    });
  const refresh = h('button', { type: 'button', onclick: load }, 'Refresh');

  // Every event (a session's leases may have any key): its leases' and its end.
  follow('', secret, stream.signal, (name, data) => {
    if (over) return;
    if (data.kind === 'session' && data.session === id) {
      ended(`This session has ended (${endedBy(data.reason)}): its leases were released.`);
    } else if (name === 'reset' || data.session === id) {
      soon();
    }
  }, streamState(status));

  view.replaceChildren(
    h('p', {}, h('a', { href: '#/sessions' }, '← Sessions')),
    h('h2', { tabindex: '-1' }, 'Session ', h('code', {}, id)),
    h('p', {}, close, ' ', refresh),
    status, facts, h('h3', {}, 'Leases held in it'), leases);
  load();
  // A keepalive makes no event: when the countdown runs out, ask again
  // (it was kept alive, or it has ended).
  return () => {
    if (!over && facts.querySelector('[data-expires]')?.textContent === 'expired') soon();
  };
}

/// The admin's first view: every tenant and its policy.
async function tenants({ signal, secret }) {
  const body = h('div', { class: 'results' });
  view.replaceChildren(h('h2', { tabindex: '-1' }, 'Tenants'), body);
  try {
    const { tenants } = await call('/v1/admin/tenants', { secret, signal });
    body.replaceChildren(table([
      ['Tenant', (t) => h('a', { href: `#/admin/${segment(t.name)}/locks` }, t.name)],
      ['Policy', (t) => h('a', { href: `#/admin/${segment(t.name)}/policy`, 'aria-label': `Policy of ${t.name}` }, t.policy.name)],
      ['Version', (t) => t.policy.version],
      ['Loaded', (t) => (t.policy.name === 'loading' ? 'not yet' : when(t.policy.loaded_at))],
      ['File', (t) => t.policy.file ?? 'built-in'],
      ['Last error', (t) => (t.last_error ? h('span', { class: 'error' }, t.last_error) : 'none')],
      ['Shadow', (t) => (t.shadow ? `${t.shadow.name} ${t.shadow.version}` : 'none')],
    ], tenants));
  } catch (err) {
    showError(err);
  }
}

/// A button that asks `question` first, then runs `action` (whose failure
/// shows in the alert).
const confirmed = (label, attrs, question, action) => h('button', {
  type: 'button', ...attrs,
  onclick: async () => {
    if (!window.confirm(question())) return;
    try {
      await action();
    } catch (err) {
      showError(err);
    }
  },
}, label);

/// A tenant's policy page (admin): the versions kept, each but the one in
/// force with a Roll back button, and the shadow candidate's report with a
/// Promote button. Not live: Refresh reloads it (a re-render would take
/// the keyboard focus away from the buttons).
function policyPage({ signal, secret, tenant }) {
  const base = `/v1/admin/tenants/${segment(tenant)}/policy`;
  const versions = h('div', { class: 'results' });
  const shadow = h('div', { class: 'results' });
  const status = h('p', { class: 'status', role: 'status' });
  let loads = 0;
  let loading = Promise.resolve();
  // After the load under way: its report fetch must not race the action
  // that ends the shadow (a 404, logged by the browser as an error).
  const post = async (path, body) => {
    await loading;
    return call(`${base}/${path}`, { method: 'POST', secret, signal, body });
  };

  const rollback = (v) => confirmed('Roll back', { class: 'danger', 'aria-label': `Roll back to ${v.id}` },
    () => `Put version ${v.id} (${v.name} ${v.version}) back in force for ${tenant}?`,
    async () => {
      await post('rollback', { version: v.id });
      await load();
      note(`Rolled back to ${v.id} (${v.name} ${v.version}).`);
    });

  function shadowReport(report) {
    const c = report.candidate;
    const counts = ['naming', 'fairness', 'backoff', 'timing', 'deadlocks'].map((e) => ({ export: e, ...report.counts[e] }));
    const promote = confirmed('Promote', { class: 'danger', 'aria-label': `Promote ${c.id}` },
      () => `Promote ${c.name} ${c.version} (${c.id}) to be ${tenant}'s policy? It decides from then on.`,
      async () => {
        await post('promote', {});
        await load();
        note(`Promoted ${c.id} (${c.name} ${c.version}): it is in force.`);
      });
    return [
      h('dl', { class: 'facts' },
        h('dt', {}, 'Candidate'), h('dd', {}, `${c.name} ${c.version} `, h('code', {}, c.id)),
        h('dt', {}, 'Loaded'), h('dd', {}, when(c.loaded_at)),
        h('dt', {}, 'Compared with'), h('dd', {}, report.active ? h('code', {}, report.active) : 'no policy loaded')),
      h('h4', {}, 'Answers per export'),
      table([['Export', (r) => r.export], ['Agree', (r) => r.agree], ['Disagree', (r) => r.disagree],
        ['Failed', (r) => r.failed], ['Dropped', (r) => r.dropped]], counts),
      h('h4', {}, 'Latest disagreements (newest first)'),
      report.disagreements.length
        ? table([['When', (d) => stamp(d.at)], ['Call', (d) => d.export],
          ['Input', (d) => d.input], ['In force', (d) => d.active], ['Candidate', (d) => d.candidate]], report.disagreements)
        : h('p', { class: 'empty' }, 'No disagreements yet.'),
      h('p', {}, promote),
    ];
  }

  function load() {
    loading = reload();
    return loading;
  }

  async function reload() {
    const seq = ++loads;
    if (signal.aborted) return;
    try {
      const [kept, { tenants }] = await Promise.all([
        call(`${base}/versions`, { secret, signal }),
        call('/v1/admin/tenants', { secret, signal }),
      ]);
      // Asked only when there is one (a 404 would be logged as an error);
      // one dropped in between is as good as none.
      const report = tenants.find((t) => t.name === tenant)?.shadow
        ? await call(`${base}/shadow`, { secret, signal }).catch((err) => {
          if (err.status === 404) return null;
          throw err;
        })
        : null;
      if (seq !== loads) return;
      versions.replaceChildren(table([
        ['Id', (v) => h('code', {}, v.id)], ['Name', (v) => v.name], ['Version', (v) => v.version],
        ['Loaded', (v) => when(v.loaded_at)], ['By', (v) => v.loaded_by],
        ['Active', (v) => (v.active ? 'in force' : '—')],
        ['Actions', (v) => (v.active ? '' : rollback(v))],
      ], kept.versions));
      shadow.replaceChildren(...(report ? shadowReport(report)
        : [h('p', { class: 'empty' }, 'No shadow candidate is loaded (PUT …/policy?mode=shadow, or lockctl policy shadow).')]));
    } catch (err) {
      showError(err);
    }
  }

  view.replaceChildren(
    h('p', {}, h('a', { href: '#/admin' }, '← Tenants'), ' · ', h('a', { href: `#/admin/${segment(tenant)}/locks` }, 'Leases')),
    h('h2', { tabindex: '-1' }, `Policy of ${tenant}`),
    h('p', {}, h('button', { type: 'button', onclick: load }, 'Refresh')),
    status,
    h('h3', {}, 'Versions (newest first)'), versions,
    h('h3', {}, 'Shadow candidate'), shadow);
  load();
}

/// The force-release button of an admin's lock row.
const forceRelease = (tenant, secret, signal) => (item, reload) => confirmed('Force release',
  { class: 'danger', 'aria-label': `Force release ${keyOf(item)}` },
  () => `Force-release ${keyOf(item)}, held by ${item.owner} (token ${item.token})?`,
  async () => {
    const r = await call(`/v1/admin/tenants/${segment(tenant)}/locks/${segment(keyOf(item))}/release`,
      { method: 'POST', secret, signal });
    await reload();
    note(`Released ${r.key} from ${r.owner} (token ${r.token})${r.handed_off ? '; handed to the next waiter' : ''}.`);
  });

function signIn() {
  const input = h('input', { id: 'secret', type: 'password', required: true, autocomplete: 'off' });
  const role = (value, text, checked) => h('label', {},
    h('input', { type: 'radio', name: 'role', value, checked }), ` ${text}`);
  const form = h('form', {
    class: 'signin',
    onsubmit: async (e) => {
      e.preventDefault();
      const chosen = form.elements.role.value;
      try {
        await call(chosen === 'admin' ? '/v1/admin/tenants' : '/v1/locks?limit=1', { secret: input.value });
        session.set({ role: chosen, secret: input.value });
        go(chosen === 'admin' ? '#/admin' : '#/locks');
      } catch (err) {
        alert.textContent = err.status === 401 || err.status === 403 ? `Not accepted: ${err.message}` : err.message;
      }
    },
  }, h('fieldset', {}, h('legend', {}, 'Sign in as'),
    role('tenant', 'Tenant (API key)', true), role('admin', 'Admin (admin token)', false)),
  h('label', { for: 'secret' }, 'Key or token'), input,
  h('button', { type: 'submit' }, 'Open'),
  h('p', { class: 'hint' }, 'Kept in this tab’s session storage only; closing the tab forgets it.'));
  view.replaceChildren(h('h2', { tabindex: '-1' }, 'Sign in'), form);
  input.focus();
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

let onTick = null;

/// Shows the view the hash names.
function route() {
  current?.abort();
  current = new AbortController();
  alert.textContent = '';
  onTick = null;
  const me = session.get();
  who.replaceChildren(...(me ? [`${me.role === 'admin' ? 'Admin' : 'Tenant'} `,
    h('button', { type: 'button', onclick: () => { session.clear(); go('#/'); } }, 'Sign out')] : []));
  if (!me) return signIn();
  const [path, search] = location.hash.slice(1).split('?');
  const params = new URLSearchParams(search);
  const prefix = params.get('prefix') ?? '';
  const [first, second, ...rest] = path.split('/').filter(Boolean).map(decodeURIComponent);
  const ctx = { signal: current.signal, secret: me.secret, prefix };
  if (me.role === 'admin') {
    if (first === 'admin' && second && rest[0] === 'policy') {
      policyPage({ ...ctx, tenant: second });
    } else if (first === 'admin' && second && KINDS[rest[0]] && !KINDS[rest[0]].tenantOnly) {
      onTick = listing({
        ...ctx, kind: rest[0], base: `/v1/admin/tenants/${segment(second)}`, heading: `Tenant ${second}`,
        hash: (k, p) => `#/admin/${segment(second)}/${k}${query({ prefix: p })}`,
        actions: forceRelease(second, me.secret, current.signal), back: ['#/admin', '← Tenants'],
        aside: [`#/admin/${segment(second)}/policy`, 'Policy versions and shadow'],
      });
    } else {
      tenants(ctx);
    }
  } else if (first === 'session' && second) {
    onTick = sessionPage({ ...ctx, id: second });
  } else if (first === 'key' && KINDS[second]?.one && rest.length) {
    onTick = keyPage({ ...ctx, kind: second, key: rest.join('/') });
  } else if (first === 'overview') {
    onTick = overview(ctx);
  } else if (first === 'hot') {
    onTick = hotKeys({ ...ctx, windowS: params.get('window') });
  } else if (first === 'waits-for') {
    onTick = waitsFor(ctx);
  } else {
    const kind = KINDS[first] ? first : 'locks';
    onTick = listing({
      ...ctx, kind, base: '/v1', heading: KINDS[kind].title, hash: tenantHash,
      href: KINDS[kind].one ? (i) => `#/key/${kind}/${segment(keyOf(i))}` : null,
    });
  }
  view.querySelector('h2')?.focus();
}

setInterval(() => {
  for (const t of document.querySelectorAll('[data-expires]')) t.textContent = left(t.dateTime);
  onTick?.();
}, 1000);
window.addEventListener('hashchange', route);
route();
