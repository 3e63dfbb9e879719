//! GET /devices/{device_id}/data (Basic) and its public twin: the readings
//! of one device in a time range, streamed from the store to the socket.

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller, path_param};
use super::error::{ApiError, JSON};
use super::openapi::{ErrorBody, ReadingList};
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{StreamExt, stream};
use jiff::tz::Offset;
use sensorhub_core::model::SensorMeta;
use sensorhub_core::time::{RangeQuery, write_rfc3339};
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
    /// UTC offset of rendered times: whole hours -12..14, or ±HH:MM. Default: the server's --default-tz.
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
    let device = state.store.find_device(caller.scope, &device_id).await?.ok_or(ApiError::DeviceNotFound)?;
    let mut batches = state.store.read_readings(&device, resolved.range);
    // Wait for the first batch so that a failing store still gets a 500
    // rather than a cut-off 200.
    let first = batches.next().await.transpose()?;
    let metrics = state.metrics.clone();
    metrics.readings_served(first.as_ref().map_or(0, ReadingBatch::len));
    let mut encoder = ReadingEncoder::new(&device.sensors, resolved.offset);
    let head = encoder.begin(first.as_ref());
    let body = stream::once(async move { Ok::<_, std::io::Error>(head) })
        .chain(batches.map(move |batch| match batch {
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
    offset: Offset,
    first: bool,
    ryu: ryu::Buffer,
}

impl ReadingEncoder {
    /// An encoder for a device's sensors, rendering times in `offset`.
    pub fn new(sensors: &[SensorMeta], offset: Offset) -> Self {
        let json = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        Self {
            before: sensors
                .iter()
                .map(|s| format!("{{\"id\":{},\"value\":", json(&s.sensor_id)).into_bytes())
                .collect(),
            after: sensors.iter().map(|s| format!(",\"unit\":{}}}", json(&s.unit)).into_bytes()).collect(),
            offset,
            first: true,
            ryu: ryu::Buffer::new(),
        }
    }

    /// The start of the envelope, with the first batch if there is one.
    pub fn begin(&mut self, first: Option<&ReadingBatch>) -> Bytes {
        let mut out = Vec::with_capacity(64 * 1024);
        out.extend_from_slice(b"{\"message\":\"Success\",\"data\":[");
        if let Some(b) = first {
            self.write_batch(b, &mut out);
        }
        Bytes::from(out)
    }

    /// One batch of readings, comma-separated from the previous ones.
    pub fn batch(&mut self, batch: &ReadingBatch) -> Bytes {
        let mut out = Vec::with_capacity(batch.values.len() * 48 + batch.len() * 48);
        self.write_batch(batch, &mut out);
        Bytes::from(out)
    }

    fn write_batch(&mut self, batch: &ReadingBatch, out: &mut Vec<u8>) {
        let mut values = batch.values.iter();
        for (&ts, &mask) in batch.timestamps.iter().zip(&batch.masks) {
            if !self.first {
                out.push(b',');
            }
            self.first = false;
            out.extend_from_slice(b"{\"timestamp\":\"");
            write_rfc3339(out, ts, self.offset);
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
                out.extend_from_slice(self.ryu.format_finite(*value).as_bytes());
                out.extend_from_slice(after);
            }
            out.extend_from_slice(b"]}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_readings_like_serde_would() {
        let sensors = vec![
            SensorMeta { sensor_id: "A-b\"q".into(), name: "n".into(), kind: "BATTERY".into(), unit: "%".into() },
            SensorMeta { sensor_id: "A-x".into(), name: "n".into(), kind: "X".into(), unit: ".".into() },
        ];
        let mut enc = ReadingEncoder::new(&sensors, Offset::constant(7));
        let batch = ReadingBatch { timestamps: vec![0, 60], masks: vec![0b11, 0b10], values: vec![92.5, 100.0, -1e-7] };
        let mut text = enc.begin(Some(&batch)).to_vec();
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
