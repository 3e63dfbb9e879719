//! GET /devices (Basic) and GET /{api_key_id}/devices (public): the devices
//! a caller may see, ordered by `device_id`.

use super::AppState;
use super::auth::{BasicCaller, Caller, PublicCaller};
use super::error::{ApiError, success};
use axum::extract::State;
use axum::response::Response;

/// Spec 4.1.
pub async fn list_basic(State(state): State<AppState>, BasicCaller(caller): BasicCaller) -> Result<Response, ApiError> {
    list(&state, caller).await
}

/// Spec 4.3.
pub async fn list_public(
    State(state): State<AppState>,
    PublicCaller(caller): PublicCaller,
) -> Result<Response, ApiError> {
    list(&state, caller).await
}

async fn list(state: &AppState, caller: Caller) -> Result<Response, ApiError> {
    let devices = state.store.list_devices(caller.scope).await?;
    Ok(success(devices))
}
