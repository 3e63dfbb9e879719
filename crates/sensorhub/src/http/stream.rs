//! GET /devices/{device_id}/stream (Basic) and its public twin: the
//! readings of one device as they are stored, as Server-Sent Events. Each
//! event's `data` is the reading exactly as the data endpoint's `data`
//! array shows it, in the client's `tz`; its `id` lets a client resume with
//! `Last-Event-ID` (see [`crate::live`] for the retention window); a
//! comment line every [`HEARTBEAT`] keeps proxies and clients from
//! thinking the stream dead. A stream holds a place under the stream caps
//! ([`crate::live::slots`]) and ends when its caller loses access
//! ([`crate::live::access`]).

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller};
use super::encode::{Format, ReadingEncoder};
use super::error::ApiError;
use super::guard::AccessSeen;
use super::ratelimit::ClientAddress;
use super::readings::DevicePath;
use super::schema::ErrorBody;
use crate::live::access::still_allowed;
use crate::live::slots::StreamSlot;
use crate::live::{Listener, Live, LiveAlarm, LiveReading, Next};
use crate::metrics::Metrics;
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use sensorhub_core::time::{TimeRange, Zone};
use sensorhub_store::{DeviceHandle, ReadingBatch, Store, StoredValue};
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Time between two heartbeat comments.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Milliseconds a browser's `EventSource` waits before it reconnects.
const RETRY_MS: u32 = 2000;

/// The query of a stream request: only `tz`; other parameters are ignored.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Time zone of the events' timestamps: whole hours -12..14, ±HH:MM, or an IANA name (Asia/Jakarta, Europe/Berlin). Default: the server's --default-tz.
    #[param(example = "7")]
    tz: Option<String>,
    /// The `Last-Event-ID` header of a reconnecting client, read with the query.
    #[serde(skip)]
    #[param(ignore)]
    last_event_id: Option<u64>,
}

impl<S: Send + Sync> FromRequestParts<S> for StreamParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let mut params: StreamParams = serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?;
        // An id this server did not give (or a garbled one) resumes nothing.
        params.last_event_id = parts.headers.get("last-event-id").and_then(|v| v.to_str().ok()?.trim().parse().ok());
        Ok(params)
    }
}

/// A device's new readings as Server-Sent Events (Basic).
#[utoipa::path(get, path = "/external/v1/devices/{device_id}/stream", tag = "readings",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), StreamParams,
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received: the retained events after it are sent first")),
    responses(
        (status = 200, description = "text/event-stream: one event per reading stored after the request, `data` a reading as in the data endpoint's `data`, with an `id`; a `:` comment every 15 s", content_type = "text/event-stream"),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request: over the rate limit, or past a stream cap (the caller's, the client address's or the instance's), with Retry-After", body = ErrorBody),
    ))]
pub async fn stream_basic(
    state: State<AppState>,
    seen: AccessSeen,
    caller: BasicCaller,
    device: DevicePath,
    params: StreamParams,
    address: ClientAddress,
) -> Result<Response, ApiError> {
    stream(state, seen, caller, device, params, address).await
}

/// A device's new readings as Server-Sent Events (API key id in the path).
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices/{device_id}/stream", tag = "readings",
    params(
        ("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"),
        ("device_id" = String, Path, description = "Device id"),
        StreamParams,
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event received: the retained events after it are sent first"),
    ),
    responses(
        (status = 200, description = "text/event-stream: one event per reading stored after the request, `data` a reading as in the data endpoint's `data`, with an `id`; a `:` comment every 15 s", content_type = "text/event-stream"),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request: over the rate limit, or past a stream cap (the caller's, the client address's or the instance's), with Retry-After", body = ErrorBody),
    ))]
pub async fn stream_public(
    state: State<AppState>,
    seen: AccessSeen,
    caller: PublicCaller,
    device: DevicePath,
    params: StreamParams,
    address: ClientAddress,
) -> Result<Response, ApiError> {
    stream(state, seen, caller, device, params, address).await
}

/// Both stream endpoints: `tz` is checked before the store is asked, as on
/// the data endpoints; once the device is found the stream takes its place
/// under the caps (429 past them) and subscribes. A resuming client's
/// retained events are resent only where their readings are still stored.
async fn stream<C: Into<Caller>>(
    State(state): State<AppState>,
    AccessSeen(seen): AccessSeen,
    caller: C,
    DevicePath(device_id): DevicePath,
    params: StreamParams,
    ClientAddress(address): ClientAddress,
) -> Result<Response, ApiError> {
    let zone = state.rules.zone(params.tz.as_deref()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let caller = caller.into();
    let device = state.store.find_device(caller.scope, &device_id).await?.ok_or(ApiError::DeviceNotFound)?;
    let slot = state.streams.take(caller.key(), address).map_err(|refused| {
        state.metrics.live_stream_refused(refused.reason());
        ApiError::TooManyStreams
    })?;
    let mut listener = state.live.subscribe(&device_id, params.last_event_id);
    if listener.replay_seconds().next().is_some() {
        let stored = stored_seconds(&*state.store, &device, listener.replay_seconds()).await?;
        listener.replay_only(|second| stored.contains(&second));
    }
    let mut access = state.access.clone();
    let check_now = *access.borrow_and_update() != seen;
    let events = Events {
        encoder: encoder(&device, &zone),
        device,
        zone,
        caller,
        device_id,
        store: state.store.clone(),
        metrics: state.metrics.clone(),
        listener,
        access,
        check_now,
        _slot: slot,
    };
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
    ];
    Ok((headers, Body::from_stream(events.into_stream())).into_response())
}

/// Which of `seconds` (of `device`'s retained events) still hold a stored
/// reading: one range read for each run of them no more than
/// [`REPLAY_GAP`] apart, so that events far apart in time (a logger's
/// clock reset to 1970 beside today's readings) never read the years
/// between them.
async fn stored_seconds(
    store: &dyn Store,
    device: &DeviceHandle,
    seconds: impl Iterator<Item = i64>,
) -> Result<HashSet<i64>, ApiError> {
    let mut seconds: Vec<i64> = seconds.collect();
    seconds.sort_unstable();
    seconds.dedup();
    let mut stored = HashSet::new();
    for (start, end) in runs(&seconds, REPLAY_GAP) {
        let mut batches = store.read_readings(device, TimeRange { start, end });
        while let Some(batch) = batches.next().await {
            stored.extend(batch?.timestamps.into_iter().filter(|t| seconds.binary_search(t).is_ok()));
        }
    }
    Ok(stored)
}

/// The widest gap between two retained events' seconds read in one range.
const REPLAY_GAP: i64 = 3600;

/// `sorted` (ascending, no repeats) as runs `(first, last)` whose
/// neighbours are at most `gap` apart.
fn runs(sorted: &[i64], gap: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &s in sorted {
        match out.last_mut() {
            Some((_, last)) if s.saturating_sub(*last) <= gap => *last = s,
            _ => out.push((s, s)),
        }
    }
    out
}

fn encoder(device: &DeviceHandle, zone: &Zone) -> ReadingEncoder {
    let (offset, named) = match zone {
        Zone::Fixed(offset) => (*offset, None),
        Zone::Named(tz) => (jiff::tz::Offset::UTC, Some(tz.clone())),
    };
    ReadingEncoder::with_format(Format::Ndjson, &device.sensors, offset, named)
}

/// One client's stream: its listener, how it renders events, and what
/// it needs to check its caller again.
struct Events {
    listener: Listener,
    device: DeviceHandle,
    encoder: ReadingEncoder,
    zone: Zone,
    caller: Caller,
    device_id: String,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    /// Moves when access may have been taken away anywhere.
    access: watch::Receiver<i64>,
    /// The caller was checked against an older access state: check it first.
    check_now: bool,
    /// The stream's place under the caps, held while it is open.
    _slot: StreamSlot,
}

/// What woke a stream.
enum Wake {
    Next(Next),
    Heartbeat,
    Access,
}

impl Events {
    /// The body: the retry hint, then events and heartbeats until the
    /// client is cut, the hub closes, the caller loses access, or the
    /// device is no longer visible.
    fn into_stream(self) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send {
        let first = Bytes::from(format!("retry: {RETRY_MS}\n\n"));
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let rest = futures_util::stream::unfold((self, heartbeat), |(mut events, mut heartbeat)| async move {
            loop {
                let wake = if std::mem::take(&mut events.check_now) {
                    Wake::Access
                } else {
                    tokio::select! {
                        next = events.listener.next() => Wake::Next(next),
                        _ = heartbeat.tick() => Wake::Heartbeat,
                        Ok(()) = events.access.changed() => Wake::Access,
                    }
                };
                let chunk = match wake {
                    Wake::Heartbeat => Ok(Bytes::from_static(b":\n\n")),
                    Wake::Access if events.allowed().await => continue,
                    Wake::Access => {
                        events.metrics.live_stream_revoked();
                        return None;
                    }
                    Wake::Next(Next::Event(event)) => Ok(match &event.item {
                        Live::Reading(reading) => events.render(event.id, reading).await?,
                        Live::Alarm(alarm) => events.render_alarm(event.id, alarm),
                    }),
                    Wake::Next(Next::Lagging) => Err(std::io::Error::other("the client fell behind the live stream")),
                    Wake::Next(Next::Closed) => return None,
                };
                return Some((chunk, (events, heartbeat)));
            }
        });
        futures_util::StreamExt::chain(futures_util::stream::once(async move { Ok(first) }), rest)
    }

    /// Whether the caller would still be let in: `false` ends the stream.
    /// Streams check at slightly different moments after a change (up to
    /// [`RECHECK_SPREAD`]), so that thousands of them do not ask the
    /// database at once. A database that does not answer is asked again,
    /// the stream held meanwhile, until [`RECHECK_GIVE_UP`] after the
    /// first try: then the stream ends, since its caller may have lost
    /// access in the change that woke it (a new request would be refused
    /// while the database is away, too).
    async fn allowed(&self) -> bool {
        let spread = RECHECK_SPREAD.mul_f64(fastrand::f64());
        tokio::time::sleep(spread).await;
        let give_up = tokio::time::Instant::now() + RECHECK_GIVE_UP;
        let mut pause = RECHECK_SPREAD;
        loop {
            match still_allowed(&*self.store, &self.caller.credential, self.caller.scope, &self.device_id).await {
                Ok(allowed) => return allowed,
                Err(e) if tokio::time::Instant::now() + pause < give_up => {
                    // One warning a stream, when it ends: thousands of streams ask at once.
                    tracing::debug!(error = %e, "cannot check a stream's caller again; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot check a stream's caller again; the stream ends");
                    return false;
                }
            }
        }
    }

    /// `id: …` and `data: {reading}` of one event; `None` ends the stream
    /// (the device is gone from the caller's view).
    async fn render(&mut self, id: u64, reading: &LiveReading) -> Option<Bytes> {
        let batch = match batch_of(&self.device, reading) {
            Ok(batch) => batch,
            Err(_) => {
                // A sensor added since the stream began: look the device up again.
                match self.store.find_device(self.caller.scope, &self.device_id).await {
                    Ok(Some(device)) => {
                        self.encoder = encoder(&device, &self.zone);
                        self.device = device;
                    }
                    Ok(None) => return None,
                    Err(e) => tracing::warn!(error = %e, "cannot look up a streamed device's sensors"),
                }
                batch_of(&self.device, reading).unwrap_or_else(|partial| partial)
            }
        };
        let mut out = Vec::with_capacity(64 + batch.values.len() * 48);
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        out.extend_from_slice(b"\ndata: ");
        // NDJSON: the reading object and its line end.
        out.extend_from_slice(&self.encoder.batch(&batch));
        out.push(b'\n');
        self.metrics.live_event_sent();
        Some(Bytes::from(out))
    }
}

impl Events {
    /// `event: alarm`, `id: …` and `data: {transition}` of one transition,
    /// its times in the stream's zone.
    fn render_alarm(&mut self, id: u64, alarm: &LiveAlarm) -> Bytes {
        let data = crate::alarm_view::transition_json(alarm, &self.zone);
        self.metrics.live_event_sent();
        Bytes::from(format!("event: alarm\nid: {id}\ndata: {data}\n\n"))
    }
}

/// The longest a stream waits, after access changed, before it checks its caller.
const RECHECK_SPREAD: Duration = Duration::from_millis(250);

/// How long a stream keeps asking a database that does not answer whether
/// its caller may still see it, before it ends.
const RECHECK_GIVE_UP: Duration = Duration::from_secs(3);

/// `reading` as a batch of one over `device`'s sensors, values in idx
/// order (the last of a sensor given twice); `Err` holds the batch without
/// the values of sensors the device does not have.
fn batch_of(device: &DeviceHandle, reading: &LiveReading) -> Result<ReadingBatch, ReadingBatch> {
    let mut by_idx: Vec<(usize, f64)> = Vec::with_capacity(reading.values.len());
    let mut complete = true;
    for (sensor_id, value) in &reading.values {
        match device.sensors.iter().position(|s| s.sensor_id == *sensor_id) {
            Some(idx) if idx < 64 => by_idx.push((idx, *value)),
            _ => complete = false,
        }
    }
    // Stable: of one idx given twice, the later value comes last and wins.
    by_idx.sort_by_key(|(idx, _)| *idx);
    let mut mask = 0u64;
    let mut values: Vec<StoredValue> = Vec::with_capacity(by_idx.len());
    for (idx, value) in by_idx {
        if mask & (1 << idx) != 0 {
            values.pop();
        }
        mask |= 1 << idx;
        values.push(StoredValue::from(value));
    }
    let batch = ReadingBatch { timestamps: vec![reading.timestamp], masks: vec![mask], values };
    if complete { Ok(batch) } else { Err(batch) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_core::model::SensorMeta;

    #[test]
    fn a_reading_becomes_one_batch_in_sensor_order() {
        let sensor =
            |id: &str| SensorMeta { sensor_id: id.into(), name: id.into(), kind: "T".into(), unit: "cm".into() };
        let device = DeviceHandle { pk: 1, sensors: vec![sensor("a"), sensor("b"), sensor("c")] };
        let values = [("c", 3.0), ("a", 1.0), ("c", 4.0)].map(|(s, v)| (s.to_owned(), v)).to_vec();
        let reading = LiveReading { device_id: "D".into(), timestamp: 60, values };
        let batch = batch_of(&device, &reading).expect("every sensor known");
        assert_eq!(batch.masks, [0b101]);
        assert_eq!(batch.values, [StoredValue::Float(1.0), StoredValue::Float(4.0)], "idx order, the later c wins");
        let unknown = LiveReading { values: vec![("x".into(), 1.0), ("b".into(), 2.0)], ..reading };
        let partial = batch_of(&device, &unknown).expect_err("x is unknown");
        assert_eq!((partial.masks[0], partial.values.len()), (0b010, 1));
    }

    #[test]
    fn replayed_seconds_are_read_in_runs_never_across_a_wide_gap() {
        let now = 1_780_000_000;
        assert_eq!(super::runs(&[0, now - 3600, now - 10, now], 3600), [(0, 0), (now - 3600, now)]);
        assert_eq!(super::runs(&[5], 3600), [(5, 5)]);
        assert_eq!(super::runs(&[1, 3602, 7204], 3600), [(1, 1), (3602, 3602), (7204, 7204)]);
        assert!(super::runs(&[], 3600).is_empty());
    }
}
