// The API client: the caller's credentials (kept in this tab's
// sessionStorage only), requests to /external/v1, and errors in plain words.

const BASE = '/external/v1';
const STORE = 'sensorhub.auth';

/** An answer other than 2xx, with a sentence a person can act on. */
export class ApiError extends Error {
  constructor(status, text, retryAfter = 0, detail = '') {
    super(text);
    this.status = status;
    /** Seconds the server asked to wait (429, 503), else 0. */
    this.retryAfter = retryAfter;
    /** Why, when the server said (a 403 with a detail refuses an action, not the credentials). */
    this.detail = detail;
  }
  /** Whether the credentials themselves were refused. */
  get signedOut() { return this.status === 401 || (this.status === 403 && !this.detail); }
}

/** The credentials in use: {kind: 'basic', user, header} or {kind: 'key', key}; null when signed out. */
export function credentials() {
  try { return JSON.parse(sessionStorage.getItem(STORE)); } catch { return null; }
}

export function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return { kind: 'basic', user, header: 'Basic ' + btoa(String.fromCharCode(...bytes)) };
}

export function apiKey(key) { return { kind: 'key', key }; }

export function remember(auth) { sessionStorage.setItem(STORE, JSON.stringify(auth)); }
export function forget() { sessionStorage.removeItem(STORE); }

/** Who is signed in, for the header. */
export function describe(auth) { return auth.kind === 'basic' ? auth.user : `key ${auth.key}`; }

/** The URL of `path` (e.g. `/devices`) for these credentials, with `params`. */
export function url(auth, path, params = {}) {
  const prefix = auth.kind === 'key' ? `${BASE}/${encodeURIComponent(auth.key)}` : BASE;
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null));
  const q = query.toString();
  return prefix + path + (q ? `?${q}` : '');
}

function headers(auth, extra = {}) {
  return auth.kind === 'basic' ? { ...extra, Authorization: auth.header } : extra;
}

/**
 * GETs `path` and returns the answer. `credentials: 'omit'` keeps the
 * browser from opening its own password prompt on a 401.
 */
export async function get(auth, path, params, { accept = 'application/json', signal } = {}) {
  let res;
  try {
    res = await fetch(url(auth, path, params), {
      headers: headers(auth, { Accept: accept }), credentials: 'omit', cache: 'no-store', signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'The server cannot be reached. Check the connection and try again.');
  }
  if (!res.ok) throw await failure(auth, res);
  return res;
}

/** GETs `path` and returns the envelope's `data`. */
export async function data(auth, path, params, opts) {
  const res = await get(auth, path, params, opts);
  return (await res.json()).data;
}

/** POSTs to `path` (no body) and returns the envelope's `data`. */
export async function post(auth, path, params) {
  let res;
  try {
    res = await fetch(url(auth, path, params), {
      method: 'POST', headers: headers(auth, { Accept: 'application/json' }), credentials: 'omit', cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, 'The server cannot be reached. Check the connection and try again.');
  }
  if (!res.ok) throw await failure(auth, res);
  return (await res.json()).data;
}

/** Opens the device's live stream: the raw fetch answer, read by live.js. */
export async function stream(auth, deviceId, params, lastEventId, signal) {
  const extra = { Accept: 'text/event-stream' };
  if (lastEventId) extra['Last-Event-ID'] = lastEventId;
  const res = await fetch(url(auth, `/devices/${encodeURIComponent(deviceId)}/stream`, params), {
    headers: headers(auth, extra), credentials: 'omit', cache: 'no-store', signal,
  });
  if (!res.ok) throw await failure(auth, res);
  return res;
}

async function failure(auth, res) {
  let body = {};
  try { body = await res.json(); } catch { /* not JSON: the status says enough */ }
  return new ApiError(res.status, plainWords(auth, res, body), Number(res.headers.get('Retry-After')) || 0, body.detail || '');
}

function plainWords(auth, res, body) {
  switch (res.status) {
    case 401: return 'The username or password is not right.';
    case 403: if (body.detail) return `Not allowed: ${body.detail}.`;
      return auth.kind === 'key'
        ? 'This API key is unknown or revoked, or its account is disabled.'
        : 'This account is disabled. Ask the operator to enable it.';
    case 409: return `Not done: ${body.detail || 'the request clashes with the current state'}.`;
    case 404: return body.message === 'Device not found'
      ? 'This station does not exist, or this account may not see it.'
      : 'The server has no such page.';
    case 429: {
      const wait = Number(res.headers.get('Retry-After'));
      return `Too many requests in a short time. ${wait > 0 ? `Try again in ${wait} s.` : 'Wait a moment and try again.'}`;
    }
    case 400: return `The server refused the request: ${body.detail || body.message || 'bad request'}.`;
    case 503: return 'The server is busy or its database is not answering. Try again in a moment.';
    default: return `The server answered ${res.status}${body.message ? ` (${body.message})` : ''}.`;
  }
}
