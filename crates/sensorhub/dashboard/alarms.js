// Alarms: the badge of an active alarm (its level, a colour by how deep
// into its bands it lies), a device's level lines for its charts, and the
// alarms page (`#/alarms`): every active alarm the caller sees, most severe
// first, with its recent transitions and, for callers who may, a button to
// acknowledge it.

import * as api from './api.js';
import { h, time, value } from './format.js';

const DAY = 86_400_000;
/** How far back the alarms page shows transitions. */
const HISTORY_DAYS = 7;
/** Refresh of the alarms page. */
const REFRESH_MS = 30_000;

/** The colour class of alarm `a`: sev-1 (its least severe level) to sev-4 (its most), or silence's and rises' own. */
export function severity(a) {
  if (a.kind === 'silence') return 'sev-silent';
  const levels = a.spec?.levels || [];
  const i = levels.findIndex((l) => l.name === a.level);
  if (a.kind !== 'level' || i < 0) return 'sev-rise';
  return `sev-${Math.max(1, Math.ceil(((i + 1) / levels.length) * 4))}`;
}

/** What an active alarm is called in a badge: its level, or what it watches. */
export function label(a) {
  if (a.level) return a.level;
  return a.kind === 'silence' ? 'Silent' : 'Rising fast';
}

/** A badge for active alarm `a`. */
export function badge(a, zone) {
  const since = a.raised_at ? `since ${time(Date.parse(a.raised_at), zone)}` : '';
  return h('span', { class: `alarm ${severity(a)}`, 'data-rule': a.rule, title: `${a.rule}: ${label(a)} ${since}`.trim() }, label(a));
}

/** How severe an alarm is, for sorting (larger first). */
export function rank(a) {
  const levels = a.spec?.levels || [];
  const i = levels.findIndex((l) => l.name === a.level);
  return i < 0 ? 0 : 1 + (i + 1) / levels.length;
}

/** The caller's active alarms, by device id. */
export async function activeByDevice(auth, signal) {
  const out = new Map();
  for (const a of await api.data(auth, '/alarms', {}, { signal })) {
    if (!out.has(a.device_id)) out.set(a.device_id, []);
    out.get(a.device_id).push(a);
  }
  return out;
}

/** Per sensor id, the levels of the level rules watching it: [{name, at, cls}]. */
export function levelLines(alarms) {
  const out = new Map();
  for (const a of alarms.filter((x) => x.kind === 'level')) {
    const levels = a.spec.levels || [];
    const lines = levels.map((l, i) => ({ name: l.name, at: l.at, cls: `sev-${Math.max(1, Math.ceil(((i + 1) / levels.length) * 4))}` }));
    out.set(a.spec.sensor, [...(out.get(a.spec.sensor) || []), ...lines]);
  }
  return out;
}

function transition(e, zone) {
  const what = e.transition.replace('_', ' ');
  return h('li', { class: 'transition', 'data-transition': e.transition },
    h('time', { datetime: e.at }, time(Date.parse(e.at), zone)), ' ',
    h('span', { class: 'what' }, what), e.level ? ` · ${e.level}` : '',
    e.value !== null && e.value !== undefined ? ` · ${value(e.value)}` : '');
}

/** Renders the alarms page into `main`; returns a function that stops its refreshes. */
export function showAlarms(main, auth, { zone, onSignedOut }) {
  const controller = new AbortController();
  const status = h('p', { class: 'muted', id: 'alarms-status', 'aria-live': 'polite' }, 'Loading alarms…');
  const list = h('ul', { id: 'alarms', class: 'alarms' });
  main.replaceChildren(h('p', {}, h('a', { href: '#/' }, '← All stations')), h('h1', {}, 'Active alarms'), status, list);
  let timer = 0;
  const load = async () => {
    const signal = controller.signal;
    try {
      const active = (await api.data(auth, '/alarms', {}, { signal })).sort((a, b) => rank(b) - rank(a));
      status.textContent = active.length
        ? `${active.length} active alarm${active.length === 1 ? '' : 's'}, the most severe first.`
        : 'No active alarms.';
      const start = new Date(Date.now() - HISTORY_DAYS * DAY).toISOString().replace(/\.\d{3}Z$/, 'Z');
      const devices = [...new Set(active.map((a) => a.device_id))];
      const history = new Map(await Promise.all(devices.map(async (d) =>
        [d, await api.data(auth, `/devices/${encodeURIComponent(d)}/alarms/events`, { start, tz: zone }, { signal })])));
      list.replaceChildren(...active.map((a) => item(a, history.get(a.device_id) || [])));
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.signedOut) return onSignedOut(e.message);
      status.textContent = e.message;
    }
    timer = setTimeout(load, REFRESH_MS);
  };
  const item = (a, events) => {
    const mine = events.filter((e) => e.rule === a.rule).reverse();
    const ack = a.acknowledged_at
      ? h('span', { class: 'acknowledged' }, `Acknowledged ${time(Date.parse(a.acknowledged_at), zone)}`)
      : a.may_acknowledge
        ? h('button', { type: 'button', class: 'acknowledge', onclick: (ev) => acknowledge(a, ev.target) }, 'Acknowledge')
        : null;
    return h('li', { class: `alarm-item ${severity(a)}`, 'data-device': a.device_id, 'data-rule': a.rule },
      h('div', { class: 'head' },
        h('a', { href: `#/station/${encodeURIComponent(a.device_id)}`, class: 'name' }, a.device_id), ' ',
        badge(a, zone), ' ', h('span', { class: 'muted' }, a.rule)),
      h('div', { class: 'when' },
        a.raised_at ? ['Raised ', h('time', { datetime: a.raised_at }, time(Date.parse(a.raised_at), zone))] : null,
        a.value !== null && a.value !== undefined ? ` · last value ${value(a.value)}` : '', ' ', ack),
      mine.length ? h('ul', { class: 'history', 'aria-label': `Transitions of ${a.rule}` }, mine.slice(0, 12).map((e) => transition(e, zone))) : null);
  };
  const acknowledge = async (a, button) => {
    button.disabled = true;
    try {
      await api.post(auth, `/devices/${encodeURIComponent(a.device_id)}/alarms/${encodeURIComponent(a.rule)}/acknowledge`, { tz: zone });
      clearTimeout(timer);
      await load();
    } catch (e) {
      status.textContent = e.message;
      button.disabled = false;
    }
  };
  load();
  return () => { controller.abort(); clearTimeout(timer); };
}
