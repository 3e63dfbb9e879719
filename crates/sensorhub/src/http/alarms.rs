//! The alarms endpoints: a device's alarms (one element per rule, in rule
//! order, with its state), the active alarms of every device a caller
//! sees (most severe first), a device's transitions in a range (oldest
//! first), each with Basic auth or an API key id in the path; and the
//! acknowledgement of an active episode (Basic, by an account that owns
//! the device or holds a write grant). Times are rendered in `tz`, as on
//! the data endpoints.

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller};
use super::error::{ApiError, success};
use super::readings::DevicePath;
use super::schema::ErrorBody;
use crate::alarm_view::{Acknowledged, AlarmEventList, AlarmList, AlarmView, Clock};
use crate::live::access::Credential;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::Response;
use sensorhub_core::time::RangeQuery;
use sensorhub_store::StoreError;
use serde::Deserialize;

/// The query of the alarms endpoints: `tz`, and `start`/`end` for events
/// (the others ignore them, and document [`ZoneParams`]).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AlarmParams {
    /// Start, inclusive, of when transitions were recorded (RFC 3339, or without an offset read in tz). Default: today 00:00:00.
    #[param(example = "2026-05-05T00:00:00Z")]
    start: Option<String>,
    /// End, inclusive, same forms. Default: now.
    #[param(example = "2026-05-05T23:59:59Z")]
    end: Option<String>,
    /// Time zone of the rendered times (and of bounds without an offset), as on the data endpoints. Default: the server's --default-tz.
    #[param(example = "7")]
    tz: Option<String>,
}

/// The query the alarm operations other than events document: `tz`
/// ([`AlarmParams`] reads it; `start` and `end` mean nothing to them).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Describes the query in the OpenAPI document only.
pub struct ZoneParams {
    /// Time zone of the rendered times, as on the data endpoints. Default: the server's --default-tz.
    #[param(example = "7")]
    tz: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for AlarmParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))
    }
}

impl AlarmParams {
    fn clock(&self, state: &AppState) -> Result<Clock, ApiError> {
        let zone = state.rules.zone(self.tz.as_deref()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        Ok(Clock::new(zone))
    }
}

/// The `{rule}` of the path.
pub struct RulePath(String);

impl<S: Send + Sync> FromRequestParts<S> for RulePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        super::auth::path_param(parts, state, "rule").await.map(RulePath).ok_or(ApiError::NotFound)
    }
}

const ALARMS: &str = "Each rule of the device, in rule order, with its state";
const ACTIVE: &str = "The active alarms of every device the caller sees, the deepest into its bands first";
const EVENTS: &str = "The device's transitions recorded in the range, oldest first";

/// A device's alarms (Basic).
#[utoipa::path(get, path = "/external/v1/devices/{device_id}/alarms", tag = "alarms",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), ZoneParams),
    responses(
        (status = 200, description = ALARMS, body = AlarmList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn alarms_basic(
    state: State<AppState>,
    caller: BasicCaller,
    device: DevicePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    device_alarms(state, caller, device, params).await
}

/// A device's alarms (API key id in the path).
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices/{device_id}/alarms", tag = "alarms",
    params(
        ("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"),
        ("device_id" = String, Path, description = "Device id"),
        ZoneParams,
    ),
    responses(
        (status = 200, description = ALARMS, body = AlarmList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn alarms_public(
    state: State<AppState>,
    caller: PublicCaller,
    device: DevicePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    device_alarms(state, caller, device, params).await
}

async fn device_alarms<C: Into<Caller>>(
    State(state): State<AppState>,
    caller: C,
    DevicePath(device_id): DevicePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    let mut clock = params.clock(&state)?;
    let caller = caller.into();
    let alarms = state.store.alarms(caller.scope, &device_id).await?.ok_or(ApiError::DeviceNotFound)?;
    let views = alarms.iter().map(|a| clock.alarm(a)).collect();
    Ok(success(with_permission(&state, &caller, views).await?))
}

/// `views` with whether the caller may acknowledge each: an account that
/// owns the device or holds a write grant may; a key never does.
async fn with_permission(
    state: &AppState,
    caller: &Caller,
    mut views: Vec<AlarmView>,
) -> Result<Vec<AlarmView>, ApiError> {
    let account = match &caller.credential {
        Credential::Account { account_id, .. } => Some(*account_id),
        Credential::Key(_) => None,
    };
    let mut known: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for view in &mut views {
        let may = match (account, known.get(&view.device_id)) {
            (None, _) => false,
            (Some(_), Some(may)) => *may,
            (Some(account), None) => {
                let device = state.store.writable_device(account, &view.device_id, None).await?;
                let may = device.is_some_and(|(_, may)| may);
                known.insert(view.device_id.clone(), may);
                may
            }
        };
        view.may_acknowledge = Some(may);
    }
    Ok(views)
}

/// The active alarms of every device the caller sees (Basic).
#[utoipa::path(get, path = "/external/v1/alarms", tag = "alarms",
    security(("basicAuth" = [])),
    params(ZoneParams),
    responses(
        (status = 200, description = ACTIVE, body = AlarmList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn active_basic(
    state: State<AppState>,
    caller: BasicCaller,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    active(state, caller, params).await
}

/// The active alarms of every device the key sees.
#[utoipa::path(get, path = "/external/v1/{api_key_id}/alarms", tag = "alarms",
    params(("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"), ZoneParams),
    responses(
        (status = 200, description = ACTIVE, body = AlarmList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn active_public(
    state: State<AppState>,
    caller: PublicCaller,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    active(state, caller, params).await
}

async fn active<C: Into<Caller>>(
    State(state): State<AppState>,
    caller: C,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    let mut clock = params.clock(&state)?;
    let caller = caller.into();
    let alarms = state.store.active_alarms(caller.scope).await?;
    let views = alarms.iter().map(|a| clock.alarm(a)).collect();
    Ok(success(with_permission(&state, &caller, views).await?))
}

/// A device's transitions in a range (Basic).
#[utoipa::path(get, path = "/external/v1/devices/{device_id}/alarms/events", tag = "alarms",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), AlarmParams),
    responses(
        (status = 200, description = EVENTS, body = AlarmEventList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn events_basic(
    state: State<AppState>,
    caller: BasicCaller,
    device: DevicePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    events(state, caller, device, params).await
}

/// A device's transitions in a range (API key id in the path).
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices/{device_id}/alarms/events", tag = "alarms",
    params(
        ("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints"),
        ("device_id" = String, Path, description = "Device id"),
        AlarmParams,
    ),
    responses(
        (status = 200, description = EVENTS, body = AlarmEventList),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 404, description = "Device not found", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn events_public(
    state: State<AppState>,
    caller: PublicCaller,
    device: DevicePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    events(state, caller, device, params).await
}

async fn events<C: Into<Caller>>(
    State(state): State<AppState>,
    caller: C,
    DevicePath(device_id): DevicePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    let query = RangeQuery { start: params.start.as_deref(), end: params.end.as_deref(), tz: params.tz.as_deref() };
    let resolved =
        state.rules.resolve(query, jiff::Timestamp::now()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let mut clock = params.clock(&state)?;
    let events = state
        .store
        .alarm_events(caller.into().scope, &device_id, resolved.range)
        .await?
        .ok_or(ApiError::DeviceNotFound)?;
    Ok(success(events.iter().map(|e| clock.event(e)).collect::<Vec<_>>()))
}

/// Acknowledges a device's active alarm (Basic).
#[utoipa::path(post, path = "/external/v1/devices/{device_id}/alarms/{rule}/acknowledge", tag = "alarms",
    security(("basicAuth" = [])),
    params(("device_id" = String, Path, description = "Device id"), ("rule" = String, Path, description = "The rule's name"), ZoneParams),
    responses(
        (status = 200, description = "The acknowledgement, as recorded", body = Acknowledged),
        (status = 400, description = "Bad Request, with a detail", body = ErrorBody),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account may see the device but neither owns it nor holds a write grant", body = ErrorBody),
        (status = 404, description = "Device not found, or Not Found: the device has no such rule", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 409, description = "Conflict: the alarm is not active", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn acknowledge(
    State(state): State<AppState>,
    BasicCaller(caller): BasicCaller,
    DevicePath(device_id): DevicePath,
    RulePath(rule): RulePath,
    params: AlarmParams,
) -> Result<Response, ApiError> {
    let mut clock = params.clock(&state)?;
    let Credential::Account { account_id, .. } = caller.credential else { return Err(ApiError::Forbidden) };
    let (_, may_write) =
        state.store.writable_device(account_id, &device_id, None).await?.ok_or(ApiError::DeviceNotFound)?;
    if !may_write {
        return Err(ApiError::WriteForbidden(format!(
            "acknowledging an alarm of device {device_id:?} needs owning it or a write grant"
        )));
    }
    let now = jiff::Timestamp::now().as_second();
    let event = state.store.acknowledge_alarm(&device_id, &rule, now).await.map_err(|e| match e {
        StoreError::NotFound(_) => ApiError::NotFound,
        StoreError::Conflict(why) => ApiError::Conflict(why),
        other => other.into(),
    })?;
    Ok(success(clock.event(&event)))
}
