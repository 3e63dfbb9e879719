//! GET /devices/{device_id}/data (Basic) and its public twin: the readings
//! of one device in a time range, streamed from the store to the socket.

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller, path_param};
use super::error::{ApiError, JSON};
use super::schema::{ErrorBody, ReadingList};
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{StreamExt, stream};
use jiff::tz::Offset;
use sensorhub_core::model::SensorMeta;
use sensorhub_core::time::{RangeQuery, Rfc3339Writer};
use sensorhub_store::ReadingBatch;
use serde::Deserialize;

/// The query of a readings request, as received.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RangeParams {
    /// Start, inclusive: RFC 3339 with Z or an offset, or without one (read in tz). Default: today 00:00:00.
    #[param(example = "2026-05-05T00:00:00Z")]
    start: Option<String>,
    /// End, inclusive, same forms. Default: now.
    #[param(example = "2026-05-05T23:59:59Z")]
    end: Option<String>,
    /// Time zone of rendered times and of bounds without an offset: whole hours -12..14, ±HH:MM, or an IANA name (Asia/Jakarta, Europe/Berlin), with which each time carries the zone's offset at that instant. Default: the server's --default-tz.
    #[param(example = "7")]
    tz: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for RangeParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))
    }
}

/// The `{device_id}` of the path.
pub struct DevicePath(String);

impl<S: Send + Sync> FromRequestParts<S> for DevicePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        path_param(parts, state, "device_id").await.map(DevicePath).ok_or(ApiError::DeviceNotFound)
    }
}

/// Spec 4.2.
#[utoipa::path(get, path = "/external/v1/devices/{device_id}/data", tag = "readings",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), RangeParams),
    responses(
        (status = 200, description = "Readings grouped by timestamp, ascending", body = ReadingList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn read_basic(
    state: State<AppState>,
    caller: BasicCaller,
    device: DevicePath,
    params: RangeParams,
) -> Result<Response, ApiError> {
    read(state, caller, device, params).await
}

/// Spec 4.4.
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices/{device_id}/data", tag = "readings",
    params(
        ("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"),
        ("device_id" = String, Path, description = "Device id"),
        RangeParams,
    ),
    responses(
        (status = 200, description = "Readings grouped by timestamp, ascending", body = ReadingList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn read_public(
    state: State<AppState>,
    caller: PublicCaller,
    device: DevicePath,
    params: RangeParams,
) -> Result<Response, ApiError> {
    read(state, caller, device, params).await
}

/// Spec 4.2 (with [`BasicCaller`]) and 4.4 (with [`PublicCaller`]).
async fn read<C: Into<Caller>>(
    State(state): State<AppState>,
    caller: C,
    DevicePath(device_id): DevicePath,
    params: RangeParams,
) -> Result<Response, ApiError> {
    let caller: Caller = caller.into();
    let query = RangeQuery { start: params.start.as_deref(), end: params.end.as_deref(), tz: params.tz.as_deref() };
    let resolved =
        state.rules.resolve(query, jiff::Timestamp::now()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // The device and the first readings come together, so that a failing
    // store still gets a 500 rather than a cut-off 200.
    let window =
        state.store.read_window(caller.scope, &device_id, resolved.range).await?.ok_or(ApiError::DeviceNotFound)?;
    let metrics = state.metrics.clone();
    metrics.readings_served(window.first.len());
    let mut encoder = ReadingEncoder::new(&window.device.sensors, resolved.offset, resolved.zone);
    if window.complete {
        // Everything is in the first batch: one body with a length, no chunks.
        let mut body = encoder.begin(&window.first);
        body.extend_from_slice(b"]}");
        return Ok(([(header::CONTENT_TYPE, JSON)], body).into_response());
    }
    let head = Bytes::from(encoder.begin(&window.first));
    let body = stream::once(async move { Ok::<_, std::io::Error>(head) })
        .chain(window.rest.map(move |batch| match batch {
            Ok(b) => {
                metrics.readings_served(b.len());
                Ok(encoder.batch(&b))
            }
            Err(e) => {
                tracing::error!(error = %e, "reading stream failed; closing the response");
                Err(std::io::Error::other(e.to_string()))
            }
        }))
        .chain(stream::once(async { Ok(Bytes::from_static(b"]}")) }));
    Ok(([(header::CONTENT_TYPE, JSON)], Body::from_stream(body)).into_response())
}

/// Renders readings as JSON with the sensor fragments escaped once per
/// request and timestamps formatted without allocation.
pub struct ReadingEncoder {
    /// `{"id":"…","value":` per sensor idx.
    before: Vec<Vec<u8>>,
    /// `,"unit":"…"}` per sensor idx.
    after: Vec<Vec<u8>>,
    time: Rfc3339Writer,
    first: bool,
}

impl ReadingEncoder {
    /// An encoder for a device's sensors, rendering times in `offset`, or
    /// in a named `zone`'s offset at each instant.
    pub fn new(sensors: &[SensorMeta], offset: Offset, zone: Option<jiff::tz::TimeZone>) -> Self {
        let json = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        Self {
            before: sensors
                .iter()
                .map(|s| format!("{{\"id\":{},\"value\":", json(&s.sensor_id)).into_bytes())
                .collect(),
            after: sensors.iter().map(|s| format!(",\"unit\":{}}}", json(&s.unit)).into_bytes()).collect(),
            time: zone.map_or_else(|| Rfc3339Writer::new(offset), Rfc3339Writer::in_zone),
            first: true,
        }
    }

    /// The start of the envelope with the first batch.
    pub fn begin(&mut self, first: &ReadingBatch) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.size_hint(first));
        out.extend_from_slice(b"{\"message\":\"Success\",\"data\":[");
        self.write_batch(first, &mut out);
        out
    }

    /// One batch of readings, comma-separated from the previous ones.
    pub fn batch(&mut self, batch: &ReadingBatch) -> Bytes {
        let mut out = Vec::with_capacity(self.size_hint(batch));
        self.write_batch(batch, &mut out);
        Bytes::from(out)
    }

    /// Bytes `batch` will take, a little over, so that the buffer never grows.
    fn size_hint(&self, batch: &ReadingBatch) -> usize {
        let widest = self.before.iter().zip(&self.after).map(|(b, a)| b.len() + a.len()).max().unwrap_or(0);
        // {"timestamp":"…+07:00","sensors":[…]}, and per value its fragments and up to 24 digits.
        batch.len() * 56 + batch.values.len() * (widest + 25) + 2
    }

    fn write_batch(&mut self, batch: &ReadingBatch, out: &mut Vec<u8>) {
        let mut values = batch.values.iter();
        for (&ts, &mask) in batch.timestamps.iter().zip(&batch.masks) {
            if !self.first {
                out.push(b',');
            }
            self.first = false;
            out.extend_from_slice(b"{\"timestamp\":\"");
            self.time.write(out, ts);
            out.extend_from_slice(b"\",\"sensors\":[");
            let mut m = mask;
            let mut comma = false;
            while m != 0 {
                let idx = m.trailing_zeros() as usize;
                m &= m - 1;
                let Some(value) = values.next() else { break };
                let (Some(before), Some(after)) = (self.before.get(idx), self.after.get(idx)) else { continue };
                if comma {
                    out.push(b',');
                }
                comma = true;
                out.extend_from_slice(before);
                value.write_json(out);
                out.extend_from_slice(after);
            }
            out.extend_from_slice(b"]}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any query string: parameters or a 400 detail, and any parameters
        /// a range or a 400 detail, never a panic.
        #[test]
        fn fuzz_query_strings_never_panic(query in "\\PC{0,80}", start in "[0-9T:Z +.-]{0,26}",
                                          end in "[0-9T:Z +.-]{0,26}", tz in "[0-9:+ Z-]{0,7}") {
            let rules = sensorhub_core::time::RangeRules { default_tz: jiff::tz::Offset::UTC, max_range_days: 366 };
            let _ = serde_urlencoded::from_str::<RangeParams>(&query);
            let q = sensorhub_core::time::RangeQuery { start: Some(&start), end: Some(&end), tz: Some(&tz) };
            if let Err(e) = rules.resolve(q, jiff::Timestamp::now()) {
                proptest::prop_assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn encodes_readings_like_serde_would() {
        use sensorhub_store::StoredValue;
        let sensors = vec![
            SensorMeta { sensor_id: "A-b\"q".into(), name: "n".into(), kind: "BATTERY".into(), unit: "%".into() },
            SensorMeta { sensor_id: "A-x".into(), name: "n".into(), kind: "X".into(), unit: ".".into() },
        ];
        let mut enc = ReadingEncoder::new(&sensors, Offset::constant(7), None);
        let values = vec![
            StoredValue::Decimal { n: 925, k: 1 },
            StoredValue::Decimal { n: 100, k: 0 },
            StoredValue::Float(-1e-7),
        ];
        let batch = ReadingBatch { timestamps: vec![0, 60], masks: vec![0b11, 0b10], values };
        let mut text = enc.begin(&batch);
        text.extend_from_slice(b"]}");
        let parsed: serde_json::Value = serde_json::from_slice(&text).expect("valid JSON");
        assert_eq!(
            parsed,
            serde_json::json!({"message": "Success", "data": [
                {"timestamp": "1970-01-01T07:00:00+07:00", "sensors": [
                    {"id": "A-b\"q", "value": 92.5, "unit": "%"}, {"id": "A-x", "value": 100.0, "unit": "."}]},
                {"timestamp": "1970-01-01T07:01:00+07:00", "sensors": [{"id": "A-x", "value": -1e-7, "unit": "."}]}
            ]})
        );
        assert!(String::from_utf8_lossy(&text).contains("\"value\":100.0,"));
    }
}
