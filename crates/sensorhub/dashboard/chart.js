// One sensor's chart: uPlot with the unit on the y axis, times in the
// chosen zone, a min/max band for aggregates, and a tooltip with the exact
// value and local time.

import { h, time, value } from './format.js';

const HEIGHT = 220;

function tooltip(zone, banded) {
  const tip = h('div', { class: 'tip', hidden: true });
  return {
    tip,
    hook(u) {
      const i = u.cursor.idx;
      if (i === null || i === undefined || u.data[1][i] === null || u.data[1][i] === undefined) {
        tip.hidden = true;
        return;
      }
      const t = time(u.data[0][i] * 1000, zone);
      const v = value(u.data[1][i]);
      const unit = u.series[1].unit;
      tip.textContent = banded
        ? `${t}\nmean ${v} ${unit}\nmin ${value(u.data[2][i])} · max ${value(u.data[3][i])}`
        : `${t}\n${v} ${unit}`;
      tip.hidden = false;
      const left = Math.min(u.cursor.left + 12, u.over.clientWidth - tip.offsetWidth);
      tip.style.transform = `translate(${Math.max(0, left)}px, ${Math.max(0, u.cursor.top - tip.offsetHeight - 8)}px)`;
    },
  };
}

/**
 * Draws a chart of `series` into `figure` (replacing what was there).
 * `series` is {xs, ys, mins?, maxs?}: seconds since the epoch and values
 * (null where the sensor has no value). Returns the uPlot instance.
 */
export function drawChart(figure, sensor, series, zone) {
  const banded = Boolean(series.mins);
  const { tip, hook } = tooltip(zone, banded);
  const plotted = [
    {},
    { label: sensor.name, unit: sensor.unit, stroke: '#0b5cad', width: 1.5, spanGaps: false, points: { show: false } },
  ];
  const data = [series.xs, series.ys];
  if (banded) {
    plotted.push({ label: 'min', stroke: 'rgba(11,92,173,0.35)', width: 1 }, { label: 'max', stroke: 'rgba(11,92,173,0.35)', width: 1 });
    data.push(series.mins, series.maxs);
  }
  const width = Math.max(280, figure.clientWidth || 600);
  const opts = {
    width, height: HEIGHT,
    tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1000), zone),
    series: plotted,
    bands: banded ? [{ series: [3, 2], fill: 'rgba(11,92,173,0.12)' }] : [],
    axes: [{ space: 80 }, { label: sensor.unit, size: 64 }],
    legend: { show: false },
    cursor: { drag: { x: true, y: false } },
    hooks: { setCursor: [hook] },
  };
  const holder = h('div', { class: 'plot' });
  figure.replaceChildren(
    h('figcaption', {}, h('span', { class: 'name' }, sensor.name), ' ', h('span', { class: 'unit' }, `(${sensor.unit})`)),
    holder);
  const plot = new window.uPlot(opts, data, holder);
  plot.over.append(tip);
  const n = series.ys.filter((v) => v !== null).length;
  figure.dataset.points = String(n);
  figure.setAttribute('aria-label', `${sensor.name} in ${sensor.unit}: ${n} ${banded ? 'buckets' : 'readings'}`);
  return plot;
}
