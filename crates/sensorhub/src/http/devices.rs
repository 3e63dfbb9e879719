//! GET /devices (Basic) and GET /{api_key_id}/devices (public): the devices
//! a caller may see, ordered by `device_id`.

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller};
use super::error::{ApiError, success};
use super::schema::{DeviceList, ErrorBody};
use axum::extract::State;
use axum::response::Response;

/// Spec 4.1.
#[utoipa::path(get, path = "/external/v1/devices", tag = "devices",
    security(("basicAuth" = [])),
    responses(
        (status = 200, description = "Devices the account may see, ordered by device_id", body = DeviceList),
        (status = 401, description = "Unauthorized", body = ErrorBody),
        (status = 403, description = "Forbidden: the account is disabled", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn list_basic(state: State<AppState>, caller: BasicCaller) -> Result<Response, ApiError> {
    list(state, caller).await
}

/// Spec 4.3.
#[utoipa::path(get, path = "/external/v1/{api_key_id}/devices", tag = "devices",
    params(("api_key_id" = String, Path, description = "API key id: the credential of the public endpoints")),
    responses(
        (status = 200, description = "Devices the key may see, ordered by device_id", body = DeviceList),
        (status = 403, description = "Forbidden: unknown or revoked key, or disabled account", body = ErrorBody),
        (status = 405, description = "Method Not Allowed", body = ErrorBody),
        (status = 429, description = "To Many Request", body = ErrorBody),
    ))]
pub async fn list_public(state: State<AppState>, caller: PublicCaller) -> Result<Response, ApiError> {
    list(state, caller).await
}

/// Spec 4.1 (with [`BasicCaller`]) and 4.3 (with [`PublicCaller`]).
async fn list<C: Into<Caller>>(State(state): State<AppState>, caller: C) -> Result<Response, ApiError> {
    let devices = state.store.list_devices(caller.into().scope).await?;
    Ok(success(devices))
}
