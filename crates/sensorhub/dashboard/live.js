// Live readings of one device from its stream endpoint. EventSource cannot
// send an Authorization header, so the Server-Sent Events are read from a
// fetch answer; a dropped stream reconnects with Last-Event-ID.

import * as api from './api.js';

/**
 * Calls `onReading(reading)` for each reading, `onAlarm(transition)` for
 * each alarm transition (`event: alarm`) and `onState(text)` when the link
 * changes, until `signal` aborts. `onSignedOut(message)` ends it when the
 * credentials are refused.
 */
export async function follow(auth, deviceId, zone, signal, { onReading, onAlarm = () => {}, onState, onSignedOut }) {
  let lastId = null;
  let retry = 2000;
  let wait = retry;
  while (!signal.aborted) {
    try {
      const res = await api.stream(auth, deviceId, { tz: zone }, lastId, signal);
      onState('live');
      wait = retry;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      try {
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          // The server ends lines with LF; a CR is dropped wherever a chunk cuts.
          buffer += value.replace(/\r/g, '');
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const event = parse(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
            if (event.retry) retry = event.retry;
            if (event.id) lastId = event.id;
            if (!event.data) continue;
            if (event.event === 'alarm') onAlarm(JSON.parse(event.data));
            else if (!event.event || event.event === 'message') onReading(JSON.parse(event.data));
          }
        }
      } finally {
        reader.cancel().catch(() => {});
      }
    } catch (e) {
      if (signal.aborted || e.name === 'AbortError') return;
      if (e.signedOut) return onSignedOut(e.message);
      // A refusal waits as long as the server asks (a 429 under the rate limit), else backs off.
      wait = e.retryAfter ? e.retryAfter * 1000 : Math.min(wait * 2, 60_000);
    }
    onState('reconnecting');
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** One event block: its type, id, data lines joined, retry. Comment lines (heartbeats) are skipped. */
function parse(block) {
  const event = { data: '' };
  for (const line of block.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'data') event.data += (event.data ? '\n' : '') + val;
    else if (field === 'id') event.id = val;
    else if (field === 'event') event.event = val;
    else if (field === 'retry' && /^\d+$/.test(val)) event.retry = Number(val);
  }
  return event;
}
