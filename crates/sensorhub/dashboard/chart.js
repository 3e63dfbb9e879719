// One sensor's chart: uPlot with the unit on the y axis, times in the
// chosen zone, a min/max band for aggregates, the warning levels of the
// alarm rules that watch the sensor as lines, and a tooltip with the exact
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

/** The colours of the level lines, by severity class (as the badges'). */
const LEVEL_COLOURS = { 'sev-1': '#b58a00', 'sev-2': '#dc6803', 'sev-3': '#c4320a', 'sev-4': '#b42318' };

/** A uPlot hook drawing each of `levels` ({name, at, cls}) as a dashed line with its name. */
function drawLevels(levels) {
  return (u) => {
    const { ctx } = u;
    const { left, width, top, height } = u.bbox;
    ctx.save();
    ctx.setLineDash([6, 4]);
    ctx.lineWidth = 1.5 * devicePixelRatio;
    ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
    for (const l of levels) {
      const y = Math.round(u.valToPos(l.at, 'y', true));
      if (y < top || y > top + height) continue;
      ctx.strokeStyle = ctx.fillStyle = LEVEL_COLOURS[l.cls] || '#5b6570';
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(left + width, y);
      ctx.stroke();
      ctx.fillText(l.name, left + 4 * devicePixelRatio, y - 3 * devicePixelRatio);
    }
    ctx.restore();
  };
}

/**
 * Draws a chart of `series` into `figure` (replacing what was there).
 * `series` is {xs, ys, mins?, maxs?}: seconds since the epoch and values
 * (null where the sensor has no value); `levels` the warning levels
 * ({name, at, cls}) to draw, the least severe kept in view. Returns the
 * uPlot instance.
 */
export function drawChart(figure, sensor, series, zone, levels = []) {
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
    hooks: { setCursor: [hook], draw: levels.length ? [drawLevels(levels)] : [] },
  };
  if (levels.length) {
    // The first level stays in view, so that the chart shows how far the water is from it.
    const first = levels[0].at;
    opts.scales = { y: { range: (u, min, max) => {
      const lo = Math.min(min ?? first, first), hi = Math.max(max ?? first, first);
      const pad = (hi - lo) * 0.05 || 1;
      return [lo - pad, hi + pad];
    } } };
  }
  const holder = h('div', { class: 'plot' });
  figure.replaceChildren(
    h('figcaption', {}, h('span', { class: 'name' }, sensor.name), ' ', h('span', { class: 'unit' }, `(${sensor.unit})`)),
    holder);
  const plot = new window.uPlot(opts, data, holder);
  plot.over.append(tip);
  const n = series.ys.filter((v) => v !== null).length;
  figure.dataset.points = String(n);
  figure.dataset.levels = String(levels.length);
  const warned = levels.length ? `, warning levels ${levels.map((l) => `${l.name} at ${l.at}`).join(', ')}` : '';
  figure.setAttribute('aria-label', `${sensor.name} in ${sensor.unit}: ${n} ${banded ? 'buckets' : 'readings'}${warned}`);
  return plot;
}
