//! POST /webhook/sensor-data: the sensor-data webhook receiver (spec 4.5).
//! In `simulate` mode (the default) it is a test bench: envelopes are
//! checked, never stored as readings, and the last ones accepted are kept
//! ([`super::received`]) with warnings so a sender can see what arrived. In `ingest` mode
//! an envelope is written as one reading, atomically.

use super::AppState;
use super::auth::WebhookCaller;
use super::error::{ApiError, JSON, WebhookError, WebhookReply, success};
use super::received::Received;
use super::schema::{ReceivedList, WebhookEnvelope};
use crate::config::server::WebhookMode;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sensorhub_core::ingest::{self, Given, Rules, ValueAt};
use sensorhub_core::time::{format_rfc3339, parse_rfc3339};
use sensorhub_store::Scope;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A checked envelope.
struct Envelope {
    device_id: String,
    timestamp: jiff::Timestamp,
    /// The values, each with its field path for messages.
    values: Vec<ValueAt>,
    warnings: Vec<String>,
}

/// `v` as a received value: a number, or its JSON type.
pub(crate) fn given(v: &Value) -> Given {
    v.as_f64().map_or(Given::Other(kind(v)), Given::Number)
}

/// The JSON type of `v`, for messages (`a string`).
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn required_string(obj: &Map<String, Value>, field: &str) -> Result<String, String> {
    match obj.get(field) {
        None => Err(format!("{field} is required")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("{field} must not be empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("{field} must be a string, not {}", kind(other))),
    }
}

/// Checks the envelope of spec 2.6; the error names the field.
fn parse_envelope(body: &[u8]) -> Result<Envelope, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("the body is empty: send the envelope as a JSON object".into());
    }
    let raw: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not valid JSON: {e}"))?;
    let Value::Object(obj) = &raw else {
        return Err(format!("the body must be a JSON object, not {}", kind(&raw)));
    };
    required_string(obj, "event")?;
    let device_id = required_string(obj, "device_id")?;
    let ts_text = required_string(obj, "timestamp")?;
    let timestamp = parse_rfc3339("timestamp", &ts_text).map_err(|_| {
        format!("timestamp must be an RFC 3339 date-time like 2026-05-05T07:00:00+07:00, not {ts_text:?}")
    })?;
    let data = match obj.get("data") {
        None => return Err("data is required".into()),
        Some(Value::Object(d)) => d,
        Some(other) => return Err(format!("data must be a JSON object, not {}", kind(other))),
    };
    match obj.get("metadata") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(other) => return Err(format!("metadata must be a JSON object, not {}", kind(other))),
    }
    let mut values = Vec::new();
    match data.get("sensors") {
        Some(Value::Array(_)) if data.len() > 1 => {
            return Err("data must hold either a sensors list or named values, not both".into());
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("data.sensors[{i}]");
                let Value::Object(item) = item else {
                    return Err(format!("{at} must be an object with id and value, not {}", kind(item)));
                };
                let id = required_string(item, "id").map_err(|e| format!("{at}.{e}"))?;
                let value = item.get("value").ok_or(format!("{at}.value is required"))?;
                values.push(ValueAt { at: format!("{at}.value"), sensor_id: id, value: given(value) });
            }
        }
        Some(other) if data.len() == 1 => {
            return Err(format!("data.sensors must be an array of {{id, value}}, not {}", kind(other)));
        }
        _ => values.extend(data.iter().map(|(k, v)| ValueAt {
            at: format!("data.{k}"),
            sensor_id: k.clone(),
            value: given(v),
        })),
    }
    let known = ["event", "device_id", "timestamp", "data", "metadata"];
    let mut warnings: Vec<String> = obj
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| format!("unknown field {k:?} is ignored"))
        .collect();
    if timestamp.subsec_nanosecond() != 0 {
        warnings
            .push("timestamp has a fraction of a second: readings are stored to the second, so it is dropped".into());
    }
    Ok(Envelope { device_id, timestamp, values, warnings })
}

/// Reads the body, refusing it (413) past `max` bytes without reading on.
async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<axum::body::Bytes, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or_default().trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::UnsupportedMediaType(format!(
                "Content-Type must be application/json, not {essence:?}"
            )));
        }
    }
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::PayloadTooLarge),
        Err(e) => Err(ApiError::BadRequest(format!("cannot read the body: {e}"))),
    }
}

/// Spec 4.5.
#[utoipa::path(post, path = "/external/v1/webhook/sensor-data", tag = "webhook",
    operation_id = "receive-sensor-data",
    security(("webhookKey" = [])),
    request_body(content = WebhookEnvelope, content_type = "application/json"),
    responses(
        (status = 200, description = "Data received successfully", body = WebhookReply),
        (status = 400, description = "Bad Request: the detail names the field", body = WebhookReply),
        (status = 401, description = "Unauthorized: missing, unknown or revoked X-API-KEY", body = WebhookReply),
        (status = 403, description = "Forbidden (ingest mode): the key's account may see the device but not write it", body = WebhookReply),
        (status = 404, description = "Device not found (ingest mode)", body = WebhookReply),
        (status = 405, description = "Method Not Allowed", body = WebhookReply),
        (status = 413, description = "Payload Too Large", body = WebhookReply),
        (status = 415, description = "Unsupported Media Type", body = WebhookReply),
        (status = 429, description = "Too Many Requests", body = WebhookReply),
    ))]
pub async fn receive(
    State(state): State<AppState>,
    caller: WebhookCaller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WebhookError> {
    let result = handle(&state, &caller, &headers, body).await;
    state.metrics.webhook(result.is_ok());
    result?;
    let reply = WebhookReply { message: "Data received successfully", detail: None };
    Ok(([(header::CONTENT_TYPE, JSON)], serde_json::to_vec(&reply).unwrap_or_default()).into_response())
}

async fn handle(state: &AppState, caller: &WebhookCaller, headers: &HeaderMap, body: Body) -> Result<(), ApiError> {
    let bytes = read_body(headers, body, state.webhook.max_body_bytes).await?;
    let mut envelope = parse_envelope(&bytes).map_err(ApiError::BadRequest)?;
    // Only the text is kept from here on (for the received list): the parsed
    // JSON is gone, and the body's bytes become that text without a copy.
    let text = String::from_utf8(Vec::from(bytes)).map_err(|_| ApiError::BadRequest("the body is not UTF-8".into()))?;
    let size = text.len();
    let envelope_text = RawValue::from_string(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let now = jiff::Timestamp::now();
    let rules = Rules { now, max_future_skew: state.webhook.max_future_skew };
    let scope = Scope::Account { account_id: caller.account_id, key: None };
    let device = state.store.find_device(scope, &envelope.device_id).await?;
    if state.webhook.mode == WebhookMode::Ingest {
        let device = device.ok_or(ApiError::DeviceNotFound)?;
        if !state.store.may_write(caller.account_id, device.pk).await? {
            return Err(ApiError::WriteForbidden(format!(
                "this key's account may read device {:?} but not write its readings: it needs to own the device or hold a write grant",
                envelope.device_id
            )));
        }
        let values = std::mem::take(&mut envelope.values);
        let reading =
            ingest::reading(&envelope.device_id, envelope.timestamp, values, &device.sensors, rules, "webhook".into())
                .map_err(|p| ApiError::BadRequest(p.message))?;
        state.store.ingest(reading).await?;
        state.metrics.readings_ingested(1);
    } else {
        let sensors = device.as_ref().map(|d| d.sensors.as_slice());
        let problems = ingest::survey(&envelope.device_id, envelope.timestamp, &envelope.values, sensors, rules);
        envelope.warnings.extend(problems.into_iter().map(|p| p.message));
    }
    let received = Received {
        received_at: format_rfc3339(now.as_second(), jiff::tz::Offset::UTC),
        size,
        envelope: envelope_text,
        warnings: envelope.warnings,
    };
    let pushed = state.received.push(caller.account_id, received).await;
    if state.webhook.mode == WebhookMode::Ingest {
        // The reading is committed: the list is a convenience, and a Redis
        // outage (counted in the metrics) must not turn a stored write into
        // an error the client would retry.
        if let Err(e) = pushed {
            tracing::warn!(error = %e, "reading stored; the received list could not be updated");
        }
        return Ok(());
    }
    pushed
}

/// GET /webhook/sensor-data/received: the caller's last accepted envelopes.
#[utoipa::path(get, path = "/external/v1/webhook/sensor-data/received", tag = "webhook",
    security(("webhookKey" = [])),
    responses(
        (status = 200, description = "The last 100 accepted envelopes, newest first, with warnings", body = ReceivedList),
        (status = 401, description = "Unauthorized", body = WebhookReply),
        (status = 429, description = "Too Many Requests", body = WebhookReply),
    ))]
pub async fn received(State(state): State<AppState>, caller: WebhookCaller) -> Result<Response, WebhookError> {
    Ok(success(state.received.newest_first(caller.account_id).await.map_err(WebhookError)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| serde_json::json!(f)),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            "[ -~]{0,24}".prop_map(Value::String),
            prop_oneof![Just("2026-05-05T07:00:00+07:00"), Just("0000-01-01T00:00:00Z"), Just("9999-12-31T23:59:59Z")]
                .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("event".to_owned()),
                        Just("device_id".to_owned()),
                        Just("timestamp".to_owned()),
                        Just("data".to_owned()),
                        Just("sensors".to_owned()),
                        Just("id".to_owned()),
                        Just("value".to_owned()),
                        "[a-z]{1,6}"
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Any bytes: an envelope or a detail, never a panic.
        #[test]
        fn fuzz_envelope_bytes_never_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Err(detail) = parse_envelope(&body) { proptest::prop_assert!(!detail.is_empty()); }
        }

        /// Any JSON shaped like an envelope: accepted, or refused with a detail.
        #[test]
        fn fuzz_envelope_json_never_panics(v in json_value()) {
            let body = serde_json::to_vec(&v).unwrap_or_default();
            if let Err(detail) = parse_envelope(&body) { proptest::prop_assert!(!detail.is_empty()); }
        }
    }

    fn detail(body: &str) -> String {
        parse_envelope(body.as_bytes()).err().unwrap_or_default()
    }

    #[test]
    fn both_data_shapes_are_read() {
        let e = parse_envelope(
            br#"{"event":"sensor-data","device_id":"D","timestamp":"2026-05-05T07:00:00+07:00","data":{"a":1,"b":2.5}}"#,
        )
        .expect("valid");
        assert_eq!(e.values.len(), 2);
        let e = parse_envelope(
            br#"{"event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{"sensors":[{"id":"a","value":1}]},"metadata":{"fw":"1.2"}}"#,
        )
        .expect("valid");
        assert_eq!(e.values[0].at, "data.sensors[0].value");
        assert_eq!(e.values[0].sensor_id, "a");
    }

    #[test]
    fn errors_name_the_field() {
        let ok = r#""event":"x","device_id":"D","timestamp":"2026-05-05T00:00:00Z""#;
        assert!(detail("").contains("empty"));
        assert!(detail("{").contains("not valid JSON"));
        assert!(detail("[]").contains("not an array"));
        assert!(
            detail(r#"{"device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{}}"#).contains("event is required")
        );
        assert!(
            detail(r#"{"event":5,"device_id":"D","timestamp":"2026-05-05T00:00:00Z","data":{}}"#)
                .contains("event must be a string")
        );
        assert!(
            detail(r#"{"event":"x","device_id":"","timestamp":"2026-05-05T00:00:00Z","data":{}}"#)
                .contains("device_id must not be empty")
        );
        assert!(
            detail(r#"{"event":"x","device_id":"D","timestamp":"yesterday","data":{}}"#)
                .contains("timestamp must be an RFC 3339")
        );
        assert!(detail(&format!("{{{ok}}}")).contains("data is required"));
        assert!(detail(&format!("{{{ok},\"data\":[1]}}")).contains("data must be a JSON object, not an array"));
        assert!(detail(&format!("{{{ok},\"data\":{{}},\"metadata\":3}}")).contains("metadata must be a JSON object"));
        assert!(
            detail(&format!("{{{ok},\"data\":{{\"sensors\":[{{\"value\":1}}]}}}}"))
                .contains("data.sensors[0].id is required")
        );
        assert!(detail(&format!("{{{ok},\"data\":{{\"sensors\":5}}}}")).contains("data.sensors must be an array"));
        assert!(detail(&format!("{{{ok},\"data\":{{\"sensors\":[],\"x\":1}}}}")).contains("not both"));
    }
}
