//! POST /webhook/sensor-data: the sensor-data webhook receiver (spec 4.5).
//! In `simulate` mode (the default) it is a test bench: envelopes are
//! checked, never stored as readings, and the last ones accepted are kept
//! ([`super::received`]) with warnings so a sender can see what arrived. In `ingest` mode
//! an envelope is written as one reading, atomically.

use super::AppState;
use super::error::{ApiError, JSON, WebhookError, WebhookReply, success};
use super::received::Received;
use super::schema::{ReceivedList, WebhookEnvelope};
use super::webhook_auth::WebhookCaller;
use crate::config::server::WebhookMode;
use crate::ingest::envelope::{Envelope, parse_envelope};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sensorhub_core::ingest::{self, Rules};
use sensorhub_core::time::format_rfc3339;
use sensorhub_store::Scope;
use serde_json::value::RawValue;

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
    let result = handle(&state, caller, &headers, body).await;
    state.metrics.webhook(result.is_ok());
    result?;
    let reply = WebhookReply { message: "Data received successfully", detail: None };
    Ok(([(header::CONTENT_TYPE, JSON)], serde_json::to_vec(&reply).unwrap_or_default()).into_response())
}

/// An envelope as it arrived: parsed, and its text (for the received list).
struct Arrived {
    envelope: Envelope,
    text: Box<RawValue>,
    size: usize,
}

async fn arrive(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Arrived, ApiError> {
    let bytes = read_body(headers, body, state.webhook.max_body_bytes).await?;
    let envelope = parse_envelope(&bytes).map_err(ApiError::BadRequest)?;
    // Only the text is kept from here on (for the received list): the parsed
    // JSON is gone, and the body's bytes become that text without a copy.
    let text = String::from_utf8(Vec::from(bytes)).map_err(|_| ApiError::BadRequest("the body is not UTF-8".into()))?;
    let size = text.len();
    let text = RawValue::from_string(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(Arrived { envelope, text, size })
}

/// Handles one envelope. A caller whose key's answer was kept (ingest
/// mode) is answered only on what the store confirms: its reading is
/// written at the generations the answer was kept at, and any failure is
/// decided again as for a key looked up now ([`WebhookCaller::again`]).
async fn handle(state: &AppState, caller: WebhookCaller, headers: &HeaderMap, body: Body) -> Result<(), ApiError> {
    let Arrived { mut envelope, text, size } = match arrive(state, headers, body).await {
        Ok(arrived) => arrived,
        Err(e) => return Err(caller.refusing(state, e).await),
    };
    let caller = caller.refreshed(state).await?;
    let now = jiff::Timestamp::now();
    let rules = Rules { now, max_future_skew: state.webhook.max_future_skew };
    let caller = if state.webhook.mode == WebhookMode::Ingest {
        match store(state, &caller, &envelope, rules).await {
            Ok(()) => {
                caller.confirmed(state)?;
                caller
            }
            Err(NotWritten { error, decided: true }) => {
                let fresh = caller.again(state, error).await?;
                store(state, &fresh, &envelope, rules).await.map_err(|e| e.error)?;
                fresh
            }
            Err(NotWritten { error, decided: false }) => return Err(caller.refusing(state, error).await),
        }
    } else {
        let scope = Scope::Account { account_id: caller.account_id, key: None };
        let device = state.store.find_device(scope, &envelope.device_id).await?;
        let sensors = device.as_ref().map(|d| d.sensors.as_slice());
        let problems = ingest::survey(&envelope.device_id, envelope.timestamp, &envelope.values, sensors, rules);
        envelope.warnings.extend(problems.into_iter().map(|p| p.message));
        caller
    };
    let received = Received {
        received_at: format_rfc3339(now.as_second(), jiff::tz::Offset::UTC),
        size,
        envelope: text,
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

/// A reading not written, and whether the answers it was decided on (the
/// key's account, the device, its write permission and sensors) made it
/// so: decided again with answers read now, it may be written.
struct NotWritten {
    error: ApiError,
    decided: bool,
}

impl From<ApiError> for NotWritten {
    fn from(error: ApiError) -> Self {
        NotWritten { error, decided: true }
    }
}

impl From<sensorhub_store::StoreError> for NotWritten {
    fn from(e: sensorhub_store::StoreError) -> Self {
        use sensorhub_store::StoreError::{Invalid, Stale};
        NotWritten { decided: matches!(e, Stale | Invalid(_)), error: e.into() }
    }
}

/// Ingest mode: writes the envelope's reading as `caller` may, at the
/// generations of its kept answer if it has one.
async fn store(state: &AppState, caller: &WebhookCaller, envelope: &Envelope, rules: Rules) -> Result<(), NotWritten> {
    let (device, may_write) = state
        .store
        .writable_device(caller.account_id, &envelope.device_id, caller.generations())
        .await?
        .ok_or(ApiError::DeviceNotFound)?;
    if !may_write {
        return Err(ApiError::WriteForbidden(format!(
            "this key's account may read device {:?} but not write its readings: it needs to own the device or hold a write grant",
            envelope.device_id
        ))
        .into());
    }
    let values = envelope.values.clone();
    let reading =
        ingest::reading(&envelope.device_id, envelope.timestamp, values, &device.sensors, rules, "webhook".into())
            .map_err(|p| ApiError::BadRequest(p.message))?;
    match caller.kept_at() {
        Some(at) => state.store.ingest_at(reading, at).await?,
        None => state.store.ingest(reading).await?,
    }
    state.metrics.readings_ingested(1);
    Ok(())
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
