// A station's page: its alarms, one chart per sensor over a chosen range
// (raw readings for short ranges, hourly or daily mean with a min/max band
// for long ones; the warning levels of its alarm rules as lines), a
// time-zone selector, a CSV download of what is shown, and live updates
// (readings and alarm transitions) from the stream endpoint while "today"
// is shown.

import { badge, levelLines } from './alarms.js';
import * as api from './api.js';
import { drawChart } from './chart.js';
import { h, time } from './format.js';
import { follow } from './live.js';

const DAY = 86_400_000;
/** The range buttons: how far back, and the aggregation interval (none: raw readings). */
export const RANGES = {
  today: { label: 'Today' },
  '7d': { label: '7 days', days: 7 },
  '30d': { label: '30 days', days: 30, interval: '1h' },
  '1y': { label: '1 year', days: 365, interval: '1d' },
  custom: { label: 'Custom' },
};

const iso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** The query of a range: {tz, start?, end?, interval?}. */
export function query(state, now = Date.now()) {
  const r = RANGES[state.range] || RANGES.today;
  if (state.range === 'custom' && state.from && state.to) {
    const days = (Date.parse(state.to) - Date.parse(state.from)) / DAY + 1;
    const interval = days <= 7 ? undefined : days <= 92 ? '1h' : '1d';
    return { tz: state.tz, start: `${state.from}T00:00:00`, end: `${state.to}T23:59:59`, interval };
  }
  if (!r.days) return { tz: state.tz };
  // Buckets start at local midnight: so does a bucketed range, so that its first bucket is whole.
  const start = r.interval ? `${localDate(now - r.days * DAY, state.tz)}T00:00:00` : iso(now - r.days * DAY);
  return { tz: state.tz, start, end: iso(now), interval: r.interval };
}

/** The date (YYYY-MM-DD) at `ms` in `zone`. */
function localDate(ms, zone) {
  return new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(ms);
}

/** Seconds between points of a series: the interval's, or the device's reporting interval. */
function stepOf(interval, device) {
  const m = /^(\d+)(m|h|d|w|mo)$/.exec(interval || '');
  if (!m) return device.interval_seconds || 0;
  return Number(m[1]) * { m: 60, h: 3600, d: 86400, w: 604800, mo: 2678400 }[m[2]];
}

/** A null after each point followed by a silence of more than 2.5 steps, so that uPlot breaks the line there. */
function breakGaps(c, step) {
  if (!step) return;
  for (let i = c.xs.length - 1; i > 0; i--) {
    if (c.xs[i] - c.xs[i - 1] > 2.5 * step) {
      c.xs.splice(i, 0, c.xs[i - 1] + step);
      for (const k of ['ys', 'mins', 'maxs']) if (c[k]) c[k].splice(i, 0, null);
    }
  }
}

/** Per sensor id: {xs, ys} from raw readings, or with mins/maxs from three aggregates. */
function columns(sensors, mean, min, max) {
  const out = new Map(sensors.map((s) => [s.sensor_id, { xs: [], ys: [], ...(min ? { mins: [], maxs: [] } : {}) }]));
  const pick = (rows) => {
    const m = new Map();
    for (const row of rows || []) for (const s of row.sensors) m.set(`${row.timestamp}|${s.id}`, s.value);
    return m;
  };
  const mins = min && pick(min), maxs = max && pick(max);
  for (const row of mean) {
    const t = Date.parse(row.timestamp) / 1000;
    for (const s of row.sensors) {
      const c = out.get(s.id);
      if (!c) continue;
      c.xs.push(t);
      c.ys.push(s.value);
      if (mins) { c.mins.push(mins.get(`${row.timestamp}|${s.id}`) ?? null); c.maxs.push(maxs.get(`${row.timestamp}|${s.id}`) ?? null); }
    }
  }
  return out;
}

function zones(selected) {
  let names = [];
  try { names = Intl.supportedValuesOf('timeZone'); } catch { /* older browsers: the two below */ }
  const all = [...new Set([selected, 'UTC', ...names])];
  return all.map((z) => h('option', { value: z, selected: z === selected }, z));
}

/** Renders the page into `main`; returns a function that stops its requests and stream. */
export function showStation(main, auth, deviceId, state, { navigate, onSignedOut }) {
  const controller = new AbortController();
  const title = h('h1', {}, deviceId);
  const status = h('p', { class: 'muted', id: 'station-status', 'aria-live': 'polite' }, 'Loading…');
  const live = h('span', { id: 'live', class: 'live', 'data-state': 'off' });
  const charts = h('div', { id: 'charts', class: 'charts', 'data-state': 'loading' });
  const alarmBox = h('div', { id: 'station-alarms', class: 'station-alarms', 'aria-live': 'polite' });
  // `focus`: the control to focus on the page drawn next (the one that asked for it).
  const go = (change, focus) => navigate({ ...state, ...change }, focus);
  const buttons = Object.entries(RANGES).filter(([k]) => k !== 'custom').map(([key, r]) =>
    h('button', { type: 'button', class: 'range', 'data-range': key, 'aria-pressed': String(state.range === key), onclick: () => go({ range: key }, `button[data-range="${key}"]`) }, r.label));
  const from = h('input', { type: 'date', id: 'from', value: state.from || '', required: true });
  const to = h('input', { type: 'date', id: 'to', value: state.to || '', required: true });
  const custom = h('form', { class: 'custom', 'aria-label': 'Custom range', onsubmit: (e) => { e.preventDefault(); go({ range: 'custom', from: from.value, to: to.value }, '#show'); } },
    h('label', { for: 'from' }, 'From'), from, h('label', { for: 'to' }, 'To'), to,
    h('button', { type: 'submit', id: 'show', 'aria-pressed': String(state.range === 'custom') }, 'Show'));
  const tz = h('select', { id: 'tz', onchange: () => go({ tz: tz.value }, '#tz') }, zones(state.tz));
  const csv = h('button', { type: 'button', id: 'csv' }, 'Download CSV');
  main.replaceChildren(
    h('p', {}, h('a', { href: '#/' }, '← All stations')), title, alarmBox, status,
    h('div', { class: 'controls' },
      h('div', { class: 'ranges', role: 'group', 'aria-label': 'Range' }, buttons), custom,
      h('label', { for: 'tz', class: 'tz' }, 'Time zone ', tz), csv, live),
    charts);

  const q = query(state);
  csv.addEventListener('click', () => download(auth, deviceId, q, status));
  const plots = new Map();
  const resize = new ResizeObserver(() => {
    for (const [fig, plot] of plots) plot.setSize({ width: Math.max(280, fig.clientWidth), height: plot.height });
  });
  resize.observe(charts);

  // Today's stream opens first, so that no reading stored while the page loads is missed;
  // what arrives before the charts exist waits for them.
  const early = [];
  let addLive = (reading) => early.push(reading);
  const alarmsPath = `/devices/${encodeURIComponent(deviceId)}/alarms`;
  const showAlarms = (alarms) => {
    const active = alarms.filter((a) => a.state === 'active');
    alarmBox.replaceChildren(...(alarms.length ? [
      h('span', { class: 'muted' }, active.length ? 'Active alarms: ' : 'No active alarm'),
      ...active.map((a) => badge(a, state.tz)),
      active.length ? h('a', { href: '#/alarms', class: 'to-alarms' }, 'All active alarms') : null,
    ] : []));
    alarmBox.dataset.active = String(active.length);
  };
  const refreshAlarms = () => api.data(auth, alarmsPath, { tz: state.tz }, { signal: controller.signal }).then(showAlarms).catch(() => {});
  if (state.range === 'today') {
    const setState = (s) => { live.dataset.state = s; live.textContent = s === 'live' ? '● Live' : 'Reconnecting…'; };
    follow(auth, deviceId, state.tz, controller.signal, { onState: setState, onSignedOut, onReading: (r) => addLive(r), onAlarm: refreshAlarms });
  }

  (async () => {
    try {
      performance.mark('sensorhub:load');
      const devices = await api.data(auth, '/devices', {}, { signal: controller.signal });
      const device = devices.find((d) => d.device_id === deviceId);
      if (!device) throw new api.ApiError(404, 'This station does not exist, or this account may not see it.');
      title.textContent = device.name || deviceId;
      document.title = `${device.name || deviceId} · sensorhub`;
      const path = `/devices/${encodeURIComponent(deviceId)}/data`;
      const signal = controller.signal;
      const [mean, min, max] = await Promise.all(q.interval
        ? ['mean', 'min', 'max'].map((agg) => api.data(auth, path, { ...q, agg }, { signal }))
        : [api.data(auth, path, q, { signal })]);
      // The alarms after the readings: they only add to the page, so a rate limit spends itself on them first.
      const rules = await api.data(auth, alarmsPath, { tz: state.tz }, { signal }).catch((e) => {
        if (e.name === 'AbortError') throw e;
        return [];
      });
      showAlarms(rules);
      const levels = levelLines(rules);
      performance.mark('sensorhub:data');
      const cols = columns(device.sensors || [], mean, min, max);
      for (const c of cols.values()) breakGaps(c, stepOf(q.interval, device));
      const figures = (device.sensors || []).map((s) => {
        const fig = h('figure', { class: 'chart', 'data-sensor': s.sensor_id });
        charts.append(fig);
        return [fig, s];
      });
      for (const [fig, s] of figures) plots.set(fig, drawChart(fig, s, cols.get(s.sensor_id), state.tz, levels.get(s.sensor_id) || []));
      const n = mean.length;
      status.textContent = `${RANGES[state.range]?.label || 'Range'}: ${n} ${q.interval ? `${q.interval} buckets (mean, band from min to max)` : 'readings'}` +
        (n ? `, ${time(Date.parse(mean[0].timestamp), state.tz)} to ${time(Date.parse(mean[n - 1].timestamp), state.tz)}` : '');
      Object.assign(charts.dataset, { state: 'ready', range: state.range, mode: q.interval ? 'aggregate' : 'raw' });
      performance.measure(`sensorhub:charts:${state.range}`, 'sensorhub:load');
      performance.measure(`sensorhub:draw:${state.range}`, 'sensorhub:data');
      addLive = (reading) => addReading(reading, figures, cols, plots, live);
      early.splice(0).forEach(addLive);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.signedOut) return onSignedOut(e.message);
      status.textContent = e.message;
      charts.dataset.state = 'error';
    }
  })();
  // uPlot keeps every chart in a global set until it is destroyed.
  return () => { controller.abort(); resize.disconnect(); for (const p of plots.values()) p.destroy(); };
}

/** Puts a streamed reading on the charts: in time order, replacing a value of the same second. */
function addReading(reading, figures, cols, plots, live) {
  const t = Date.parse(reading.timestamp) / 1000;
  for (const [fig, s] of figures) {
    const v = reading.sensors.find((x) => x.id === s.sensor_id);
    const c = cols.get(s.sensor_id);
    if (!v || !c) continue;
    let i = c.xs.length;
    while (i > 0 && c.xs[i - 1] > t) i--;
    if (c.xs[i - 1] === t) c.ys[i - 1] = v.value; else { c.xs.splice(i, 0, t); c.ys.splice(i, 0, v.value); }
    // A chart the user zoomed into an earlier stretch stays there; otherwise it follows the new reading.
    const plot = plots.get(fig);
    const zoomed = plot.scales.x.max < c.xs[c.xs.length - 2];
    plot.setData([c.xs, c.ys], !zoomed);
    fig.dataset.points = String(c.ys.filter((y) => y !== null).length);
  }
  live.dataset.last = reading.timestamp;
}

async function download(auth, deviceId, q, status) {
  try {
    const params = { ...q, format: 'csv', ...(q.interval ? { agg: 'mean' } : {}) };
    const res = await api.get(auth, `/devices/${encodeURIComponent(deviceId)}/data`, params, { accept: 'text/csv' });
    const link = h('a', { href: URL.createObjectURL(await res.blob()), download: `${deviceId}${q.interval ? `-${q.interval}-mean` : ''}.csv` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  } catch (e) {
    status.textContent = e.message;
  }
}
