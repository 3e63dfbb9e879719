// The dashboard's entry: sign-in (username and password, or an API key id,
// or a `#key=<id>` link), and the routes `#/` (stations),
// `#/station/<id>?range=…&tz=…` (one station) and `#/alarms` (the active
// alarms).

import { showAlarms } from './alarms.js';
import * as api from './api.js';
import { h, localZone } from './format.js';
import { showStation } from './station.js';
import { showStations } from './stations.js';

const main = document.getElementById('main');
const who = document.getElementById('who');
const signOut = document.getElementById('sign-out');
const alarmsLink = document.getElementById('alarms-link');
const notice = document.getElementById('notice');
const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content || '';
const tiles = { tiles: meta('sensorhub-tiles'), attribution: meta('sensorhub-tiles-attribution') };

let stop = () => {};

function say(text) {
  notice.textContent = text || '';
  notice.hidden = !text;
}

function signedOut(message) {
  api.forget();
  say(message);
  route();
}

function showSignIn() {
  who.textContent = '';
  signOut.hidden = true;
  alarmsLink.hidden = true;
  const user = h('input', { id: 'username', name: 'username', autocomplete: 'username', required: true });
  const password = h('input', { id: 'password', name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const key = h('input', { id: 'api-key', name: 'api-key', autocomplete: 'off', spellcheck: 'false', required: true });
  const attempt = async (auth, button) => {
    button.disabled = true;
    try {
      await api.data(auth, '/devices', {});
      api.remember(auth);
      say('');
      route();
    } catch (e) {
      say(e.message);
    } finally {
      button.disabled = false;
    }
  };
  const userButton = h('button', { type: 'submit', id: 'sign-in' }, 'Sign in');
  const keyButton = h('button', { type: 'submit', id: 'use-key' }, 'Open with key');
  main.replaceChildren(h('div', { class: 'sign-in' },
    h('h1', {}, 'Sign in'),
    h('form', { id: 'password-form', onsubmit: (e) => { e.preventDefault(); attempt(api.basic(user.value, password.value), userButton); } },
      h('label', { for: 'username' }, 'Username'), user,
      h('label', { for: 'password' }, 'Password'), password, userButton),
    h('p', { class: 'or' }, 'or'),
    h('form', { id: 'key-form', onsubmit: (e) => { e.preventDefault(); attempt(api.apiKey(key.value.trim()), keyButton); } },
      h('label', { for: 'api-key' }, 'API key id'), key, keyButton),
    h('p', { class: 'muted' }, 'The password is sent to this server only and kept for this tab until it closes or you sign out.')));
  user.focus();
}

/** `#/station/ID?range=…` → ['station', 'ID', URLSearchParams]; a malformed address is the stations view. */
function parseHash() {
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  try {
    return [...path.split('/').filter(Boolean).map(decodeURIComponent), new URLSearchParams(query)];
  } catch {
    return [new URLSearchParams()];
  }
}

/** `zone` when the browser knows it (the API also takes hours such as `7`, which Intl does not), else the browser's. */
function knownZone(zone) {
  try {
    if (zone) { new Intl.DateTimeFormat('en', { timeZone: zone }); return zone; }
  } catch { /* fall through */ }
  return localZone();
}

/** What to focus after the next page is drawn (the control that asked for it), so keyboard users keep their place. */
let refocus = null;

function route() {
  stop();
  stop = () => {};
  const auth = api.credentials();
  if (!auth) return showSignIn();
  who.textContent = api.describe(auth);
  signOut.hidden = false;
  alarmsLink.hidden = false;
  const parts = parseHash();
  const params = parts.pop();
  if (parts[0] === 'station' && parts[1]) {
    const state = {
      range: params.get('range') || 'today', tz: knownZone(params.get('tz')),
      from: params.get('from') || '', to: params.get('to') || '',
    };
    const navigate = (next, focus) => {
      const q = new URLSearchParams(Object.entries(next).filter(([, v]) => v));
      refocus = focus || null;
      location.hash = `#/station/${encodeURIComponent(parts[1])}?${q}`;
    };
    stop = showStation(main, auth, parts[1], state, { navigate, onSignedOut: signedOut });
  } else if (parts[0] === 'alarms') {
    stop = showAlarms(main, auth, { zone: localZone(), onSignedOut: signedOut });
  } else {
    stop = showStations(main, auth, { zone: localZone(), tiles, onSignedOut: signedOut });
  }
  if (refocus) main.querySelector(refocus)?.focus();
  refocus = null;
}

/**
 * A `#key=<id>` link signs in with that key (`&station=<device>` opens that
 * station); the fragment never reaches the server or its logs, and leaves
 * the address bar at once. A tab already signed in otherwise asks first: a
 * link someone sent must not quietly replace the session in use. Returns
 * whether it is asking (the route waits for the answer).
 */
function takeKeyLink() {
  if (!location.hash.startsWith('#key=')) return false;
  const link = new URLSearchParams(location.hash.slice(1));
  const key = (link.get('key') || '').trim();
  const station = link.get('station');
  const target = `#/${station ? `station/${encodeURIComponent(station)}` : ''}`;
  history.replaceState(null, '', `${location.pathname}${target}`);
  if (!key) return false;
  const current = api.credentials();
  if (current && !(current.kind === 'key' && current.key === key)) {
    askToSwitch(current, key);
    return true;
  }
  api.remember(api.apiKey(key));
  return false;
}

/** Asks whether to leave the session in use for the link's key. */
function askToSwitch(current, key) {
  stop();
  stop = () => {};
  const choose = (switching) => {
    if (switching) api.remember(api.apiKey(key));
    else history.replaceState(null, '', `${location.pathname}#/`);
    say('');
    route();
  };
  const stay = h('button', { type: 'button', id: 'keep-session', onclick: () => choose(false) }, `Stay signed in as ${api.describe(current)}`);
  main.replaceChildren(h('div', { class: 'sign-in', role: 'dialog', 'aria-labelledby': 'switch-title', 'aria-describedby': 'switch-text' },
    h('h1', { id: 'switch-title' }, 'Switch to the link\'s key?'),
    h('p', { id: 'switch-text' }, `This link opens the dashboard with the API key ${key}. This tab is signed in as ${api.describe(current)}: switching signs it out.`),
    h('div', { class: 'choices' },
      h('button', { type: 'button', id: 'switch-key', onclick: () => choose(true) }, 'Switch to the key'),
      stay)));
  stay.focus();
}

// The skip link moves focus without touching the address (which holds the route).
document.querySelector('.skip').addEventListener('click', (e) => { e.preventDefault(); main.focus(); });
signOut.addEventListener('click', () => { api.forget(); say(''); location.hash = '#/'; route(); });
window.addEventListener('hashchange', () => { say(''); if (!takeKeyLink()) route(); });
if (!takeKeyLink()) route();
