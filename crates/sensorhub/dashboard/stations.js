// The stations view: every station the caller may see, on a map and in a
// list with its last update, how long ago, its latest values, a mark on
// stations that have not reported within twice their interval, and each
// active alarm's level (stations with active alarms first, the most severe
// first).

import { activeByDevice, badge, rank } from './alarms.js';
import * as api from './api.js';
import { ago, h, time, value } from './format.js';
import { drawMap } from './map.js';

/** Refresh of the list and the latest values. */
const REFRESH_MS = 60_000;
/** Latest-value requests in flight at once (many stations must not trip the rate limit). */
const PARALLEL = 4;

/** Whether a station missed twice its interval (or never reported). */
export function isStale(device, now = Date.now()) {
  const last = Date.parse(device.last_update_at);
  if (!Number.isFinite(last)) return true;
  return device.interval_seconds > 0 && now - last > 2 * device.interval_seconds * 1000;
}

async function latestOf(auth, devices, signal) {
  const out = new Map();
  let next = 0;
  const worker = async () => {
    while (next < devices.length) {
      const d = devices[next++];
      try {
        out.set(d.device_id, await api.data(auth, `/devices/${encodeURIComponent(d.device_id)}/latest`, {}, { signal }));
      } catch (e) {
        if (e.name === 'AbortError' || e.signedOut) throw e;
        out.set(d.device_id, null);
      }
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
  return out;
}

function values(device, latest) {
  if (!latest) return h('span', { class: 'muted' }, 'latest values unavailable');
  if (!latest.length) return h('span', { class: 'muted' }, 'no readings yet');
  const names = new Map((device.sensors || []).map((s) => [s.sensor_id, s.name]));
  return h('ul', { class: 'values' }, latest.map((v) =>
    h('li', { 'data-sensor': v.id }, h('span', { class: 'label' }, names.get(v.id) || v.id), ' ',
      h('span', { class: 'value' }, value(v.value)), ' ', h('span', { class: 'unit' }, v.unit))));
}

function row(device, latest, alarms, zone, now) {
  const last = Date.parse(device.last_update_at);
  const stale = isStale(device, now);
  const when = Number.isFinite(last)
    ? [h('time', { datetime: device.last_update_at }, time(last, zone)), h('span', { class: 'ago', 'data-ms': last }, ago(last, now))]
    : [h('span', { class: 'muted' }, 'never')];
  const classes = ['station', stale ? 'stale' : '', alarms.length ? 'alarmed' : ''].filter(Boolean).join(' ');
  return h('li', { class: classes, 'data-device': device.device_id },
    h('div', { class: 'head' },
      h('a', { href: `#/station/${encodeURIComponent(device.device_id)}`, class: 'name' }, device.name || device.device_id),
      h('span', { class: 'type' }, device.type || ''),
      stale ? h('span', { class: 'badge', title: 'No reading within twice the reporting interval' }, 'late') : null,
      ...alarms.map((a) => badge(a, zone))),
    h('div', { class: 'when' }, 'Last update ', ...when),
    values(device, latest));
}

/** A selector for the station link `el` is (a marker or a name in the list), else null. */
function focusKey(el) {
  const link = el?.closest?.('a[data-device], li.station a.name');
  if (!link) return null;
  const id = CSS.escape(link.dataset.device || link.closest('li.station').dataset.device);
  return link.matches('a.marker') ? `a.marker[data-device="${id}"]` : `li.station[data-device="${id}"] a.name`;
}

/** Renders the view into `main`; returns a function that stops its refreshes. */
export function showStations(main, auth, { zone, tiles, onSignedOut }) {
  const controller = new AbortController();
  const mapBox = h('div', { id: 'map', class: 'map-box' });
  const list = h('ul', { id: 'stations', class: 'stations', 'aria-busy': 'true' });
  const status = h('p', { class: 'muted', id: 'stations-status', 'aria-live': 'polite' }, 'Loading stations…');
  main.replaceChildren(h('h1', {}, 'Stations'), status, h('div', { class: 'overview' }, mapBox, list));
  let timer = 0;
  const load = async () => {
    try {
      const devices = await api.data(auth, '/devices', {}, { signal: controller.signal });
      const now = Date.now();
      const stale = devices.filter((d) => isStale(d, now)).length;
      status.textContent = `${devices.length} station${devices.length === 1 ? '' : 's'}` +
        (stale ? `, ${stale} not reporting on time` : ', all reporting on time');
      const [latest, alarms] = await Promise.all([
        latestOf(auth, devices, controller.signal),
        activeByDevice(auth, controller.signal).catch((e) => { if (e.name === 'AbortError' || e.signedOut) throw e; return new Map(); }),
      ]);
      // Stations with active alarms first, the most severe first; the others as listed.
      const worst = (d) => Math.max(0, ...(alarms.get(d.device_id) || []).map((a) => 1 + rank(a)));
      const ordered = devices.map((d, i) => [d, i]).sort(([a, i], [b, j]) => worst(b) - worst(a) || i - j).map(([d]) => d);
      // A refresh redraws both; the link that had the focus gets it back.
      const focused = focusKey(document.activeElement);
      await drawMap(mapBox, devices.map((d) => ({ ...d, stale: isStale(d, now) })), tiles);
      list.replaceChildren(...ordered.map((d) => row(d, latest.get(d.device_id), alarms.get(d.device_id) || [], zone, Date.now())));
      list.setAttribute('aria-busy', 'false');
      if (focused) main.querySelector(focused)?.focus();
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.signedOut) return onSignedOut(e.message);
      status.textContent = e.message;
    }
    timer = setTimeout(load, REFRESH_MS);
  };
  const tick = setInterval(() => {
    for (const el of list.querySelectorAll('.ago')) {
      const text = ago(Number(el.dataset.ms));
      if (el.textContent !== text) el.textContent = text;
    }
  }, 15_000);
  load();
  return () => { controller.abort(); clearTimeout(timer); clearInterval(tick); };
}
