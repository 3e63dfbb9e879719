// The stations map: an SVG in Web Mercator fitted to the stations, with
// country outlines from the vendored Natural Earth data (offline), or the
// operator's tiles when a tile URL is configured, and one link per station.

import { svg } from './format.js';

const W = 800, H = 450, TILE = 256;
/** Smallest span shown, in degrees of longitude, so that a lone station has a coast around it. */
const MIN_SPAN = 2;

let countries = null;
async function loadCountries() {
  if (!countries) {
    countries = fetch(new URL('./vendor/countries-110m.json', import.meta.url))
      .then((r) => r.json())
      .then((topo) => window.topojson.feature(topo, topo.objects.countries).features)
      .catch((e) => { countries = null; throw e; });
  }
  return countries;
}

/** Web Mercator in world pixels at zoom 0 (0..256 both ways). */
function mercator(lon, lat) {
  const phi = Math.max(-85.05, Math.min(85.05, lat)) * Math.PI / 180;
  return [(lon + 180) / 360 * TILE, (1 - Math.log(Math.tan(phi) + 1 / Math.cos(phi)) / Math.PI) / 2 * TILE];
}

/** Scale and offset that fit `stations` into W×H with a margin. */
function fit(stations) {
  const pts = stations.map((s) => mercator(s.long, s.lat));
  let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
  for (const [x, y] of pts) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  if (!pts.length) [x0, y0, x1, y1] = [0, 0, TILE, TILE];
  const min = MIN_SPAN / 360 * TILE;
  const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
  const dx = Math.max(x1 - x0, min) * 1.3, dy = Math.max(y1 - y0, min * H / W) * 1.3;
  const k = Math.min(W / dx, H / dy);
  return { k, ox: W / 2 - cx * k, oy: H / 2 - cy * k };
}

function ringPath(ring, project) {
  let d = '';
  for (let i = 0; i < ring.length; i++) {
    const [x, y] = project(ring[i][0], ring[i][1]);
    d += (i ? 'L' : 'M') + x.toFixed(1) + ',' + y.toFixed(1);
  }
  return d + 'Z';
}

/** Country outlines that fall in the view, as one path. */
function outlines(features, project) {
  let d = '';
  for (const f of features) {
    const g = f.geometry;
    if (!g) continue;
    const polys = g.type === 'Polygon' ? [g.coordinates] : g.coordinates;
    for (const poly of polys) {
      for (const ring of poly) {
        const p = ring.map(([lon, lat]) => project(lon, lat));
        const out = p.every(([x]) => x < 0) || p.every(([x]) => x > W) || p.every(([, y]) => y < 0) || p.every(([, y]) => y > H);
        if (!out) d += ringPath(ring, project);
      }
    }
  }
  return svg('path', { class: 'land', d });
}

/** The operator's tiles covering the view, at the zoom just below the view's scale. */
function tiles(template, view) {
  const z = Math.max(0, Math.min(19, Math.floor(Math.log2(view.k))));
  const s = view.k / 2 ** z * TILE; // one tile's size in view units
  const n = 2 ** z;
  const g = svg('g', { class: 'tiles' });
  const tx0 = Math.floor(-view.ox / s), ty0 = Math.max(0, Math.floor(-view.oy / s));
  const tx1 = Math.floor((W - view.ox) / s), ty1 = Math.min(n - 1, Math.floor((H - view.oy) / s));
  for (let ty = ty0; ty <= ty1; ty++) {
    for (let tx = tx0; tx <= tx1; tx++) {
      const x = ((tx % n) + n) % n;
      const href = template.replace('{z}', z).replace('{x}', x).replace('{y}', ty);
      g.append(svg('image', { href, x: view.ox + tx * s, y: view.oy + ty * s, width: s + 0.5, height: s + 0.5 }));
    }
  }
  return g;
}

/**
 * A marker's label, right of it or left of it, whichever does not cover a
 * label already placed; none when both would (the marker keeps its title).
 */
function label(placed, text, x, y, k) {
  const w = (text.length * 7.5 + 4) * k, hgt = 16 * k, gap = 10 * k;
  for (const left of [x + gap, x - gap - w]) {
    const box = [left, y - hgt / 2 - 2, left + w, y + hgt / 2 - 2];
    const clear = placed.every((b) => box[2] < b[0] || box[0] > b[2] || box[3] < b[1] || box[1] > b[3]);
    if (clear && box[0] >= 0 && box[2] <= W) {
      placed.push(box);
      return svg('text', { x: left.toFixed(1), y: (y + 4 * k).toFixed(1) }, text);
    }
  }
  return null;
}

/**
 * Draws `stations` ({device_id, name, lat, long, stale}) into `container`.
 * Each marker is a link to the station's page, reachable by keyboard.
 */
export async function drawMap(container, stations, { tiles: template, attribution } = {}) {
  const placed = stations.filter((s) => Number.isFinite(s.lat) && Number.isFinite(s.long));
  const view = fit(placed);
  const project = (lon, lat) => { const [x, y] = mercator(lon, lat); return [view.ox + x * view.k, view.oy + y * view.k]; };
  const map = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'group', 'aria-label': 'Map of the stations', class: 'map' });
  map.append(svg('rect', { class: 'sea', width: W, height: H }));
  if (template) {
    map.append(tiles(template, view));
  } else {
    try { map.append(outlines(await loadCountries(), project)); } catch { /* markers still place the stations */ }
  }
  const labels = [];
  // Phones show the map smaller and its labels larger (see style.css): labels take more room.
  const k = container.clientWidth > 0 && container.clientWidth < 600 ? 1.7 : 1;
  for (const s of placed) {
    const [x, y] = project(s.long, s.lat);
    map.append(svg('a', { href: `#/station/${encodeURIComponent(s.device_id)}`, class: s.stale ? 'marker stale' : 'marker', 'data-device': s.device_id, 'aria-label': `${s.name} (${s.device_id})${s.stale ? ', late' : ''}` },
      svg('title', {}, s.stale ? `${s.name} (late)` : s.name),
      svg('circle', { cx: x.toFixed(1), cy: y.toFixed(1), r: 7 }),
      label(labels, s.device_id, x, y, k)));
  }
  container.replaceChildren(map);
  if (template && attribution) container.append(Object.assign(document.createElement('p'), { className: 'attribution', textContent: attribution }));
}
