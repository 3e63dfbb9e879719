//! GET /devices/{device_id}/stream (Basic) and its public twin: the
//! readings of one device as they are stored, as Server-Sent Events. Each
//! event's `data` is the reading exactly as the data endpoint's `data`
//! array shows it, in the client's `tz`; its `id` lets a client resume with
//! `Last-Event-ID` (see [`crate::live`] for the retention window); a
//! comment line every [`HEARTBEAT`] keeps proxies and clients from
//! thinking the stream dead.

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller};
use super::encode::{Format, ReadingEncoder};
use super::error::ApiError;
use super::readings::DevicePath;
use super::schema::ErrorBody;
use crate::live::{LiveReading, Next, Subscription};
use crate::metrics::Metrics;
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sensorhub_core::time::Zone;
use sensorhub_store::{DeviceHandle, ReadingBatch, Scope, Store, StoredValue};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

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
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn stream_basic(
    state: State<AppState>,
    caller: BasicCaller,
    device: DevicePath,
    params: StreamParams,
) -> Result<Response, ApiError> {
    stream(state, caller, device, params).await
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
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn stream_public(
    state: State<AppState>,
    caller: PublicCaller,
    device: DevicePath,
    params: StreamParams,
) -> Result<Response, ApiError> {
    stream(state, caller, device, params).await
}

/// Both stream endpoints: `tz` is checked before the store is asked, as on
/// the data endpoints; the subscription starts once the device is found.
async fn stream<C: Into<Caller>>(
    State(state): State<AppState>,
    caller: C,
    DevicePath(device_id): DevicePath,
    params: StreamParams,
) -> Result<Response, ApiError> {
    let zone = state.rules.zone(params.tz.as_deref()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let scope = caller.into().scope;
    let device = state.store.find_device(scope, &device_id).await?.ok_or(ApiError::DeviceNotFound)?;
    let subscription = state.live.subscribe(&device_id, params.last_event_id);
    let events = Events {
        encoder: encoder(&device, &zone),
        device,
        zone,
        scope,
        device_id,
        store: state.store.clone(),
        metrics: state.metrics.clone(),
        subscription,
    };
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
    ];
    Ok((headers, Body::from_stream(events.into_stream())).into_response())
}

fn encoder(device: &DeviceHandle, zone: &Zone) -> ReadingEncoder {
    let (offset, named) = match zone {
        Zone::Fixed(offset) => (*offset, None),
        Zone::Named(tz) => (jiff::tz::Offset::UTC, Some(tz.clone())),
    };
    ReadingEncoder::with_format(Format::Ndjson, &device.sensors, offset, named)
}

/// One client's stream: its subscription and how it renders events.
struct Events {
    subscription: Subscription,
    device: DeviceHandle,
    encoder: ReadingEncoder,
    zone: Zone,
    scope: Scope,
    device_id: String,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl Events {
    /// The body: the retry hint, then events and heartbeats until the
    /// client is cut, the hub closes, or the device is no longer visible.
    fn into_stream(self) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send {
        let first = Bytes::from(format!("retry: {RETRY_MS}\n\n"));
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let rest = futures_util::stream::unfold((self, heartbeat), |(mut events, mut heartbeat)| async move {
            let next = tokio::select! {
                next = events.subscription.next() => Some(next),
                _ = heartbeat.tick() => None,
            };
            let chunk = match next {
                None => Ok(Bytes::from_static(b":\n\n")),
                Some(Next::Event(event)) => Ok(events.render(event.id, &event.reading).await?),
                Some(Next::Lagging) => Err(std::io::Error::other("the client fell behind the live stream")),
                Some(Next::Closed) => return None,
            };
            Some((chunk, (events, heartbeat)))
        });
        futures_util::StreamExt::chain(futures_util::stream::once(async move { Ok(first) }), rest)
    }

    /// `id: …` and `data: {reading}` of one event; `None` ends the stream
    /// (the device is gone from the caller's view).
    async fn render(&mut self, id: u64, reading: &LiveReading) -> Option<Bytes> {
        let batch = match batch_of(&self.device, reading) {
            Ok(batch) => batch,
            Err(_) => {
                // A sensor added since the stream began: look the device up again.
                match self.store.find_device(self.scope, &self.device_id).await {
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
}
