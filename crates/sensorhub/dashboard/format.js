// Small formatting helpers shared by the views: values as the API prints
// them, times in a chosen zone, "how long ago", and safe element building.

/** A value as the API prints it: whole numbers keep their `.0`. */
export function value(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  return Number.isInteger(v) ? v.toFixed(1) : String(v);
}

/** The browser's own IANA zone (the default `tz`). */
export function localZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'; } catch { return 'UTC'; }
}

const formatters = new Map();
/** `date` (a Date or epoch ms) as local date and time in `zone`, with the zone's short name. */
export function time(date, zone) {
  let f = formatters.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-GB', {
      timeZone: zone, year: 'numeric', month: 'short', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short',
    });
    formatters.set(zone, f);
  }
  return f.format(date);
}

/** "just now", "5 min ago", "3 h ago", "2 days ago". */
export function ago(ms, now = Date.now()) {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

/**
 * Builds an element: `h('a', {href: '#/', class: 'x'}, 'text', child)`.
 * Text is always set as text, never parsed as HTML.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** The same for SVG elements. */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : String(c));
  return el;
}
