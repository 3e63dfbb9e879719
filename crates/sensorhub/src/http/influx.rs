//! InfluxDB line protocol in, for Telegraf, Node-RED and dataloggers:
//! `POST /api/v2/write?org=…&bucket=…&precision=…` and `POST
//! /write?db=…&precision=…` (v1). The webhook key authenticates: as
//! `Authorization: Token <key>` (v2, and v1 on InfluxDB 1.8+), as the
//! password of Basic auth or of the `p` parameter (v1); org, bucket, db and
//! user are accepted and not used. A point's `device` tag, or else its
//! measurement, names the device; its fields are sensor ids; other tags are
//! ignored. The webhook's ingest rules and write grants hold; a request's
//! points are stored together (all or, on the first bad line, none), with
//! their live pushes and outgoing deliveries. Answers are InfluxDB's: 204,
//! or `{"code": …, "message": …}` naming the line; `GET /ping` answers as
//! InfluxDB's does, for clients that ask it first (the `influx` CLI).

use super::AppState;
use super::auth::parse_basic;
use super::error::ApiError;
use super::ratelimit::Guard;
use super::webhook_auth::WebhookCaller;
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sensorhub_core::ingest::{self, Given, Rules, ValueAt};
use sensorhub_core::lineproto::{Precision, parse_line};
use sensorhub_core::model::ReadingInput;
use sensorhub_store::DeviceHandle;
use sensorhub_store::delivery::Outbox;
use std::collections::HashMap;
use std::io::Read;

/// The body of a refusal, as InfluxDB gives it.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct InfluxErrorBody {
    /// `invalid`, `unauthorized`, `forbidden`, `request too large`, `too many requests`, …
    #[schema(example = "invalid")]
    pub code: String,
    /// What is wrong, naming the line.
    #[schema(example = "line 2: field \"AWLR1-wl\" is a string, not a number")]
    pub message: String,
}

/// An answer as InfluxDB gives it.
#[derive(Debug)]
pub struct InfluxError(pub ApiError);

impl<E: Into<ApiError>> From<E> for InfluxError {
    fn from(e: E) -> Self {
        InfluxError(e.into())
    }
}

impl IntoResponse for InfluxError {
    fn into_response(self) -> Response {
        let (status, message) = self.0.status_and_message();
        let code = match status {
            StatusCode::BAD_REQUEST => "invalid",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::NOT_FOUND => "not found",
            StatusCode::PAYLOAD_TOO_LARGE => "request too large",
            StatusCode::TOO_MANY_REQUESTS => "too many requests",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            _ => "internal error",
        };
        let message = match &self.0 {
            ApiError::TooManyRequests | ApiError::TooManyConnections => "Too Many Requests",
            e => e.detail().unwrap_or(message),
        };
        let body =
            serde_json::to_vec(&InfluxErrorBody { code: code.into(), message: message.into() }).unwrap_or_default();
        let too_many = status == StatusCode::TOO_MANY_REQUESTS;
        let mut res = self.0.respond(body);
        if too_many && !res.headers().contains_key(header::RETRY_AFTER) {
            res.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        res
    }
}

/// The account of the webhook key a line-protocol write carries.
pub struct InfluxCaller {
    account_id: i64,
    key: WebhookCaller,
}

impl InfluxCaller {
    /// [`WebhookCaller::refreshed`]: the caller as its key stands once the
    /// body has come.
    async fn refreshed(self, state: &AppState) -> Result<Self, ApiError> {
        Ok(Self { account_id: self.account_id, key: self.key.refreshed(state).await? })
    }
}

impl FromRequestParts<AppState> for InfluxCaller {
    type Rejection = InfluxError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, InfluxError> {
        let guard = Guard::new(parts, state, "webhook");
        let key = key_of(parts);
        let caller = WebhookCaller::by_key(&guard, state, key.as_deref()).await?;
        Ok(Self { account_id: caller.account_id, key: caller })
    }
}

/// The key a write carries: `Authorization: Token|Bearer <key>`, Basic's
/// password, or the `p` parameter.
fn key_of(parts: &Parts) -> Option<String> {
    let given = |k: &str| Some(k.trim().to_owned()).filter(|k| !k.is_empty());
    if let Some(auth) = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, rest) = auth.trim().split_once(' ').unwrap_or((auth, ""));
        return match scheme.to_ascii_lowercase().as_str() {
            "token" | "bearer" => given(rest),
            "basic" => parse_basic(auth).and_then(|(_, password)| given(&password)),
            _ => None,
        };
    }
    let query: HashMap<String, String> = serde_urlencoded::from_str(parts.uri.query().unwrap_or_default()).ok()?;
    query.get("p").and_then(|p| given(p))
}

/// The precision a write's query names.
fn precision(parts_query: Option<&str>) -> Result<Precision, ApiError> {
    let query: HashMap<String, String> = serde_urlencoded::from_str(parts_query.unwrap_or_default())
        .map_err(|e| ApiError::BadRequest(format!("the query string: {e}")))?;
    Precision::parse(query.get("precision").map(String::as_str)).map_err(ApiError::BadRequest)
}

/// InfluxDB 2 line protocol: `Authorization: Token <webhook key>`.
#[utoipa::path(post, path = "/api/v2/write", tag = "line protocol",
    operation_id = "write-v2",
    security(("influxToken" = [])),
    params(
        ("precision" = Option<String>, Query, description = "ns (default), us, ms or s; v1 also n, u, m, h"),
        ("org" = Option<String>, Query, description = "Accepted, not used"),
        ("bucket" = Option<String>, Query, description = "Accepted, not used"),
    ),
    request_body(content = String, content_type = "text/plain", description = "Line protocol, one point per line; gzip with Content-Encoding"),
    responses(
        (status = 204, description = "Every point stored"),
        (status = 400, description = "A line is refused (`code` invalid, `message` names the line); nothing stored", body = InfluxErrorBody),
        (status = 401, description = "Missing, unknown or revoked key", body = InfluxErrorBody),
        (status = 403, description = "The key's account may not write a device", body = InfluxErrorBody),
        (status = 413, description = "Body (or inflated body) larger than --max-body-bytes", body = InfluxErrorBody),
        (status = 429, description = "Too many requests, with Retry-After", body = InfluxErrorBody),
    ))]
pub async fn write_v2(
    State(state): State<AppState>,
    caller: InfluxCaller,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    write(&state, caller, precision(uri.query())?, &headers, body).await
}

/// InfluxDB 1.x line protocol: the webhook key as Basic password, `p`, or `Authorization: Token`.
#[utoipa::path(post, path = "/write", tag = "line protocol",
    operation_id = "write-v1",
    security(("influxToken" = []), ("basicAuth" = [])),
    params(
        ("precision" = Option<String>, Query, description = "ns (default), us, ms or s; v1 also n, u, m, h"),
        ("db" = Option<String>, Query, description = "Accepted, not used"),
        ("u" = Option<String>, Query, description = "Accepted, not used"),
        ("p" = Option<String>, Query, description = "The webhook key, when not in Authorization"),
    ),
    request_body(content = String, content_type = "text/plain", description = "Line protocol, one point per line; gzip with Content-Encoding"),
    responses(
        (status = 204, description = "Every point stored"),
        (status = 400, description = "A line is refused (`code` invalid, `message` names the line); nothing stored", body = InfluxErrorBody),
        (status = 401, description = "Missing, unknown or revoked key", body = InfluxErrorBody),
        (status = 403, description = "The key's account may not write a device", body = InfluxErrorBody),
        (status = 413, description = "Body (or inflated body) larger than --max-body-bytes", body = InfluxErrorBody),
        (status = 429, description = "Too many requests, with Retry-After", body = InfluxErrorBody),
    ))]
pub async fn write_v1(
    State(state): State<AppState>,
    caller: InfluxCaller,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    write(&state, caller, precision(uri.query())?, &headers, body).await
}

/// InfluxDB's `/ping`, which its clients ask before they write.
#[utoipa::path(get, path = "/ping", tag = "line protocol", operation_id = "influx-ping",
    responses((status = 204, description = "Up; `X-Influxdb-Version` names the InfluxDB API version answered")))]
pub async fn ping() -> impl IntoResponse {
    (StatusCode::NO_CONTENT, [("x-influxdb-version", "1.8.10"), ("x-influxdb-build", "OSS")])
}

async fn write(
    state: &AppState,
    caller: InfluxCaller,
    precision: Precision,
    headers: &HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    let max = state.webhook.max_body_bytes;
    let bytes = match read_body(headers, body, max).await {
        Ok(bytes) => bytes,
        Err(e) => return Err(caller.key.refusing(state, e).await.into()),
    };
    let caller = caller.refreshed(state).await?;
    let text = String::from_utf8(bytes).map_err(|_| ApiError::BadRequest("the body is not UTF-8".into()))?;
    let readings = readings_of(state, &caller, &text, precision).await?;
    let n = readings.len();
    let mut readings = readings.into_iter();
    match (readings.next(), n) {
        (None, _) => {}
        // One point (a logger's usual write) joins the group commit that
        // webhook and MQTT ingest share, rather than paying its own fsync.
        (Some(one), 1) => state.store.ingest(one).await?,
        (Some(first), _) => {
            let all = std::iter::once(first).chain(readings).map(Ok);
            state.store.import(Box::new(all), Outbox::Deliver).await?;
        }
    }
    state.metrics.readings_ingested(n);
    Ok(StatusCode::NO_CONTENT)
}

/// The body, inflated when `Content-Encoding: gzip`: at most `max` bytes
/// read, and at most `max` once inflated (413 past either).
async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Vec<u8>, ApiError> {
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    let raw = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return Err(ApiError::PayloadTooLarge),
        Err(e) => return Err(ApiError::BadRequest(format!("cannot read the body: {e}"))),
    };
    let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("identity");
    match encoding.trim().to_ascii_lowercase().as_str() {
        "identity" | "" => Ok(raw.to_vec()),
        "gzip" => {
            let mut out = Vec::new();
            // Every member, as InfluxDB reads them (`cat a.gz b.gz`, a
            // writer that flushes members): a decoder of one would stop at
            // the first and drop the rest unsaid. Bytes after the last that
            // are not a gzip member are refused.
            let mut inflated = flate2::read::MultiGzDecoder::new(&raw[..]).take(max as u64 + 1);
            inflated.read_to_end(&mut out).map_err(|e| ApiError::BadRequest(format!("the gzip body: {e}")))?;
            if out.len() > max {
                return Err(ApiError::PayloadTooLarge);
            }
            Ok(out)
        }
        other => Err(ApiError::UnsupportedMediaType(format!("Content-Encoding {other:?} is not gzip"))),
    }
}

/// What the write may do with one device: its sensors, if the caller may
/// write it.
type Writable = Result<std::sync::Arc<DeviceHandle>, ApiError>;

/// The readings of every line of `text`: all of them, or the first
/// refusal, naming its line.
async fn readings_of(
    state: &AppState,
    caller: &InfluxCaller,
    text: &str,
    precision: Precision,
) -> Result<Vec<ReadingInput>, ApiError> {
    let now = jiff::Timestamp::now();
    let mut devices: HashMap<String, Writable> = HashMap::new();
    let mut readings = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        let bad = |e: String| ApiError::BadRequest(format!("line {n}: {e}"));
        let Some(point) = parse_line(line).map_err(bad)? else { continue };
        let device_id = point.tag("device").unwrap_or(&point.measurement).to_owned();
        if !devices.contains_key(&device_id) {
            let writable = writable(state, caller, &device_id).await?;
            devices.insert(device_id.clone(), writable);
        }
        let device = match devices.get(&device_id) {
            Some(Ok(device)) => device.clone(),
            Some(Err(e)) => return Err(line_error(n, e)),
            None => continue,
        };
        let second = point.timestamp.map_or(now.as_second(), |t| precision.seconds(t));
        let timestamp = jiff::Timestamp::from_second(second)
            .map_err(|_| bad(format!("timestamp {} is out of range", point.timestamp.unwrap_or_default())))?;
        let mut values = Vec::with_capacity(point.fields.len());
        for (key, value) in point.fields {
            let number = value.number().map_err(|kind| bad(format!("field {key:?} is {kind}, not a number")))?;
            values.push(ValueAt { at: format!("field {key:?}"), sensor_id: key, value: Given::Number(number) });
        }
        let rules = Rules { now, max_future_skew: state.webhook.max_future_skew };
        let reading = ingest::reading(&device_id, timestamp, values, &device.sensors, rules, format!("line {n}"))
            .map_err(|p| bad(p.message))?;
        readings.push(reading);
    }
    Ok(readings)
}

/// Whether `caller` may write `device_id`, and its sensors if so; a
/// device it does not see and one it may only read are refused (as the
/// line's error), a store failure fails the request.
async fn writable(state: &AppState, caller: &InfluxCaller, device_id: &str) -> Result<Writable, ApiError> {
    let Some((device, may_write)) =
        state.store.writable_device(caller.account_id, device_id, caller.key.generations()).await?
    else {
        return Ok(Err(ApiError::BadRequest(format!("device {device_id:?} is not one of this key's devices"))));
    };
    if !may_write {
        return Ok(Err(ApiError::WriteForbidden(format!(
            "this key's account may read device {device_id:?} but not write its readings"
        ))));
    }
    Ok(Ok(device))
}

/// `e` (about a device) as the refusal of line `n`.
fn line_error(n: usize, e: &ApiError) -> ApiError {
    match e {
        ApiError::WriteForbidden(d) => ApiError::WriteForbidden(format!("line {n}: {d}")),
        ApiError::BadRequest(d) => ApiError::BadRequest(format!("line {n}: {d}")),
        _ => ApiError::BadRequest(format!("line {n}: refused")),
    }
}
