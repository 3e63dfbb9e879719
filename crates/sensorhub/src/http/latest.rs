//! GET /devices/{device_id}/latest (Basic) and its public twin: the newest
//! reading of each sensor of one device, each with its own time, read from
//! the store's index (a few rows whatever the history's length).

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller};
use super::error::{ApiError, JSON};
use super::readings::DevicePath;
use super::schema::{ErrorBody, LatestList};
use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use sensorhub_core::model::SensorMeta;
use sensorhub_core::time::{Rfc3339Writer, Zone};
use sensorhub_store::LatestValue;
use serde::Deserialize;

/// The query of a latest request: only `tz`; other parameters are ignored.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LatestParams {
    /// Time zone of the rendered times: whole hours -12..14, ±HH:MM, or an IANA name (Asia/Jakarta, Europe/Berlin), with which each time carries the zone's offset at that instant. Default: the server's --default-tz.
    #[param(example = "7")]
    tz: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for LatestParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))
    }
}

/// The newest readings of a device (Basic).
#[utoipa::path(get, path = "/external/v1/devices/{device_id}/latest", tag = "readings",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), LatestParams),
    responses(
        (status = 200, description = "Each sensor's newest reading, in sensor order", body = LatestList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn latest_basic(
    state: State<AppState>,
    caller: BasicCaller,
    device: DevicePath,
    params: LatestParams,
) -> Result<Response, ApiError> {
    latest(state, caller, device, params).await
}

/// The newest readings of a device (API key id in the path).
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices/{device_id}/latest", tag = "readings",
    params(
        ("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"),
        ("device_id" = String, Path, description = "Device id"),
        LatestParams,
    ),
    responses(
        (status = 200, description = "Each sensor's newest reading, in sensor order", body = LatestList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn latest_public(
    state: State<AppState>,
    caller: PublicCaller,
    device: DevicePath,
    params: LatestParams,
) -> Result<Response, ApiError> {
    latest(state, caller, device, params).await
}

/// Both latest endpoints: `tz` is checked before the store is asked, as on
/// the data endpoints.
async fn latest<C: Into<Caller>>(
    State(state): State<AppState>,
    caller: C,
    DevicePath(device_id): DevicePath,
    params: LatestParams,
) -> Result<Response, ApiError> {
    let zone = state.rules.zone(params.tz.as_deref()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let (device, values) =
        state.store.latest(caller.into().scope, &device_id).await?.ok_or(ApiError::DeviceNotFound)?;
    let time = match zone {
        Zone::Fixed(offset) => Rfc3339Writer::new(offset),
        Zone::Named(tz) => Rfc3339Writer::in_zone(tz),
    };
    Ok(([(header::CONTENT_TYPE, JSON)], encode(&device.sensors, &values, time)).into_response())
}

/// The answer: `{"message":"Success","data":[{"id","value","unit","timestamp"},…]}`,
/// values written as the data endpoints write them.
fn encode(sensors: &[SensorMeta], values: &[LatestValue], mut time: Rfc3339Writer) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + values.len() * 96);
    out.extend_from_slice(b"{\"message\":\"Success\",\"data\":[");
    let mut comma = false;
    for v in values {
        let Some(sensor) = sensors.get(v.idx) else { continue };
        if comma {
            out.push(b',');
        }
        comma = true;
        out.extend_from_slice(b"{\"id\":");
        json_string(&sensor.sensor_id, &mut out);
        out.extend_from_slice(b",\"value\":");
        v.value.write_json(&mut out);
        out.extend_from_slice(b",\"unit\":");
        json_string(&sensor.unit, &mut out);
        out.extend_from_slice(b",\"timestamp\":\"");
        time.write(&mut out, v.timestamp);
        out.extend_from_slice(b"\"}");
    }
    out.extend_from_slice(b"]}");
    out
}

/// Appends `s` as a JSON string.
fn json_string(s: &str, out: &mut Vec<u8>) {
    // Writing a string to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sensorhub_store::StoredValue;

    fn sensor(id: &str, unit: &str) -> SensorMeta {
        SensorMeta { sensor_id: id.into(), name: id.into(), kind: "T".into(), unit: unit.into() }
    }

    #[test]
    fn the_answer_keeps_the_field_order_and_escapes_text() {
        let sensors = [sensor("w\"l", "cm"), sensor("bat", "%")];
        let values = [
            LatestValue { idx: 0, timestamp: 1_777_964_400, value: StoredValue::Float(120.0) },
            LatestValue { idx: 1, timestamp: 1_777_960_800, value: StoredValue::Decimal { n: 925, k: 1 } },
            LatestValue { idx: 7, timestamp: 0, value: StoredValue::Float(1.0) },
        ];
        let offset = jiff::tz::Offset::from_hours(7).expect("offset");
        let body = String::from_utf8(encode(&sensors, &values, Rfc3339Writer::new(offset))).expect("utf-8");
        assert_eq!(
            body,
            r#"{"message":"Success","data":[{"id":"w\"l","value":120.0,"unit":"cm","timestamp":"2026-05-05T14:00:00+07:00"},{"id":"bat","value":92.5,"unit":"%","timestamp":"2026-05-05T13:00:00+07:00"}]}"#,
            "an idx without a sensor is left out"
        );
        let empty = encode(&sensors, &[], Rfc3339Writer::new(offset));
        assert_eq!(empty, br#"{"message":"Success","data":[]}"#);
    }
}
