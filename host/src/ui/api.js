// The broker's HTTP API as the console uses it: JSON calls with the bearer
// secret, and the event stream read from a fetch() body (EventSource cannot
// send an Authorization header).

const STORE = 'lockbroker.console';

/// The secret and its role ("tenant" or "admin"), for this tab only.
export const session = {
  get() {
    try {
      return JSON.parse(sessionStorage.getItem(STORE));
    } catch {
      return null;
    }
  },
  set(value) {
    sessionStorage.setItem(STORE, JSON.stringify(value));
  },
  clear() {
    sessionStorage.removeItem(STORE);
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

/// Milliseconds the broker's clock is ahead of this one (from `Date`).
export let skewMs = 0;

const auth = (secret, extra = {}) => ({ Authorization: `Bearer ${secret}`, ...extra });

/// One API call (with `body`, a JSON request); the parsed JSON answer, or
/// an ApiError.
export async function call(path, { method = 'GET', secret, signal, body } = {}) {
  const headers = auth(secret, { Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) });
  const res = await fetch(path, { method, signal, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const date = Date.parse(res.headers.get('date'));
  if (!Number.isNaN(date)) skewMs = date + 500 - Date.now();
  const answer = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, answer);
  return answer;
}

/// `?a=1&b=2` of the parameters that have a value.
export function query(params) {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') q.set(name, value);
  }
  const text = q.toString();
  return text ? `?${text}` : '';
}

export const segment = encodeURIComponent;

/// Follows `GET /v1/events?prefix=`: `onEvent(name, data)` for every event,
/// `onState("live" | "reconnecting")`; after a dropped connection it comes
/// back with `Last-Event-ID`, so nothing in between is missed. Ends when
/// `signal` aborts.
export async function follow(prefix, secret, signal, onEvent, onState) {
  let last = null;
  let pause = 500;
  while (!signal.aborted) {
    try {
      const headers = auth(secret, { Accept: 'text/event-stream' });
      if (last !== null) headers['Last-Event-ID'] = last;
      const res = await fetch(`/v1/events${query({ prefix })}`, { headers, signal, cache: 'no-store' });
      if (!res.ok) throw new ApiError(res.status, await res.json().catch(() => null));
      onState('live');
      pause = 500;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, '\n');
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const event = parse(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          if (event.id !== null) last = event.id;
          if (event.data !== null) onEvent(event.name, event.data);
        }
      }
    } catch {
      if (signal.aborted) return;
    }
    onState('reconnecting');
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, pause);
      signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
    });
    pause = Math.min(pause * 2, 10_000);
  }
}

/// One event block: its `id:`, `event:` name and `data:` (JSON).
function parse(block) {
  const event = { id: null, name: 'message', data: null };
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'id') event.id = value;
    else if (field === 'event') event.name = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length) {
    try {
      event.data = JSON.parse(data.join('\n'));
    } catch {
      event.data = {};
    }
  }
  return event;
}
